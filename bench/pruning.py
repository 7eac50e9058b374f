#!/usr/bin/env python3
"""Pruning figures: weights, file size, accuracy and speed of pruned models, one run.

For LeNet-300-100 and the Deep-MNIST CNN on MNIST: train the dense model (unless its run
exists), prune it with retraining (gradual magnitude schedule), freeze both, compress the pruned
one (sparse + k-means codebook + Huffman: `slimflow size-report --write`), and measure test
accuracy, weights kept, file bytes and batch-1 latency of each, and the file bytes of the
eightbit (int8) form of both (a pruned model's int8 weights are stored sparse). Each model is pruned once per
--blocks entry: 1 prunes single weights (unstructured), R whole blocks of R adjacent output
channels (`prune --block R`), which the block-sparse MatMul kernel runs faster, so the table
shows what blocks cost in accuracy next to what they gain in speed. Also: the Deep-MNIST CNN with
half its filters removed (structured pruning), the sensitivity curves, and the peer: PyTorch
1.13's own pruning (torch.nn.utils.prune) on the same network, which leaves a dense model of the
same size and speed.

    /usr/bin/python3 bench/pruning.py [--threads 2] [--epochs 4] [--blocks 1,16] [--json]

Writes runs/bench-prune/*.json (sensitivity curves, accuracy-vs-size points) and prints a table.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "runs", "bench-prune")

MODELS = {
    # name: (spec, dense run, prune target, dense epochs, retraining epochs, codebook bits).
    # Target: a model-wide sparsity (--target) or per-layer sparsities "layer=s,..."
    # (--per-layer); retraining epochs None: --epochs; bits None: --bits.
    # LeNet-300-100: one model-wide threshold leaves fc2 at ~80% and fc3 at ~50%; per layer,
    # fc1 (784x300, 88% of the weights) takes 95%, fc2 85%, fc3 (tiny, sensitive) 50%.
    "lenet-300-100": ("models/lenet-300-100.yaml", "runs/lenet300", "fc1=0.95,fc2=0.85,fc3=0.5",
                      10, 30, 4),
    # Deep-MNIST: conv2 at 90% runs in the sparse conv kernel (a model-wide 95% leaves it at
    # ~20%, dense speed); fc1 (3136x1024, 98% of the weights) takes 97%.
    "deep-mnist": ("models/deep-mnist.yaml", "runs/mnist", "conv2=0.9,fc1=0.97", 5, None, None),
}


def run(cmd, capture=True):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE if capture else None, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}")
    return proc.stdout or ""


def last_json(text):
    return json.loads([l for l in text.splitlines() if l.startswith("{")][-1])


def evaluate(sf, model, threads):
    return last_json(run([sf, "eval", "--model", model, "--data", "mnist", "--threads", threads,
                          "--json"]))["accuracy"]


def bench(sf, model, threads, runs=300):
    return last_json(run([sf, "bench", "--model", model, "--batch", "1", "--threads", threads,
                          "--runs", str(runs), "--json"]))


def pytorch_peer(threads):
    """PyTorch's pruning API on the Deep-MNIST CNN: size and batch-1 latency before/after."""
    code = f"""
import io, json, time, torch
from torch import nn
import torch.nn.utils.prune as prune
torch.set_num_threads({threads})
net = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                    nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                    nn.Linear(3136, 1024), nn.ReLU(), nn.Linear(1024, 10)).eval()
x = torch.randn(1, 1, 28, 28)
def measure():
    with torch.no_grad():
        for _ in range(50): net(x)
        times = []
        for _ in range(300):
            t = time.perf_counter(); net(x); times.append(time.perf_counter() - t)
    buf = io.BytesIO(); torch.save(net.state_dict(), buf)
    return sorted(times)[len(times) // 2] * 1e3, len(buf.getvalue())
dense_ms, dense_bytes = measure()
params = [(m, "weight") for m in net if isinstance(m, (nn.Conv2d, nn.Linear))]
prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=0.95)
for m, name in params: prune.remove(m, name)
pruned_ms, pruned_bytes = measure()
print(json.dumps(dict(dense_ms=dense_ms, dense_bytes=dense_bytes, pruned_ms=pruned_ms,
                      pruned_bytes=pruned_bytes)))
"""
    proc = subprocess.run(["/usr/bin/python3", "-c", code], stdout=subprocess.PIPE, text=True,
                          env=dict(os.environ, OPENBLAS_CORETYPE="Cooperlake",
                                   OPENBLAS_NUM_THREADS="1"))
    return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None


def structured(sf, t, epochs):
    """The Deep-MNIST CNN with half its filters and neurons removed, retrained."""
    structured_run = os.path.join("runs", "bench-prune", "deep-mnist-structured")
    result = last_json(run([sf, "prune", "runs/mnist", "--data", "mnist", "--structured",
                            "--target", "0.5", "--epochs", str(epochs), "--threads", t,
                            "--out", structured_run, "--quiet", "--json"]))
    structured_sfm = structured_run + ".sfm"
    run([sf, "freeze", structured_run, "--out", structured_sfm])
    dense_b = bench(sf, os.path.join("runs", "bench-prune", "deep-mnist.sfm"), t)
    structured_b = bench(sf, structured_sfm, t)
    return {"accuracy": evaluate(sf, structured_sfm, t),
            "weights_ratio": result["total_weights"] / result["nonzero_weights"],
            "dense_ms": dense_b["latency_ms_median"],
            "structured_ms": structured_b["latency_ms_median"],
            "speedup": dense_b["latency_ms_median"] / structured_b["latency_ms_median"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2")
    parser.add_argument("--epochs", type=int, default=4, help="retraining epochs when pruning")
    parser.add_argument("--bits", type=int, default=5,
                        help="codebook bits of the compressed file (where MODELS sets none)")
    parser.add_argument("--blocks", default="1,16",
                        help="prune --block sizes, one row each (1: single weights)")
    parser.add_argument("--slimflow", default="build/release/slimflow")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--no-structured", action="store_true", help="skip the structured run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sf, t = args.slimflow, args.threads
    os.makedirs(OUT, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        spec, dense_run, target, dense_epochs, prune_epochs, model_bits = MODELS[name]
        targeting = (["--per-layer", target] if isinstance(target, str)
                     else ["--target", str(target)])
        bits = model_bits or args.bits
        if not os.path.exists(os.path.join(ROOT, dense_run, "checkpoint.sfck")):
            run([sf, "train", "--overwrite", "--model", spec, "--data", "mnist", "--epochs", str(dense_epochs),
                 "--threads", t, "--out", dense_run, "--quiet"])
        dense_sfm = os.path.join("runs", "bench-prune", name + ".sfm")
        run([sf, "freeze", dense_run, "--out", dense_sfm])
        dense_accuracy = evaluate(sf, dense_sfm, t)
        dense_int8_sfm = os.path.join("runs", "bench-prune", name + "-int8.sfm")
        run([sf, "quantize", dense_sfm, "--mode", "eightbit", "--calib-data", "mnist",
             "--out", dense_int8_sfm, "--json"])
        for block in [int(b) for b in args.blocks.split(",")]:
            pruned = name + "-pruned" + (f"-block{block}" if block > 1 else "")
            pruned_run = os.path.join("runs", "bench-prune", pruned)
            prune = last_json(run([sf, "prune", dense_run, "--data", "mnist", *targeting,
                                   "--schedule", "gradual", "--block", str(block),
                                   "--epochs", str(prune_epochs or args.epochs),
                                   "--threads", t, "--out", pruned_run, "--quiet", "--json"]))
            pruned_sfm = pruned_run + ".sfm"
            packed_sfm = pruned_run + "-q.sfm"
            run([sf, "freeze", pruned_run, "--out", pruned_sfm])
            size = last_json(run([sf, "size-report", pruned_sfm, "--bits", str(bits),
                                  "--scheme", "kmeans", "--write", packed_sfm, "--json"]))
            with open(os.path.join(OUT, pruned.replace("-pruned", "") + "-size.json"), "w") as f:
                json.dump(size, f)
            row = {"model": name, "block": block, "target": target, "bits": bits,
                   "total_weights": prune["total_weights"],
                   "nonzero_weights": prune["nonzero_weights"],
                   "weights_ratio": prune["total_weights"] / prune["nonzero_weights"],
                   "dense_accuracy": dense_accuracy,
                   "pruned_accuracy": evaluate(sf, pruned_sfm, t),
                   "compressed_accuracy": evaluate(sf, packed_sfm, t),
                   "dense_bytes": os.path.getsize(os.path.join(ROOT, dense_sfm)),
                   "pruned_bytes": os.path.getsize(os.path.join(ROOT, pruned_sfm)),
                   "compressed_bytes": os.path.getsize(os.path.join(ROOT, packed_sfm)),
                   "size_report_ratio": size["compression_ratio"]}
            # eightbit of the pruned model stores its int8 weights sparse.
            pruned_int8_sfm = pruned_run + "-int8.sfm"
            run([sf, "quantize", pruned_sfm, "--mode", "eightbit", "--calib-data", "mnist",
                 "--out", pruned_int8_sfm, "--json"])
            row.update(dense_int8_bytes=os.path.getsize(os.path.join(ROOT, dense_int8_sfm)),
                       pruned_int8_bytes=os.path.getsize(os.path.join(ROOT, pruned_int8_sfm)),
                       pruned_int8_accuracy=evaluate(sf, pruned_int8_sfm, t))
            # Timed back to back, so that both see the same load.
            dense_b, pruned_b = bench(sf, dense_sfm, t), bench(sf, pruned_sfm, t)
            row.update(dense_ms=dense_b["latency_ms_median"],
                       pruned_ms=pruned_b["latency_ms_median"],
                       speedup=dense_b["latency_ms_median"] / pruned_b["latency_ms_median"],
                       file_ratio=row["dense_bytes"] / row["compressed_bytes"])
            rows.append(row)

    # Structured: half the filters / neurons of the Deep-MNIST CNN.
    structured_row = None
    if not args.no_structured and os.path.exists(os.path.join(ROOT, "runs/bench-prune/deep-mnist.sfm")):
        structured_row = structured(sf, t, args.epochs)
    sensitivity = last_json(run([sf, "prune", "sensitivity", "runs/mnist", "--data", "mnist",
                                 "--threads", t, "--max-drop", "0.1", "--json"]))
    with open(os.path.join(OUT, "sensitivity.json"), "w") as f:
        json.dump(sensitivity, f)
    peer = pytorch_peer(t)
    result = {"rows": rows, "structured": structured_row, "pytorch": peer}
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(result, f)
    if args.json:
        print(json.dumps(result))
        return

    print(f"\nPruning on MNIST, {t} threads (accuracy: full test set; latency: batch 1, median)")
    print(f"{'model':15}{'block':>6}{'weights kept':>14}{'fewer':>8}{'acc dense':>11}{'pruned':>9}"
          f"{'compressed':>12}{'file x':>8}{'ms dense':>10}{'pruned':>8}{'speedup':>9}")
    for r in rows:
        print(f"{r['model']:15}{r['block']:>6}{r['nonzero_weights']:>14,}{r['weights_ratio']:7.1f}x"
              f"{100 * r['dense_accuracy']:10.2f}%{100 * r['pruned_accuracy']:8.2f}%"
              f"{100 * r['compressed_accuracy']:11.2f}%{r['file_ratio']:7.1f}x"
              f"{r['dense_ms']:10.3f}{r['pruned_ms']:8.3f}{r['speedup']:8.2f}x")
    print(f"\n{'int8 files (eightbit)':22}{'dense fp32':>12}{'pruned fp32':>13}{'dense int8':>12}"
          f"{'pruned int8':>13}{'acc pruned int8':>17}")
    for r in rows:
        print(f"{r['model'] + ' b' + str(r['block']):22}{r['dense_bytes']:>12,}{r['pruned_bytes']:>13,}"
              f"{r['dense_int8_bytes']:>12,}{r['pruned_int8_bytes']:>13,}"
              f"{100 * r['pruned_int8_accuracy']:16.2f}%")
    s = structured_row
    if s:
        print(f"{'deep-mnist, half the filters (structured)':50}{100 * s['accuracy']:8.2f}%"
              f"{'':20}{s['dense_ms']:10.3f}{s['structured_ms']:8.3f}{s['speedup']:8.2f}x")
    if peer:
        print(f"PyTorch 1.13 torch.nn.utils.prune (95% global L1) on the same CNN: "
              f"{peer['dense_ms']:.3f} -> {peer['pruned_ms']:.3f} ms, "
              f"{peer['dense_bytes']:,} -> {peer['pruned_bytes']:,} bytes (dense storage)")
    print(f"sensitivity curves and size tables: {os.path.relpath(OUT, ROOT)}/")


if __name__ == "__main__":
    main()
