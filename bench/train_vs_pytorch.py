#!/usr/bin/env python3
"""Training throughput and memory of the Deep-MNIST CNN (or another zoo network): slimflow vs PyTorch 1.13.

Both train the same network (models/deep-mnist.yaml, or another spec of the zoo with --model:
PyTorch builds it from the same file, bench/pytorch_spec_model.py) on the same MNIST files with
the same batch size, thread count and number of whole epochs; each reports images/s (training
only) and peak RSS. PyTorch runs with torch.set_num_threads(threads) and
OPENBLAS_CORETYPE=Cooperlake OPENBLAS_NUM_THREADS=1, twice: with glibc's default malloc and
NCHW tensors (the settings our issue specifies), and tuned: malloc told to keep freed blocks
(mallopt), which makes PyTorch much faster here because fresh memory is slow to map on this
machine, and channels_last (NHWC) tensors, on which its convs run faster here. Both ratios are
printed (the JSON keeps the names pytorch_mallopt_* and speedup_vs_mallopt for the tuned run).

With --bf16 the same run adds mixed precision: ours with `train --precision bf16` against
PyTorch under torch.autocast("cpu", dtype=torch.bfloat16) (tuned), next to the fp32 figures.
Without AMX (see the cpu line) bf16 products run on AVX-512 BF16 or are emulated, and may well
be slower than fp32.

With --rounds N every training runs N times, the order reversed each round, so a machine whose
speed drifts (by 2x within an hour on the shared ones) weighs on both sides alike: images/s and
each ratio are medians over the rounds, each ratio taken within its round, with their ranges.

    /usr/bin/python3 bench/train_vs_pytorch.py [--model models/deep-mnist.yaml] [--epochs 1]
        [--batch 64] [--threads 2] [--bf16] [--rounds 1] [--json]
"""
import argparse
import json
import os

from bench_common import ROOT, cpu_flags, json_lines, run


def run_json_lines(cmd, env=None):
    return json_lines(run(cmd, env))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/deep-mnist.yaml",
                        help="the network: a model spec of the zoo")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="training images (0: all 60,000)")
    parser.add_argument("--slimflow", default=os.path.join(ROOT, "build/release/slimflow"))
    parser.add_argument("--out", default=os.path.join(ROOT, "runs/bench-train"))
    parser.add_argument("--bf16", action="store_true",
                        help="also ours in bf16 (--precision bf16) and PyTorch bf16 autocast")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every training this many times, alternating the order")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    network = os.path.splitext(os.path.basename(args.model))[0]
    ours_cmd = [args.slimflow, "train", "--overwrite", "--model", args.model, "--data", "mnist",
                "--epochs", str(args.epochs), "--batch", str(args.batch),
                "--threads", str(args.threads), "--out", args.out, "--json", "--quiet"]
    theirs_cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench/pytorch_deep_mnist.py"),
                  "--epochs", str(args.epochs), "--batch", str(args.batch),
                  "--threads", str(args.threads)]
    if network != "deep-mnist":  # Deep-MNIST's peer is written out by hand
        theirs_cmd += ["--model", os.path.join(ROOT, args.model)]
    if args.limit:
        ours_cmd += ["--train-limit", str(args.limit)]
        theirs_cmd += ["--limit", str(args.limit)]
    env = {"OPENBLAS_CORETYPE": "Cooperlake", "OPENBLAS_NUM_THREADS": "1"}

    # fp32 against PyTorch's fp32 (train's default, auto, is bf16 where the CPU has AMX).
    # "tuned" is PyTorch at its best here: mallopt and channels_last (NHWC) tensors, which run
    # its convs faster on this CPU (Deep-MNIST bf16 autocast +18-28%, fp32 +3-5%; MobileNet-MNIST
    # +20-50%); bf16 autocast runs tuned too.
    tuned = theirs_cmd + ["--channels-last"]
    trainings = {"ours": (ours_cmd + ["--precision", "fp32"], None),
                 "theirs": (theirs_cmd + ["--default-malloc"], env),
                 "tuned": (tuned, env)}
    if args.bf16:
        trainings["ours_bf16"] = (ours_cmd + ["--precision", "bf16"], None)
        trainings["theirs_bf16"] = (tuned + ["--autocast-bf16"], env)
    rounds = []
    for r in range(args.rounds):
        order = list(trainings) if r % 2 == 0 else list(reversed(trainings))
        rounds.append({name: run_json_lines(*trainings[name]) for name in order})

    def mean(rows, key):
        return sum(row[key] for row in rows) / len(rows)

    def median(values):
        values = sorted(values)
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    def rate(name):
        return median([mean(got[name], "images_per_sec") for got in rounds])

    def ratio(key, top, bottom):
        per_round = [mean(got[top], "images_per_sec") / mean(got[bottom], "images_per_sec")
                     for got in rounds]
        result[key] = median(per_round)
        result[key + "_range"] = [min(per_round), max(per_round)]

    last = rounds[-1]
    result = {
        "network": network, "batch": args.batch, "threads": args.threads,
        "epochs": args.epochs, "rounds": args.rounds, "cpu_flags": cpu_flags(),
        "slimflow_images_per_sec": rate("ours"),
        "pytorch_images_per_sec": rate("theirs"),
        "slimflow_peak_rss_mb": max(row["peak_rss_mb"] for got in rounds for row in got["ours"]),
        "pytorch_peak_rss_mb": max(row["peak_rss_mb"] for got in rounds for row in got["theirs"]),
        "slimflow_test_accuracy": last["ours"][-1]["test_accuracy"],
        "pytorch_test_accuracy": last["theirs"][-1]["test_accuracy"],
    }
    result["pytorch_mallopt_images_per_sec"] = rate("tuned")
    result["pytorch_mallopt_peak_rss_mb"] = max(row["peak_rss_mb"] for got in rounds
                                                for row in got["tuned"])
    ratio("speedup", "ours", "theirs")
    ratio("speedup_vs_mallopt", "ours", "tuned")
    if args.bf16:
        result["slimflow_bf16_images_per_sec"] = rate("ours_bf16")
        result["slimflow_bf16_precision_reason"] = last["ours_bf16"][-1]["precision_reason"]
        result["slimflow_bf16_test_accuracy"] = last["ours_bf16"][-1]["test_accuracy"]
        result["pytorch_autocast_bf16_images_per_sec"] = rate("theirs_bf16")
        result["pytorch_autocast_bf16_test_accuracy"] = last["theirs_bf16"][-1]["test_accuracy"]
        ratio("bf16_speedup_vs_autocast", "ours_bf16", "theirs_bf16")
        ratio("bf16_vs_our_fp32", "ours_bf16", "ours")
    if args.json:
        print(json.dumps(result))
        return
    def spread(key):
        low, high = result[key + "_range"]
        return f"  ({low:.2f}-{high:.2f}x)" if args.rounds > 1 else ""

    title = "Deep-MNIST CNN" if network == "deep-mnist" else network
    print(f"\n{title} training, batch {args.batch}, {args.threads} threads, "
          f"{args.epochs} epoch(s)" +
          (f", medians of {args.rounds} alternating rounds" if args.rounds > 1 else ""))
    print(f"{'':22}{'slimflow':>12}{'PyTorch 1.13':>14}{'ratio':>8}")
    print(f"{'images/s':22}{result['slimflow_images_per_sec']:12.0f}"
          f"{result['pytorch_images_per_sec']:14.0f}{result['speedup']:7.2f}x"
          f"{spread('speedup')}")
    print(f"{'images/s (tuned)':22}{'':12}"
          f"{result['pytorch_mallopt_images_per_sec']:14.0f}{result['speedup_vs_mallopt']:7.2f}x"
          f"{spread('speedup_vs_mallopt')}")
    print(f"{'peak RSS (MB)':22}{result['slimflow_peak_rss_mb']:12.0f}"
          f"{result['pytorch_peak_rss_mb']:14.0f}"
          f"{result['slimflow_peak_rss_mb'] / result['pytorch_peak_rss_mb']:7.2f}x")
    print(f"{'test accuracy':22}{100 * result['slimflow_test_accuracy']:11.2f}%"
          f"{100 * result['pytorch_test_accuracy']:13.2f}%")
    if args.bf16:
        print(f"{'bf16 images/s':22}{result['slimflow_bf16_images_per_sec']:12.0f}"
              f"{result['pytorch_autocast_bf16_images_per_sec']:14.0f}"
              f"{result['bf16_speedup_vs_autocast']:7.2f}x  (PyTorch: autocast)"
              f"{spread('bf16_speedup_vs_autocast')}")
        print(f"{'bf16 test accuracy':22}{100 * result['slimflow_bf16_test_accuracy']:11.2f}%"
              f"{100 * result['pytorch_autocast_bf16_test_accuracy']:13.2f}%")
        print(f"our bf16 vs our fp32: {result['bf16_vs_our_fp32']:.2f}x"
              f"{spread('bf16_vs_our_fp32')} ({result['slimflow_bf16_precision_reason']})")
    print(f"cpu: {result['cpu_flags']}")


if __name__ == "__main__":
    main()
