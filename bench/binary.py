#!/usr/bin/env python3
"""Binary and ternary networks on the Deep-MNIST CNN, one run: the issue's table.

For MNIST and Fashion-MNIST: the fp32 run, then fine-tuned from it (`train --init-from`) with
`--binarize weights` (BinaryConnect), `--binarize xnor` (XNOR-Net: conv2 and fc1 binarized,
conv1 and fc2 float) and `--binarize ternary` (TWN): test accuracy and its gap to fp32, and
the frozen file's size against fp32's. Then the kernels of conv2 and fc1 at batch 1 (and 64):
the XNOR kernel against our fp32 (oneDNN) and int8 kernels on the same layer, with the achieved
bit-MACs/s as a fraction of the machine's measured XOR + popcount ceiling
(build/release/bench/binary_kernel_bench), and end to end at batch 1: the XNOR model against
the eightbit (int8, calibrated) model of the same fp32 run, and the same network in PyTorch
1.13 fp32 as the peer, alternating rounds.

Full-accuracy runs take long on a shared 2-core machine: --epochs sets the fp32 training and
--binary-epochs the binarized fine-tuning (the report prints what ran); --train-limit trains
on a subset for a quick check. Each figure is printed with the issue's goal and whether it is
met.

    /usr/bin/python3 bench/binary.py [--threads 2] [--epochs 5] [--binary-epochs 10] [--json]
    /usr/bin/python3 bench/binary.py --epochs 1 --binary-epochs 1 --train-limit 6000  # quick
"""
import argparse
import json
import os

from bench_common import ROOT, run, last_json, cpu_flags

OUT = os.path.join("runs", "bench-binary")
# The goals: accuracy within this many points of fp32, per mode.
ACCURACY_GOAL = {"weights": 0.5, "xnor": 1.5, "ternary": 0.3}
SIZE_GOAL = 20.0            # fp32 file / binary-weight file
KERNEL_SPEED_GOAL = 10.0    # XNOR vs fp32, conv2 and fc1 at batch 1
CEILING_FRACTION_GOAL = 0.5  # fc1 at batch 64
DATASETS = ["mnist", "fashion-mnist"]
MODES = ["weights", "xnor", "ternary"]


def kernel_table(bench_binary, threads, repetitions):
    out = run([bench_binary, "--benchmark_format=json", f"--benchmark_repetitions={repetitions}",
               "--benchmark_report_aggregates_only=true", "--benchmark_filter=^binary/"],
              env={"OMP_NUM_THREADS": threads})
    rows = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name", "median") != "median" or b.get("error_occurred"):
            continue
        name = (b["run_name"] if "run_name" in b else b["name"]).removesuffix("/real_time")
        rows[name] = {"us": b["real_time"] if b["time_unit"] == "us" else b["real_time"] * 1000.0,
                      "bit_macs_per_s": b.get("bit_MACs/s"),
                      "ceiling": b.get("ceiling_bit_MACs/s")}
    return rows


def pytorch_fp32_ms(threads, runs):
    code = f"""
import json, time, torch
from torch import nn

torch.set_num_threads({threads})
net = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                    nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                    nn.Linear(3136, 1024), nn.ReLU(), nn.Linear(1024, 10)).eval()
x = torch.rand(1, 1, 28, 28)
with torch.no_grad():
    for _ in range(20): net(x)
    t = []
    for _ in range({runs}):
        s = time.perf_counter(); net(x); t.append(time.perf_counter() - s)
t.sort()
print(json.dumps({{"fp32_ms": 1000 * t[len(t) // 2]}}))
"""
    env = {"OPENBLAS_CORETYPE": "Cooperlake", "OPENBLAS_NUM_THREADS": "1"}
    try:
        return last_json(run(["/usr/bin/python3", "-c", code], env=env))["fp32_ms"]
    except SystemExit:
        return None


def verdict(met):
    return "met" if met else "NOT met"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2")
    parser.add_argument("--slimflow", default="build/release/slimflow")
    parser.add_argument("--kernel-bench", default="build/release/bench/binary_kernel_bench")
    parser.add_argument("--epochs", type=int, default=5, help="fp32 training epochs")
    parser.add_argument("--binary-epochs", type=int, default=10,
                        help="epochs of binarized fine-tuning from the fp32 run (XNOR on "
                             "Fashion-MNIST needs 10 to come within its 1.5 points)")
    parser.add_argument("--train-limit", type=int, default=0,
                        help="train on the first N images only (0: all)")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--rounds", type=int, default=3, help="alternating end-to-end rounds")
    parser.add_argument("--runs", type=int, default=300, help="batch-1 runs per round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sf, t = args.slimflow, args.threads
    os.makedirs(os.path.join(ROOT, OUT), exist_ok=True)
    limit = ["--train-limit", str(args.train_limit)] if args.train_limit else []
    suffix = f"-e{args.epochs}-b{args.binary_epochs}" + (f"-n{args.train_limit}" if args.train_limit else "")

    def accuracy(model, data):
        return last_json(run([sf, "eval", "--model", model, "--data", data, "--threads", t,
                              "--json"]))["accuracy"]

    def size(model):
        return os.path.getsize(os.path.join(ROOT, model))

    def train(out, *options):
        """Trains run `out` once: a finished run (marked when train returned) is kept, one cut off
        (a checkpoint, no mark) resumes to its planned epochs, and a missing one starts."""
        finished = os.path.join(ROOT, out, "bench-finished")
        if os.path.exists(finished):
            return
        if os.path.exists(os.path.join(ROOT, out, "checkpoint.sfck")):
            run([sf, "train", "--resume", out, "--threads", t, "--quiet"])
        else:
            run([sf, "train", "--overwrite", *options, "--threads", t, "--out", out, "--quiet", *limit])
        open(finished, "w").close()

    table = {}
    for data in args.datasets.split(","):
        base = os.path.join(OUT, data + suffix)
        fp32_run = base + "-fp32"
        train(fp32_run, "--model", "models/deep-mnist.yaml", "--data", data, "--epochs", str(args.epochs))
        run([sf, "freeze", fp32_run, "--out", fp32_run + ".sfm"])
        rows = {"fp32": {"accuracy": accuracy(fp32_run + ".sfm", data), "bytes": size(fp32_run + ".sfm")}}
        for mode in MODES:
            out = f"{base}-{mode}"
            # --data explicitly: train's default data set would replace the run's.
            train(out, "--init-from", fp32_run, "--data", data, "--binarize", mode, "--epochs",
                  str(args.binary_epochs))
            run([sf, "freeze", out, "--out", out + ".sfm"])
            rows[mode] = {"accuracy": accuracy(out + ".sfm", data), "bytes": size(out + ".sfm")}
        if data == "mnist":
            run([sf, "quantize", fp32_run + ".sfm", "--mode", "eightbit", "--calib-data", data,
                 "--calib-count", "1000", "--threads", t, "--out", base + "-int8.sfm"])
        table[data] = rows

    # End to end at batch 1: XNOR vs int8 (MNIST models), alternating rounds.
    e2e = {"xnor": [], "int8": [], "fp32": []}
    base = os.path.join(OUT, "mnist" + suffix)
    models = {"xnor": base + "-xnor.sfm", "int8": base + "-int8.sfm", "fp32": base + "-fp32.sfm"}
    if "mnist" in table:
        for _ in range(args.rounds):
            for name, model in models.items():
                e2e[name].append(last_json(run([sf, "bench", "--model", model, "--batch", "1",
                                                "--threads", t, "--runs", str(args.runs),
                                                "--json"]))["latency_ms_median"])
        profile = run([sf, "bench", "--model", models["xnor"], "--batch", "1", "--threads", t,
                       "--runs", "50", "--profile"])
    else:
        profile = ""
    peer_ms = pytorch_fp32_ms(t, args.runs)
    kernels = kernel_table(args.kernel_bench, t, 3) if os.path.exists(
        os.path.join(ROOT, args.kernel_bench)) else {}
    result = {"epochs": args.epochs, "binary_epochs": args.binary_epochs,
              "train_limit": args.train_limit, "threads": t, "cpu_flags": cpu_flags(),
              "accuracy": table, "end_to_end_b1_ms": {k: min(v) for k, v in e2e.items() if v},
              "pytorch_fp32_b1_ms": peer_ms, "kernels": kernels}
    with open(os.path.join(ROOT, OUT, "results.json"), "w") as f:
        json.dump(result, f)
    if args.json:
        print(json.dumps(result))
        return

    print(f"\nCPU: {result['cpu_flags']}; {t} threads; fp32 trained {args.epochs} epochs, binarized "
          f"fine-tuned {args.binary_epochs} epochs from it"
          + (f", on the first {args.train_limit} training images" if args.train_limit else ""))
    for data, rows in table.items():
        fp32 = rows["fp32"]
        print(f"\nDeep-MNIST CNN on {data}")
        print(f"{'':10}{'accuracy':>10}{'vs fp32':>9}{'bytes':>11}{'fp32/x':>8}  goal")
        for name, r in rows.items():
            delta = 100 * (r["accuracy"] - fp32["accuracy"])
            ratio = fp32["bytes"] / r["bytes"]
            goal = ""
            if name in ACCURACY_GOAL:
                goal = f"within {ACCURACY_GOAL[name]} point: {verdict(delta >= -ACCURACY_GOAL[name])}"
            if name == "weights":
                goal += f"; >= {SIZE_GOAL:.0f}x smaller: {verdict(ratio >= SIZE_GOAL)}"
            print(f"{name:10}{100 * r['accuracy']:9.2f}%{delta:+8.2f}{r['bytes']:11d}{ratio:7.1f}x  {goal}")
    if kernels:
        print(f"\nKernels (median of 3, OMP_NUM_THREADS={t}); ceiling: one core's XOR+popcount loop")
        for layer in ("conv2_batch1", "fc1_batch1", "conv2_batch64", "fc1_batch64"):
            k = {kind: kernels.get(f"binary/{layer}/{kind}") for kind in
                 ("xnor", "ternary_xnor", "binary_weights", "fp32", "int8")}
            if not k["xnor"]:
                continue
            line = f"{layer:14}" + "".join(f"{kind} {r['us']:.1f} us  " for kind, r in k.items() if r)
            x = k["xnor"]
            batch1 = layer.endswith("_batch1")
            if k["fp32"]:
                speedup = k["fp32"]["us"] / x["us"]
                line += f"| xnor vs fp32 {speedup:.1f}x"
                if batch1:
                    line += f" (goal {KERNEL_SPEED_GOAL:.0f}x: {verdict(speedup >= KERNEL_SPEED_GOAL)})"
            if k["int8"]:
                line += f", vs int8 {k['int8']['us'] / x['us']:.1f}x"
                if batch1:
                    line += f" (goal > 1: {verdict(k['int8']['us'] > x['us'])})"
            if x.get("bit_macs_per_s") and x.get("ceiling"):
                fraction = x["bit_macs_per_s"] / x["ceiling"]
                line += f", {x['bit_macs_per_s'] / 1e9:.0f} G bit-MACs/s = {100 * fraction:.0f}% of ceiling"
                if layer == "fc1_batch64":
                    line += f" (goal {100 * CEILING_FRACTION_GOAL:.0f}%: {verdict(fraction >= CEILING_FRACTION_GOAL)})"
            print(line)
    if e2e["xnor"]:
        r = result["end_to_end_b1_ms"]
        print(f"\nEnd to end, batch 1 (best median of {args.rounds} alternating rounds): XNOR {r['xnor']:.3f} ms, "
              f"int8 {r['int8']:.3f} ms ({r['int8'] / r['xnor']:.2f}x; goal > 1: {verdict(r['int8'] > r['xnor'])}), "
              f"fp32 {r['fp32']:.3f} ms"
              + (f"; PyTorch 1.13 fp32 {peer_ms:.3f} ms ({peer_ms / r['xnor']:.2f}x)" if peer_ms else ""))
        print("\n" + profile)


if __name__ == "__main__":
    main()
