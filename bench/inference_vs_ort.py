#!/usr/bin/env python3
"""Inference, slimflow vs ONNX Runtime 1.30 (fp32) on the same ONNX files, same run.

For each model exported by bench/export_onnx_models.py: checks that our outputs match ONNX
Runtime's (max |ours - ort| / max |ort| <= 1e-4 in fp32; in bf16 the error is reported with
whether the top class agrees), then compares batch-1 latency (and batch-64 throughput for the
models in --batch64) with 2 threads, and peak memory. `--precision bf16` runs ours with bf16
products (`slimflow bench --precision bf16`) against ONNX Runtime's fp32.

`--competing N` runs N busy processes (one spinning Python loop each) for the whole measurement,
as when another program shares the cores; the table then also shows each engine's 90th
percentile, where a thread team that waits for a descheduled member shows first.
By default `slimflow` waits passively when the cores are busy and spins otherwise
(src/cpu/thread_wait_policy.h; `bench --json` says which); `--omp-wait-policy
active|passive` sets OMP_WAIT_POLICY for it instead, and `libgomp-default` keeps libgomp's
spin-then-sleep whatever the load (the behaviour before the choice existed).

The machine's speed drifts by tens of percent over seconds (a shared virtual machine), so one
measurement of each engine taken a minute apart can put either ahead. The two engines instead
take turns for --rounds rounds of --runs runs each, the one that goes first alternating from
round to round; every round gives a ratio from two measurements seconds apart, and the table
shows the median of those ratios and their range.

    /usr/bin/python3 bench/inference_vs_ort.py [--runs 50] [--rounds 3] [--threads 2]
        [--models a,b] [--precision fp32|bf16] [--batch64 deep-mnist,resnet18] [--json]
        [--competing N] [--omp-wait-policy active|passive|libgomp-default]
"""
import statistics
import argparse
import json
import os
import subprocess
import sys

import numpy as np

from bench_common import ROOT, cpu_flags

MODELS = ["deep-mnist", "resnet18", "mobilenet_v2", "squeezenet1_1"]


class CommandFailed(Exception):
    pass


def run(cmd, env=None):
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, **(env or {})))
    if proc.returncode != 0:
        raise CommandFailed(f"{' '.join(cmd)}: {proc.stderr.strip()}")
    return proc.stdout


def last_json(text):
    return json.loads([l for l in text.splitlines() if l.startswith("{")][-1])


def in_turn(round_index):
    """Which engine runs first in a round: ONNX Runtime in even rounds, ours in odd ones. Of two
    slimflow builds run in turn, the one started second ran 3-15% slower in 9 pairs of 9 (the
    kernel still reclaiming the first one's memory?); taking turns keeps any such effect out of
    the ratio."""
    return ("ort", "ours") if round_index % 2 == 0 else ("ours", "ort")


def measure(name, args):
    onnx_path = os.path.join(args.dir, f"{name}.onnx")
    x = os.path.join(args.dir, f"{name}-input.npy")
    ort_out = os.path.join(args.dir, f"{name}-ort.npy")
    ours_dir = os.path.join(args.dir, f"{name}-slimflow")
    t = str(args.threads)
    precision = ["--precision", args.precision]
    ours_env = None
    if args.omp_wait_policy == "libgomp-default":
        ours_env = {"SLIMFLOW_WAIT_POLICY_CHOSEN": ""}  # slimflow then leaves libgomp's default
    elif args.omp_wait_policy:
        ours_env = {"OMP_WAIT_POLICY": args.omp_wait_policy}
    run([args.slimflow, "run", "--model", onnx_path, "--input", x, "--output-dir", ours_dir,
         "--threads", t] + precision)
    ours_rounds, ort_rounds = [], []
    for i in range(args.rounds):
        for engine in in_turn(i):
            if engine == "ort":
                ort_rounds.append(last_json(run(["node", "bench/ort_runner.js", onnx_path, x,
                                                 ort_out, "--runs", str(args.runs),
                                                 "--threads", t])))
            else:
                ours_rounds.append(last_json(run([args.slimflow, "bench", "--model", onnx_path,
                                                  "--batch", "1", "--threads", t,
                                                  "--runs", str(args.runs), "--json"] + precision,
                                                 ours_env)))
    ours_out = np.load(os.path.join(ROOT, ours_dir, "output.npy"))
    theirs = np.load(os.path.join(ROOT, ort_out))
    rel_err = float(np.abs(ours_out - theirs).max() / max(np.abs(theirs).max(), 1e-30))
    ratios = [o["latency_ms_median"] / s["latency_ms_median"]
              for s, o in zip(ours_rounds, ort_rounds)]
    row = {"model": name, "precision": args.precision, "max_rel_err": rel_err,
           "outputs_match": rel_err <= 1e-4,
           "top1_agrees": bool((ours_out.reshape(ours_out.shape[0], -1).argmax(1) ==
                                theirs.reshape(theirs.shape[0], -1).argmax(1)).all()),
           "slimflow_latency_ms": statistics.median(r["latency_ms_median"] for r in ours_rounds),
           "ort_latency_ms": statistics.median(r["latency_ms_median"] for r in ort_rounds),
           "latency_ratio": statistics.median(ratios),
           "latency_ratio_rounds": ratios,
           "slimflow_p90_ms": statistics.median(r["latency_ms_p90"] for r in ours_rounds),
           "slimflow_omp_wait_policy": ours_rounds[-1].get("omp_wait_policy"),
           "ort_p90_ms": statistics.median(r["latency_ms_p90"] for r in ort_rounds),
           "slimflow_peak_rss_mb": max(r["peak_rss_mb"] for r in ours_rounds),
           "ort_peak_rss_mb": max(r["peak_rss_mb"] for r in ort_rounds)}
    if name in args.batch64.split(","):
        ours64, ort64 = [], []
        for i in range(args.rounds):
            for engine in in_turn(i):
                if engine == "ort":
                    ort64.append(last_json(run(["node", "bench/ort_runner.js", onnx_path, x, "",
                                                "--runs", str(args.runs), "--threads", t,
                                                "--batch", "64"])))
                else:
                    ours64.append(last_json(run([args.slimflow, "bench", "--model", onnx_path,
                                                 "--batch", "64", "--threads", t,
                                                 "--runs", str(args.runs), "--json"] + precision,
                                                ours_env)))
        row.update({"slimflow_b64_per_sec":
                    statistics.median(r["throughput_per_sec"] for r in ours64),
                    "ort_b64_per_sec": statistics.median(r["throughput_per_sec"] for r in ort64),
                    "b64_ratio": statistics.median(s["throughput_per_sec"] / o["throughput_per_sec"]
                                                   for s, o in zip(ours64, ort64))})
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3,
                        help="turns each engine takes, alternating (default 3)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                        help="our products' precision (ONNX Runtime runs fp32)")
    parser.add_argument("--batch64", default="deep-mnist",
                        help="models also timed at batch 64 (comma-separated)")
    parser.add_argument("--dir", default="runs/onnx")
    parser.add_argument("--slimflow", default="build/release/slimflow")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--competing", type=int, default=0,
                        help="busy processes running beside the engines (default 0)")
    parser.add_argument("--omp-wait-policy", choices=["active", "passive", "libgomp-default"],
                        help="how our engine's OpenMP threads wait (default: slimflow's choice)")
    args = parser.parse_args()
    models = args.models.split(",")
    if not all(os.path.exists(os.path.join(ROOT, args.dir, f"{m}.onnx")) for m in models):
        run(["/usr/bin/python3", "bench/export_onnx_models.py", "--out", args.dir])

    rows, failures = [], []
    competitors = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                   for _ in range(args.competing)]
    try:
        for name in models:
            try:
                rows.append(measure(name, args))
            except CommandFailed as e:
                failures.append(f"{name}: {e}")
    finally:
        for p in competitors:
            p.kill()
            p.wait()

    setting = {"competing_processes": args.competing,
               "omp_wait_policy": args.omp_wait_policy or "slimflow's choice"}
    if args.json:
        print(json.dumps({"rows": rows, "failures": failures, "cpu_flags": cpu_flags(), **setting}))
        return
    print(f"\n{args.precision} inference (ONNX Runtime fp32), {args.threads} threads; "
          f"{args.rounds} alternating rounds of {args.runs} runs, medians (ratio > 1: slimflow "
          f"faster); {args.competing} competing processes, our OMP_WAIT_POLICY "
          f"{setting['omp_wait_policy']}; CPU: {cpu_flags()}")
    print(f"{'model':16}{'max rel err':>12}{'top-1':>6}{'slimflow ms':>13}{'ORT ms':>9}{'ratio':>7}"
          f"{'rounds':>13}{'RSS MB':>8}{'ORT RSS':>9}")
    for r in rows:
        spread = f"{min(r['latency_ratio_rounds']):.2f}-{max(r['latency_ratio_rounds']):.2f}"
        print(f"{r['model']:16}{r['max_rel_err']:12.1e}{'same' if r['top1_agrees'] else 'DIFF':>6}"
              f"{r['slimflow_latency_ms']:13.3f}"
              f"{r['ort_latency_ms']:9.3f}{r['latency_ratio']:6.2f}x{spread:>13}"
              f"{r['slimflow_peak_rss_mb']:8.0f}{r['ort_peak_rss_mb']:9.0f}")
        if args.competing:
            print(f"{'  p90 ms':16}{'':18}{r['slimflow_p90_ms']:13.3f}{r['ort_p90_ms']:9.3f}"
                  f"{r['ort_p90_ms'] / r['slimflow_p90_ms']:6.2f}x")
        if "b64_ratio" in r:
            print(f"{'  batch 64 img/s':16}{'':18}{r['slimflow_b64_per_sec']:13.0f}"
                  f"{r['ort_b64_per_sec']:9.0f}{r['b64_ratio']:6.2f}x")
    for f in failures:
        print(f"FAILED {f}")
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
