#!/usr/bin/env python3
"""Training throughput and memory of the Deep-MNIST CNN: slimflow vs PyTorch 1.13, same run.

Both train the same network (models/deep-mnist.yaml) on the same MNIST files with the same
batch size, thread count and number of whole epochs; each reports images/s (training only) and
peak RSS. PyTorch runs with torch.set_num_threads(threads) and OPENBLAS_CORETYPE=Cooperlake
OPENBLAS_NUM_THREADS=1, twice: with glibc's default malloc (the setting our issue specifies) and
with malloc told to keep freed blocks (mallopt), which makes PyTorch much faster here because
fresh memory is slow to map on this machine. Both ratios are printed.

    /usr/bin/python3 bench/train_vs_pytorch.py [--epochs 1] [--batch 64] [--threads 2] [--json]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json_lines(cmd, env=None):
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="training images (0: all 60,000)")
    parser.add_argument("--slimflow", default=os.path.join(ROOT, "build/release/slimflow"))
    parser.add_argument("--out", default=os.path.join(ROOT, "runs/bench-train"))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    ours_cmd = [args.slimflow, "train", "--overwrite", "--model", "models/deep-mnist.yaml", "--data", "mnist",
                "--epochs", str(args.epochs), "--batch", str(args.batch),
                "--threads", str(args.threads), "--out", args.out, "--json", "--quiet"]
    theirs_cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench/pytorch_deep_mnist.py"),
                  "--epochs", str(args.epochs), "--batch", str(args.batch),
                  "--threads", str(args.threads)]
    if args.limit:
        ours_cmd += ["--train-limit", str(args.limit)]
        theirs_cmd += ["--limit", str(args.limit)]
    env = dict(os.environ, OPENBLAS_CORETYPE="Cooperlake", OPENBLAS_NUM_THREADS="1")

    print(f"slimflow: {' '.join(ours_cmd)}", file=sys.stderr)
    ours = run_json_lines(ours_cmd)
    print(f"pytorch:  {' '.join(theirs_cmd)} --default-malloc", file=sys.stderr)
    theirs = run_json_lines(theirs_cmd + ["--default-malloc"], env)
    print(f"pytorch:  {' '.join(theirs_cmd)}", file=sys.stderr)
    tuned = run_json_lines(theirs_cmd, env)

    def mean(rows, key):
        return sum(r[key] for r in rows) / len(rows)

    result = {
        "network": "deep-mnist", "batch": args.batch, "threads": args.threads,
        "epochs": args.epochs,
        "slimflow_images_per_sec": mean(ours, "images_per_sec"),
        "pytorch_images_per_sec": mean(theirs, "images_per_sec"),
        "slimflow_peak_rss_mb": max(r["peak_rss_mb"] for r in ours),
        "pytorch_peak_rss_mb": max(r["peak_rss_mb"] for r in theirs),
        "slimflow_test_accuracy": ours[-1]["test_accuracy"],
        "pytorch_test_accuracy": theirs[-1]["test_accuracy"],
    }
    result["pytorch_mallopt_images_per_sec"] = mean(tuned, "images_per_sec")
    result["pytorch_mallopt_peak_rss_mb"] = max(r["peak_rss_mb"] for r in tuned)
    result["speedup"] = result["slimflow_images_per_sec"] / result["pytorch_images_per_sec"]
    result["speedup_vs_mallopt"] = (result["slimflow_images_per_sec"] /
                                    result["pytorch_mallopt_images_per_sec"])
    if args.json:
        print(json.dumps(result))
        return
    print(f"\nDeep-MNIST CNN training, batch {args.batch}, {args.threads} threads, "
          f"{args.epochs} epoch(s)")
    print(f"{'':22}{'slimflow':>12}{'PyTorch 1.13':>14}{'ratio':>8}")
    print(f"{'images/s':22}{result['slimflow_images_per_sec']:12.0f}"
          f"{result['pytorch_images_per_sec']:14.0f}{result['speedup']:7.2f}x")
    print(f"{'images/s (mallopt)':22}{'':12}"
          f"{result['pytorch_mallopt_images_per_sec']:14.0f}{result['speedup_vs_mallopt']:7.2f}x")
    print(f"{'peak RSS (MB)':22}{result['slimflow_peak_rss_mb']:12.0f}"
          f"{result['pytorch_peak_rss_mb']:14.0f}"
          f"{result['slimflow_peak_rss_mb'] / result['pytorch_peak_rss_mb']:7.2f}x")
    print(f"{'test accuracy':22}{100 * result['slimflow_test_accuracy']:11.2f}%"
          f"{100 * result['pytorch_test_accuracy']:13.2f}%")


if __name__ == "__main__":
    main()
