#!/usr/bin/env python3
"""Quantization figures for the Deep-MNIST CNN, one run: our reference guide's table.

For MNIST and Fashion-MNIST (each trained 5 epochs unless its run exists): fp32; 8-bit weights
(float compute); the eightbit integer graph with ranges found at run time; calibrated on 10 and
on 1,000 training images. Test accuracy, file size, batch-1 latency and batch-64 throughput.
Then accuracy vs weight bits 2..8, linear vs k-means (weights only), and linear per channel
without and with quantization-aware fine-tuning (QAT, one epoch per bit width). The peer: PyTorch 1.13's
own int8 path (FX post-training static quantization; Debian's build has the onednn engine) on the same architecture, batch-1
latency fp32 vs int8. ONNX Runtime 1.30's int8 path on the same QDQ models: the calibrated
Deep-MNIST CNN (`slimflow export`) at batch 1 and 64, and resnet18 and mobilenet_v2 (224x224,
from bench/export_onnx_models.py, calibrated per channel on a few synthetic images: latency is
the point, not accuracy) at batch 1, each against `slimflow bench` on the .sfm it came from.

    /usr/bin/python3 bench/quantization.py [--threads 2] [--json] [--ort-runs 100]
    /usr/bin/python3 bench/quantization.py --ort-only   # just the ONNX Runtime int8 comparison
    /usr/bin/python3 bench/quantization.py --qat-only   # just accuracy vs bits with and without QAT
"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np
from PIL import Image

from bench_common import ROOT, run, last_json

OUT = os.path.join("runs", "bench-quant")
DATA = {"mnist": "runs/mnist", "fashion-mnist": "runs/fashion"}
ORT_MODELS = ["resnet18", "mobilenet_v2"]


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
x64 = torch.rand(64, 1, 28, 28)
def median_seconds(m, x, runs):
    with torch.no_grad():
        for _ in range(max(runs // 6, 3)): m(x)
        t = []
        for _ in range(runs):
            s = time.perf_counter(); m(x); t.append(time.perf_counter() - s)
    return sorted(t)[len(t) // 2]
q = prepare_fx(net, get_default_qconfig_mapping(engine), example_inputs=(x,))
with torch.no_grad():
    for _ in range(10): q(torch.rand(8, 1, 28, 28))
q = convert_fx(q)
print(json.dumps(dict(fp32_ms=median_seconds(net, x, 300) * 1e3,
                      int8_ms=median_seconds(q, x, 300) * 1e3,
                      fp32_b64_per_sec=64 / median_seconds(net, x64, 30),
                      int8_b64_per_sec=64 / median_seconds(q, x64, 30), engine=engine)))
"""
    proc = subprocess.run(["/usr/bin/python3", "-c", code], stdout=subprocess.PIPE, text=True,
                          env=dict(os.environ, OPENBLAS_CORETYPE="Cooperlake",
                                   OPENBLAS_NUM_THREADS="1"))
    return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None


def ort_int8_peer(sf, t, runs):
    """Our int8 models vs ONNX Runtime int8 on their QDQ export: latency side by side."""
    onnx_dir = os.path.join(ROOT, "runs", "onnx")
    if not all(os.path.exists(os.path.join(onnx_dir, f"{m}.onnx")) for m in ORT_MODELS):
        run(["/usr/bin/python3", "bench/export_onnx_models.py", "--out", "runs/onnx"])
    mnist_q = os.path.join(OUT, "mnist-4.sfm")  # eightbit, 1000 calibration images
    if not os.path.exists(os.path.join(ROOT, mnist_q)):
        run([sf, "freeze", DATA["mnist"], "--out", os.path.join(OUT, "mnist-fp32.sfm")])
        run([sf, "quantize", os.path.join(OUT, "mnist-fp32.sfm"), "--mode", "eightbit",
             "--calib-data", "mnist", "--calib-count", "1000", "--threads", t, "--out", mnist_q])
    mnist_input = os.path.join(OUT, "mnist-input.npy")
    np.save(os.path.join(ROOT, mnist_input),
            np.random.default_rng(0).random((1, 28, 28, 1), dtype=np.float32))
    models = {"deep-mnist": (mnist_q, mnist_input)}
    with tempfile.TemporaryDirectory() as images:
        rng = np.random.default_rng(1)
        for i in range(8):
            Image.fromarray(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)).save(
                os.path.join(images, f"{i}.png"))
        for name in ORT_MODELS:
            q = os.path.join(OUT, f"{name}-q.sfm")
            run([sf, "quantize", f"runs/onnx/{name}.onnx", "--mode", "eightbit", "--per-channel",
                 "--calib-data", images, "--calib-count", "8", "--input-mean", "127.5",
                 "--input-std", "127.5", "--threads", t, "--out", q])
            models[name] = (q, f"runs/onnx/{name}-input.npy")
    rows = {}
    for name, (q, x) in models.items():
        qdq = q[:-len(".sfm")] + ".onnx"
        run([sf, "export", q, "--out", qdq])
        batches = (1, 64) if name == "deep-mnist" else (1,)
        for batch in batches:
            n = str(runs if batch == 1 else max(runs // 10, 5))
            ours = last_json(run([sf, "bench", "--model", q, "--batch", str(batch), "--threads", t,
                                  "--runs", n, "--json"]))
            ort_out = q[:-len(".sfm")] + "-ort.npy"
            ort = last_json(run(["node", "bench/ort_runner.js", qdq, x,
                                 ort_out if batch == 1 else "", "--runs", n, "--threads", t,
                                 "--batch", str(batch)]))
            row = {"slimflow_ms": ours["latency_ms_median"], "ort_ms": ort["latency_ms_median"],
                   "ratio": ort["latency_ms_median"] / ours["latency_ms_median"]}
            if batch == 1:
                out_dir = q[:-len(".sfm")] + "-slimflow"
                run([sf, "run", "--model", q, "--input", x, "--output-dir", out_dir, "--threads", t])
                output = last_json(run([sf, "inspect", q, "--json"]))["outputs"][0]
                ours_out = np.load(os.path.join(ROOT, out_dir, f"{output}.npy"))
                row["max_abs_diff"] = float(np.abs(ours_out - np.load(os.path.join(ROOT, ort_out))).max())
            rows[f"{name} b{batch}"] = row
    return rows


def ort_table(rows, threads):
    lines = [f"\nint8 on the same QDQ model, {threads} threads, median ms (ratio > 1: slimflow faster)",
             f"{'model':20}{'slimflow':>10}{'ORT int8':>10}{'ratio':>8}{'max |diff|':>12}"]
    for name, r in rows.items():
        diff = f"{r['max_abs_diff']:12.2e}" if "max_abs_diff" in r else ""
        lines.append(f"{name:20}{r['slimflow_ms']:10.3f}{r['ort_ms']:10.3f}{r['ratio']:7.2f}x{diff}")
    return "\n".join(lines)


def qat_sweep(sf, t, epochs):
    """MNIST accuracy with weights stored linear per-channel at 2..8 bits, without and with
    quantization-aware fine-tuning of the fp32 run (`train --init-from runs/mnist --qat B`)."""
    fp32_run = DATA["mnist"]
    if not os.path.exists(os.path.join(ROOT, fp32_run, "checkpoint.sfck")):
        run([sf, "train", "--overwrite", "--model", "models/deep-mnist.yaml", "--data", "mnist", "--epochs", "5",
             "--threads", t, "--out", fp32_run, "--quiet"])
    fp32 = os.path.join(OUT, "mnist-fp32.sfm")
    if not os.path.exists(os.path.join(ROOT, fp32)):
        run([sf, "freeze", fp32_run, "--out", fp32])

    def accuracy(model):
        return last_json(run([sf, "eval", "--model", model, "--data", "mnist", "--threads", t,
                              "--json"]))["accuracy"]

    out = {}
    for b in range(2, 9):
        path = os.path.join(OUT, f"mnist-channel{b}.sfm")
        run([sf, "quantize", fp32, "--mode", "weights", "--bits", str(b), "--per-channel",
             "--out", path])
        out[f"channel{b}"] = accuracy(path)
        qat_run = os.path.join(OUT, f"qat{b}")
        if not os.path.exists(os.path.join(ROOT, qat_run, "checkpoint.sfck")):
            run([sf, "train", "--overwrite", "--init-from", fp32_run, "--qat", str(b), "--epochs", str(epochs),
                 "--lr", "0.0001", "--threads", t, "--out", qat_run, "--quiet"])
        run([sf, "freeze", qat_run, "--out", qat_run + ".sfm"])
        path = os.path.join(OUT, f"mnist-qat{b}.sfm")
        run([sf, "quantize", qat_run + ".sfm", "--mode", "weights", "--bits", str(b),
             "--per-channel", "--out", path])
        out[f"qat{b}"] = accuracy(path)
    return out


def print_bits_table(bits, qat_epochs):
    print("\nMNIST accuracy vs weight bits (weights only, float compute)")
    print(f"{'bits':>36}" + "".join(f"{b:>8}" for b in range(2, 9)))
    rows = {"linear": "linear per tensor", "kmeans": "k-means codebook",
            "channel": "linear per channel",
            "qat": f"linear per channel + QAT ({qat_epochs} epoch{'s' if qat_epochs > 1 else ''})"}
    for key, label in rows.items():
        if f"{key}2" in bits:
            print(f"{label:>36}" + "".join(f"{100 * bits[f'{key}{b}']:7.2f}%" for b in range(2, 9)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2")
    parser.add_argument("--slimflow", default="build/release/slimflow")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--ort-runs", type=int, default=100,
                        help="batch-1 runs per model in the ONNX Runtime int8 comparison")
    parser.add_argument("--ort-only", action="store_true",
                        help="only the ONNX Runtime int8 comparison")
    parser.add_argument("--qat-epochs", type=int, default=1,
                        help="epochs of quantization-aware fine-tuning per bit width")
    parser.add_argument("--qat-only", action="store_true",
                        help="only the accuracy-vs-bits sweep with and without QAT")
    args = parser.parse_args()
    sf, t = args.slimflow, args.threads
    os.makedirs(os.path.join(ROOT, OUT), exist_ok=True)
    if args.qat_only:
        bits = qat_sweep(sf, t, args.qat_epochs)
        print(json.dumps(bits) if args.json else "")
        if not args.json:
            print_bits_table(bits, args.qat_epochs)
        return
    if args.ort_only:
        ort_rows = ort_int8_peer(sf, t, args.ort_runs)
        print(json.dumps(ort_rows) if args.json else ort_table(ort_rows, t))
        return

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
            run([sf, "train", "--overwrite", "--model", "models/deep-mnist.yaml", "--data", data, "--epochs", "5",
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
    qat = qat_sweep(sf, t, args.qat_epochs)
    bits.update(qat)
    peer = pytorch_peer(t)
    ort_rows = ort_int8_peer(sf, t, args.ort_runs)
    result = {"table": table, "bits": bits, "pytorch": peer, "onnxruntime_int8": ort_rows}
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
    print_bits_table(bits, args.qat_epochs)
    ours = table["mnist"]
    fp32, int8 = ours["fp32"], ours["eightbit, 1000 images"]
    print(f"\nint8 vs our own fp32: batch 1 {fp32['b1_ms'] / int8['b1_ms']:.2f}x, "
          f"batch 64 {int8['b64_per_sec'] / fp32['b64_per_sec']:.2f}x")
    if peer:
        print(f"same network, PyTorch 1.13 ({peer['engine']}): batch-1 fp32 {peer['fp32_ms']:.3f} ms, "
              f"int8 {peer['int8_ms']:.3f} ms; batch-64 fp32 {peer['fp32_b64_per_sec']:.0f}, "
              f"int8 {peer['int8_b64_per_sec']:.0f} images/s")
        print(f"slimflow int8 vs PyTorch int8: batch 1 {peer['int8_ms'] / int8['b1_ms']:.2f}x, "
              f"batch 64 {int8['b64_per_sec'] / peer['int8_b64_per_sec']:.2f}x")
    print(ort_table(ort_rows, t))


if __name__ == "__main__":
    main()
