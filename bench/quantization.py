#!/usr/bin/env python3
"""Quantization figures for the Deep-MNIST CNN, one run: our reference guide's table.

For MNIST and Fashion-MNIST (each trained 5 epochs unless its run exists): fp32; 8-bit weights
(float compute); the eightbit integer graph with ranges found at run time; calibrated on 10 and
on 1,000 training images. Test accuracy, file size, batch-1 latency and batch-64 throughput.
Then accuracy vs weight bits 2..8, linear vs k-means (weights only). The peer: PyTorch 1.13's
own int8 path (FX post-training static quantization; Debian's build has the onednn engine) on the same architecture, batch-1
latency fp32 vs int8.

    /usr/bin/python3 bench/quantization.py [--threads 2] [--json]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join("runs", "bench-quant")
DATA = {"mnist": "runs/mnist", "fashion-mnist": "runs/fashion"}


def run(cmd):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}")
    return proc.stdout


def last_json(text):
    return json.loads([l for l in text.splitlines() if l.startswith("{")][-1])


def pytorch_peer(threads):
    code = f"""
import json, time, torch
from torch import nn
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.quantize_fx import prepare_fx, convert_fx
torch.set_num_threads({threads})
engine = "onednn" if "onednn" in torch.backends.quantized.supported_engines else "qnnpack"
torch.backends.quantized.engine = engine
net = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                    nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                    nn.Linear(3136, 1024), nn.ReLU(), nn.Linear(1024, 10)).eval()
x = torch.rand(1, 1, 28, 28)
def latency(m):
    with torch.no_grad():
        for _ in range(50): m(x)
        t = []
        for _ in range(300):
            s = time.perf_counter(); m(x); t.append(time.perf_counter() - s)
    return sorted(t)[len(t) // 2] * 1e3
fp32 = latency(net)
q = prepare_fx(net, get_default_qconfig_mapping(engine), example_inputs=(x,))
with torch.no_grad():
    for _ in range(10): q(torch.rand(8, 1, 28, 28))
q = convert_fx(q)
print(json.dumps(dict(fp32_ms=fp32, int8_ms=latency(q), engine=engine)))
"""
    proc = subprocess.run(["/usr/bin/python3", "-c", code], stdout=subprocess.PIPE, text=True,
                          env=dict(os.environ, OPENBLAS_CORETYPE="Cooperlake",
                                   OPENBLAS_NUM_THREADS="1"))
    return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2")
    parser.add_argument("--slimflow", default="build/release/slimflow")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sf, t = args.slimflow, args.threads
    os.makedirs(os.path.join(ROOT, OUT), exist_ok=True)

    def measure(model, data):
        acc = last_json(run([sf, "eval", "--model", model, "--data", data, "--threads", t,
                             "--json"]))["accuracy"]
        b1 = last_json(run([sf, "bench", "--model", model, "--batch", "1", "--threads", t,
                            "--runs", "300", "--json"]))
        b64 = last_json(run([sf, "bench", "--model", model, "--batch", "64", "--threads", t,
                             "--runs", "30", "--json"]))
        return {"accuracy": acc, "bytes": b1["model_bytes"], "b1_ms": b1["latency_ms_median"],
                "b64_per_sec": b64["throughput_per_sec"]}

    table = {}
    for data, run_dir in DATA.items():
        if not os.path.exists(os.path.join(ROOT, run_dir, "checkpoint.sfck")):
            run([sf, "train", "--model", "models/deep-mnist.yaml", "--data", data, "--epochs", "5",
                 "--threads", t, "--out", run_dir, "--quiet"])
        base = os.path.join(OUT, data)
        variants = {
            "fp32": [],
            "weights 8-bit": ["--mode", "weights"],
            "eightbit, run-time ranges": ["--mode", "eightbit"],
            "eightbit, 10 images": ["--mode", "eightbit", "--calib-data", data,
                                    "--calib-count", "10"],
            "eightbit, 1000 images": ["--mode", "eightbit", "--calib-data", data,
                                      "--calib-count", "1000"],
        }
        run([sf, "freeze", run_dir, "--out", base + "-fp32.sfm"])
        rows = {}
        for i, (name, flags) in enumerate(variants.items()):
            path = base + f"-{i}.sfm" if flags else base + "-fp32.sfm"
            if flags:
                run([sf, "quantize", base + "-fp32.sfm", *flags, "--threads", t, "--out", path])
            rows[name] = measure(path, data)
        table[data] = rows

    bits = {}
    for scheme in ("linear", "kmeans"):
        for b in range(2, 9):
            path = os.path.join(OUT, f"mnist-{scheme}{b}.sfm")
            run([sf, "quantize", os.path.join(OUT, "mnist-fp32.sfm"), "--mode", "weights",
                 "--bits", str(b), "--scheme", scheme, "--out", path])
            bits[f"{scheme}{b}"] = last_json(run([sf, "eval", "--model", path, "--data", "mnist",
                                                  "--threads", t, "--json"]))["accuracy"]
    peer = pytorch_peer(t)
    result = {"table": table, "bits": bits, "pytorch": peer}
    with open(os.path.join(ROOT, OUT, "results.json"), "w") as f:
        json.dump(result, f)
    if args.json:
        print(json.dumps(result))
        return
    for data, rows in table.items():
        fp32 = rows["fp32"]
        print(f"\nDeep-MNIST CNN on {data}, {t} threads")
        print(f"{'':28}{'accuracy':>10}{'vs fp32':>9}{'bytes':>11}{'of fp32':>9}"
              f"{'b1 ms':>8}{'b64 img/s':>11}")
        for name, r in rows.items():
            print(f"{name:28}{100 * r['accuracy']:9.2f}%{100 * (r['accuracy'] - fp32['accuracy']):+8.2f}"
                  f"{r['bytes']:11d}{100 * r['bytes'] / fp32['bytes']:8.1f}%"
                  f"{r['b1_ms']:8.3f}{r['b64_per_sec']:11.0f}")
    print("\nMNIST accuracy vs weight bits (weights only, float compute)")
    print(f"{'bits':>6}" + "".join(f"{b:>8}" for b in range(2, 9)))
    for scheme in ("linear", "kmeans"):
        print(f"{scheme:>6}" + "".join(f"{100 * bits[f'{scheme}{b}']:7.2f}%" for b in range(2, 9)))
    if peer:
        ours = table["mnist"]
        print(f"\nbatch-1 latency, same network: slimflow fp32 {ours['fp32']['b1_ms']:.3f} ms, "
              f"int8 {ours['eightbit, 1000 images']['b1_ms']:.3f} ms; PyTorch 1.13 fp32 "
              f"{peer['fp32_ms']:.3f} ms, int8 ({peer['engine']}) {peer['int8_ms']:.3f} ms")


if __name__ == "__main__":
    main()
