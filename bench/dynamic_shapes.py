"""Dynamic shapes: latency and the cost of planning a new input shape vs ONNX Runtime 1.30.

One ONNX file (tests/scripts/export_dynamic_models.py: a conv net exported by PyTorch 1.13 with
symbolic batch, height and width, whose shape subgraphs read the input) is run at several input
shapes by `slimflow bench --input-shape` and by bench/ort_runner.js, alternating rounds. For each
shape it prints the median latency of both, their ratio (> 1: slimflow faster), the planning
cost of that new shape (import specialized to it + passes + first run, `plan_cache.last_plan_ms`
of bench --json) and the plan cache's bytes; outputs are checked against ONNX Runtime.

  /usr/bin/python3 bench/dynamic_shapes.py [--runs 50] [--rounds 3] [--threads 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

import numpy as np

from bench_common import ROOT, cpu_flags

SHAPES = [(1, 3, 32, 32), (8, 3, 32, 32), (1, 3, 96, 128), (4, 3, 64, 48)]


def run(cmd):
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: {proc.stderr.strip()}")
    return proc.stdout


def last_json(text):
    return json.loads([l for l in text.splitlines() if l.startswith("{")][-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--slimflow", default=os.path.join(ROOT, "build/release/slimflow"))
    args = parser.parse_args()
    print(f"CPU features: {cpu_flags()}")
    with tempfile.TemporaryDirectory() as tmp:
        run(["/usr/bin/python3", "tests/scripts/export_dynamic_models.py", tmp])
        model = os.path.join(tmp, "dynamic_cnn.onnx")
        rows = []
        for shape in SHAPES:
            dims = ",".join(map(str, shape))
            x = os.path.join(tmp, "x.npy")
            np.save(x, np.random.default_rng(0).standard_normal(shape).astype(np.float32))
            ort_out = os.path.join(tmp, "ort.npy")
            ours_dir = os.path.join(tmp, "ours")
            run([args.slimflow, "run", "--model", model, "--input", f"x={x}", "--output-dir",
                 ours_dir, "--threads", str(args.threads)])
            ours, theirs = [], []
            for _ in range(args.rounds):
                theirs.append(last_json(run(["node", "bench/ort_runner.js", model, x, ort_out,
                                             "--runs", str(args.runs),
                                             "--threads", str(args.threads)])))
                ours.append(last_json(run([args.slimflow, "bench", "--model", model,
                                           "--input-shape", f"x={dims}", "--threads",
                                           str(args.threads), "--runs", str(args.runs),
                                           "--json"])))
            err = float(np.abs(np.load(os.path.join(ours_dir, "logits.npy")) -
                               np.load(ort_out)).max())
            ratios = [t["latency_ms_median"] / o["latency_ms_median"] for o, t in zip(ours, theirs)]
            rows.append({
                "input_shape": list(shape),
                "max_abs_err_vs_ort": err,
                "slimflow_latency_ms": statistics.median(o["latency_ms_median"] for o in ours),
                "ort_latency_ms": statistics.median(t["latency_ms_median"] for t in theirs),
                "latency_ratio": statistics.median(ratios),
                "plan_new_shape_ms": statistics.median(o["plan_cache"]["last_plan_ms"] for o in ours),
                "plan_cache_bytes": ours[-1]["plan_cache"]["bytes"],
            })
            r = rows[-1]
            print(f"{dims:>12}: slimflow {r['slimflow_latency_ms']:.3f} ms, ONNX Runtime "
                  f"{r['ort_latency_ms']:.3f} ms ({r['latency_ratio']:.2f}x); new shape planned in "
                  f"{r['plan_new_shape_ms']:.1f} ms; plan cache {r['plan_cache_bytes']} bytes; "
                  f"max |err| {err:.2g}")
        print(json.dumps({"cpu_features": cpu_flags(), "rows": rows}))


if __name__ == "__main__":
    main()
