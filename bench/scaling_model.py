#!/usr/bin/env python3
"""The scaling model of docs/SCALING.md: its tables, and its check against this machine.

Time per step of synchronous data parallelism on n workers = compute (measured: one worker's
forward + backward + update at its batch) + the allreduce of the gradients, less what the
backward pass hides. Allreduce of S bytes over links of bandwidth B and latency a:
  ring:       2(n-1)/n * S/B + 2(n-1) * a
  log-depth:  2(n-1)/n * S/B + 2 log2(n) * a      (recursive halving / doubling)
Compressed gradients (error feedback keeps the rest for the next step):
  fp16:       the ring on S/2
  top-k 1%:   allgather of 1% of the floats, half values and Elias-Fano indices (slimflow's
              message: 130x fewer bytes than the floats): (n-1) * S / 130 / B
              + log2(n) * a (sparse sums cannot be reduced on the way)
  one-bit:    allgather of S/32 sign bits plus a bf16 scale per 512 floats (slimflow's message:
              31x fewer bytes than the floats): (n-1) * S/31 / B + log2(n) a
Overlap: the backward pass, about half of a step's compute, hides up to that much of it.

--check runs OpenMPI's TCP transport over loopback (--mca btl tcp,self), fits a and B to 2
ranks' allreduce times over a size sweep (bench/allreduce_bench --floats N), and prints the
model's prediction next to the measurement for every size, for 2 and 3 ranks.

    python3 bench/scaling_model.py [--deep-mnist-compute-ms 52] [--check]
"""
import argparse
import json
import math
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NETWORKS = {  # gradient bytes
    "Deep-MNIST CNN": 13_098_536,
    "ResNet-18": 11_689_512 * 4,
}
LINKS = {"10 Gb/s": (10e9 / 8, 20e-6), "25 Gb/s": (25e9 / 8, 10e-6), "100 Gb/s": (100e9 / 8, 5e-6)}
WORKERS = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def allreduce_seconds(n, size, bandwidth, latency, scheme):
    if n == 1:
        return 0.0
    log_n = math.log2(n)
    if scheme == "ring":
        return 2 * (n - 1) / n * size / bandwidth + 2 * (n - 1) * latency
    if scheme == "log":
        return 2 * (n - 1) / n * size / bandwidth + 2 * log_n * latency
    if scheme == "fp16":
        return allreduce_seconds(n, size / 2, bandwidth, latency, "ring")
    if scheme == "topk":
        return (n - 1) * size / 130 / bandwidth + log_n * latency
    if scheme == "onebit":
        return (n - 1) * size / 31 / bandwidth + log_n * latency
    raise ValueError(scheme)


def efficiency(compute, n, size, link, scheme, hidden_share=0.5):
    if scheme == "ring, no overlap":
        scheme, hidden_share = "ring", 0.0
    bandwidth, latency = LINKS[link]
    comm = allreduce_seconds(n, size, bandwidth, latency, scheme)
    exposed = max(0.0, comm - hidden_share * compute)
    return compute / (compute + exposed)


def tables(computes):
    out = []
    columns = [("10 Gb/s", "ring, no overlap"), ("10 Gb/s", "ring"), ("10 Gb/s", "fp16"), ("10 Gb/s", "topk"),
               ("10 Gb/s", "onebit"), ("25 Gb/s", "ring"), ("100 Gb/s", "ring"),
               ("100 Gb/s", "log")]
    names = {"ring, no overlap": "ring, no overlap", "ring": "ring", "log": "log-depth", "fp16": "ring fp16", "topk": "top-k 1%",
             "onebit": "one-bit"}
    for network, size in NETWORKS.items():
        compute = computes[network]
        out.append(f"\n**{network}**: {size / 1e6:.1f} MB of gradients, compute "
                   f"{compute * 1e3:.0f} ms per step per worker; scaling efficiency "
                   "(compute / step time):\n")
        out.append("| workers | " + " | ".join(f"{l} {names[s]}" for l, s in columns) + " |")
        out.append("|---:|" + "---:|" * len(columns))
        for n in WORKERS:
            cells = [f"{100 * efficiency(compute, n, size, l, s):.0f}%" for l, s in columns]
            out.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def measure(ranks, floats, build):
    cmd = ["timeout", "120", "mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to",
           "none", "--mca", "btl", "tcp,self", "-np", str(ranks),
           os.path.join(build, "bench/allreduce_bench"), "--floats", str(floats), "--rounds", "20"]
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["mpi_seconds"]


def check(build):
    sizes = [256, 4096, 65536, 262144, 1048576, 4194304]
    two = {n: measure(2, n, build) for n in sizes}
    # 2 ranks: t = S/B + 2a. The smallest size gives a, the largest B; the sizes between and
    # the 3-rank runs test the model.
    latency = two[sizes[0]] / 2
    bandwidth = 4 * sizes[-1] / max(two[sizes[-1]] - 2 * latency, 1e-9)
    lines = [f"\nLoopback TCP (--mca btl tcp,self), fitted on 2 ranks: bandwidth "
             f"{bandwidth * 8 / 1e9:.2f} Gb/s, latency {latency * 1e6:.1f} us\n",
             "| bytes | 2 ranks measured | 2 ranks model | 3 ranks measured | 3 ranks model |",
             "|---:|---:|---:|---:|---:|"]
    for n in sizes:
        three = measure(3, n, build)
        m2 = allreduce_seconds(2, 4 * n, bandwidth, latency, "ring")
        m3 = allreduce_seconds(3, 4 * n, bandwidth, latency, "ring")
        lines.append(f"| {4 * n} | {two[n] * 1e3:.3f} ms | {m2 * 1e3:.3f} ms | "
                     f"{three * 1e3:.3f} ms | {m3 * 1e3:.3f} ms |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deep-mnist-compute-ms", type=float, default=52.0,
                        help="one worker's step at batch 32 on one core (measure with "
                             "`slimflow train --batch 32 --threads 1 --json`: 32 / images_per_sec)")
    parser.add_argument("--resnet18-compute-ms", type=float, default=100.0,
                        help="one worker's ResNet-18 step (assumed: an accelerator at batch 32)")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    args = parser.parse_args()
    print(tables({"Deep-MNIST CNN": args.deep_mnist_compute_ms / 1e3,
                  "ResNet-18": args.resnet18_compute_ms / 1e3}))
    if args.check:
        print(check(args.build))


if __name__ == "__main__":
    main()
