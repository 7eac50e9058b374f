#!/usr/bin/env python3
"""Sequence models, slimflow vs ONNX Runtime 1.30 on the same PyTorch 1.13 exports, same run.

A transformer encoder (--encoder LAYERSxWIDTH, default 4x256: 4 heads, feed-forward twice the
width, GELU) at sequence length --sequence, and a 1-D conv + bidirectional GRU over --time
steps (tests/scripts/export_dynamic_models.py writes both, with symbolic batch and length).
Batch 1 and 8, --threads threads; the engines take turns for --rounds rounds of --runs runs,
and each round gives a ratio of medians (> 1: slimflow faster). Outputs are checked against
ONNX Runtime first (max abs difference).

Row "encoder-int8": our `quantize --mode eightbit` of the encoder (made at each batch's shape,
activation ranges calibrated on 32 random example inputs given as .npy), in the same rounds,
against ONNX Runtime on the float model; row "encoder-int8/qdq": the same int8 model against
ONNX Runtime running it too, exported by `slimflow export` as a QDQ model (ONNX Runtime's own
int8 kernels); its max diff is between the two engines' int8 outputs.

    /usr/bin/python3 bench/sequence_models.py [--encoder 4x256] [--sequence 128] [--time 100]
        [--runs 20] [--rounds 3] [--threads 2] [--models encoder,audio] [--json]
"""
import argparse
import json
import os
import statistics

import numpy as np

from bench_common import ROOT, cpu_flags, last_json, run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", default="4x256")
    parser.add_argument("--sequence", type=int, default=128)
    parser.add_argument("--time", type=int, default=100)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dir", default="runs/sequence")
    parser.add_argument("--slimflow", default="build/release/slimflow")
    parser.add_argument("--models", default="encoder,audio",
                        help="which of encoder, audio (the conv + GRU model) to run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = os.path.join(ROOT, args.dir)
    os.makedirs(out, exist_ok=True)
    run(["/usr/bin/python3", "tests/scripts/export_dynamic_models.py", out, "--encoder", args.encoder])
    t = str(args.threads)
    rows = []
    models = [("encoder", [1, args.sequence, 16]), ("audio", [1, 8, args.time])]
    unknown = set(args.models.split(",")) - {name for name, _ in models}
    if unknown:
        parser.error(f"--models: unknown {', '.join(sorted(unknown))} (encoder, audio)")
    for model, shape in [(m, s) for m, s in models if m in args.models.split(",")]:
        onnx_path = os.path.join(out, f"{model}.onnx")
        x = os.path.join(out, f"{model}-input.npy")
        np.save(x, np.random.RandomState(0).randn(*shape).astype(np.float32))
        ort_out = os.path.join(out, f"{model}-ort.npy")
        run(["node", "bench/ort_runner.js", onnx_path, x, ort_out, "--runs", "1", "--threads", t])
        run([args.slimflow, "run", "--model", onnx_path, "--input", f"x={x}", "--output-dir",
             os.path.join(out, f"{model}-slimflow"), "--threads", t])
        diff = float(np.abs(np.load(os.path.join(out, f"{model}-slimflow", "y.npy")) -
                            np.load(ort_out)).max())
        int8, int8_diff, qdq_diff = model == "encoder", None, None
        calibration = os.path.join(out, f"{model}-calibration.npy")
        np.save(calibration, np.random.RandomState(1).randn(32, *shape[1:]).astype(np.float32))
        for batch in [1, 8]:
            dims = ",".join(str(d) for d in [batch] + shape[1:])
            quantized = os.path.join(out, f"{model}-int8-b{batch}.sfm")
            qdq = os.path.join(out, f"{model}-int8-b{batch}-qdq.onnx")
            if int8:
                run([args.slimflow, "quantize", onnx_path, "--input-shape", f"x={dims}", "--mode",
                     "eightbit", "--calib-data", calibration, "--out", quantized, "--threads", t])
                run([args.slimflow, "export", quantized, "--out", qdq])
                if batch == 1:  # the difference at batch 1, as for the float model
                    run([args.slimflow, "run", "--model", quantized, "--input", f"x={x}",
                         "--output-dir", os.path.join(out, f"{model}-int8"), "--threads", t])
                    ours_y = np.load(os.path.join(out, f"{model}-int8", "y.npy"))
                    int8_diff = float(np.abs(ours_y - np.load(ort_out)).max())
                    qdq_out = os.path.join(out, f"{model}-int8-ort.npy")
                    run(["node", "bench/ort_runner.js", qdq, x, qdq_out, "--runs", "1",
                         "--threads", t])
                    qdq_diff = float(np.abs(ours_y - np.load(qdq_out)).max())
            ours, ours_int8, theirs, theirs_int8 = [], [], [], []
            for _ in range(args.rounds):
                theirs.append(last_json(run(["node", "bench/ort_runner.js", onnx_path, x, "",
                                             "--runs", str(args.runs), "--threads", t,
                                             "--batch", str(batch)])))
                ours.append(last_json(run([args.slimflow, "bench", "--model", onnx_path,
                                           "--input-shape", f"x={dims}", "--threads", t,
                                           "--runs", str(args.runs), "--json"])))
                if int8:
                    ours_int8.append(last_json(run([args.slimflow, "bench", "--model", quantized,
                                                    "--batch", str(batch), "--threads", t,
                                                    "--runs", str(args.runs), "--json"])))
                    theirs_int8.append(last_json(run(["node", "bench/ort_runner.js", qdq, x, "",
                                                      "--runs", str(args.runs), "--threads", t,
                                                      "--batch", str(batch)])))
            compared = [(model, ours, theirs, diff)]
            if int8:
                compared += [(model + "-int8", ours_int8, theirs, int8_diff),
                             (model + "-int8/qdq", ours_int8, theirs_int8, qdq_diff)]
            for name, mine, peer, max_diff in compared:
                ratios = [o["latency_ms_median"] / s["latency_ms_median"]
                          for s, o in zip(mine, peer)]
                rows.append({"model": name, "input": [batch] + shape[1:], "max_abs_diff": max_diff,
                             "slimflow_ms": statistics.median(r["latency_ms_median"] for r in mine),
                             "ort_ms": statistics.median(r["latency_ms_median"] for r in peer),
                             "ratio": statistics.median(ratios), "ratio_rounds": ratios,
                             "omp_wait_policy": mine[-1].get("omp_wait_policy")})
    if args.json:
        print(json.dumps({"rows": rows, "encoder": args.encoder, "cpu_flags": cpu_flags()}))
        return
    print(f"\nencoder {args.encoder}, sequence {args.sequence}; GRU over {args.time} steps; "
          f"{args.threads} threads, {args.rounds} alternating rounds of {args.runs} runs, medians; "
          f"CPU: {cpu_flags()}")
    print(f"{'model':14}{'input':>16}{'max diff':>10}{'slimflow ms':>13}{'ORT ms':>9}{'ratio':>7}{'rounds':>13}")
    for r in rows:
        spread = f"{min(r['ratio_rounds']):.2f}-{max(r['ratio_rounds']):.2f}"
        print(f"{r['model']:14}{str(r['input']):>16}{r['max_abs_diff']:10.1e}{r['slimflow_ms']:13.2f}"
              f"{r['ort_ms']:9.2f}{r['ratio']:6.2f}x{spread:>13}")


if __name__ == "__main__":
    main()
