#!/usr/bin/env python3
"""Devices and placement figures, one run.

1. A cross-device edge in one process: build/release/bench/placement_bench times a chain of 64
   Relu nodes on a 16-float tensor on one device and alternating between /cpu:0 and /cpu:1
   (every edge crosses devices); the difference per edge is the Send/Recv overhead.
2. A cross-process edge between the 2 processes of an MPI job (build/release/bench/
   process_edge_bench under mpirun -np 2): one-way latency and bandwidth for 4 KB - 16 MB
   tensors through a partitioned graph's Send/Recv, next to OpenMPI's own MPI_Send ping-pong
   in the same job, rounds alternating.
3. The Deep-MNIST CNN trained unsplit on one core (--threads 1) and on two threads, and split
   over /cpu:0 (convolutions) and /cpu:1 (dense layers), one thread each
   (models/deep-mnist-2dev.yaml), with and without --micro-batches 4 (GPipe-style pipelining),
   the same for the split after conv1 (models/deep-mnist-2dev-conv1.yaml), and over the 2
   processes of an MPI job (models/deep-mnist-2proc.yaml): training images/s over the same
   images, the runs alternating over --rounds rounds (median). The split runs use --profile:
   each device's kernel time per step less its time in Recv is its compute, and
   total compute / the largest device's compute bounds what a perfect pipeline of that split
   could gain over running its work on one core.

    /usr/bin/python3 bench/placement.py [--train-limit 1280] [--rounds 2] [--json]
    /usr/bin/python3 bench/placement.py --training-only      # item 3 alone
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

from bench_common import ROOT, cpu_flags, json_lines, run

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def edge_overhead(build):
    out = run([os.path.join(build, "bench/placement_bench"), "--benchmark_format=json",
               "--benchmark_min_time=0.5"])
    times = {"/".join(b["name"].split("/")[:2]): b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b["time_unit"]]
             for b in json.loads(out)["benchmarks"]}
    one, two = times["chain/one_device"], times["chain/two_devices"]
    return {"one_device_us_per_step": one, "two_devices_us_per_step": two,
            "overhead_us_per_edge": (two - one) / 64}


def process_edges(build):
    return json_lines(run(MPIRUN + ["-np", "2", os.path.join(build, "bench/process_edge_bench")]))


def train_run(build, model, flags, train_limit, launcher=()):
    """One epoch of training: (images/s, {device: compute ms per step}); the device times come
    from --profile's per-device lines (kernel time less the time spent in Recv)."""
    out_dir = os.path.join(ROOT, "runs", "bench-placement", os.path.basename(model) + "-".join(flags))
    cmd = list(launcher) + [os.path.join(build, "slimflow"), "train", "--model", model, "--epochs", "1",
                            "--train-limit", str(train_limit), "--test-limit", "64", "--quiet", "--json",
                            "--overwrite", "--out", out_dir] + flags
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    devices = {m.group(1): float(m.group(2)) - float(m.group(3)) for m in re.finditer(
        r"^device (\S+)\s+([\d.]+) ms/step,\s+([\d.]+) of them in Recv", proc.stderr, re.M)}
    return json_lines(proc.stdout)[-1]["images_per_sec"], devices


SPLIT = ["--cpu-devices", "2", "--device-threads", "1", "--profile"]
TRAINING_RUNS = {
    "unsplit, 1 thread": ("models/deep-mnist.yaml", ["--threads", "1"]),
    "unsplit, 2 threads": ("models/deep-mnist.yaml", ["--threads", "2"]),
    "conv | dense, 1 thread each": ("models/deep-mnist-2dev.yaml", SPLIT),
    "conv | dense, --micro-batches 2": ("models/deep-mnist-2dev.yaml", SPLIT + ["--micro-batches", "2"]),
    "conv | dense, --micro-batches 4": ("models/deep-mnist-2dev.yaml", SPLIT + ["--micro-batches", "4"]),
    "conv1 | conv2+dense, 1 thread each": ("models/deep-mnist-2dev-conv1.yaml", SPLIT),
    "conv1 | conv2+dense, --micro-batches 4": ("models/deep-mnist-2dev-conv1.yaml",
                                               SPLIT + ["--micro-batches", "4"]),
    "2 MPI processes, 1 thread each": ("models/deep-mnist-2proc.yaml", ["--threads", "1"]),
}


def training(build, train_limit, rounds):
    """Every run once per round, in the same order each round; the median over the rounds."""
    rates = {name: [] for name in TRAINING_RUNS}
    compute = {name: [] for name in TRAINING_RUNS}
    for _ in range(rounds):
        for name, (model, flags) in TRAINING_RUNS.items():
            ips, devices = train_run(build, model, flags, train_limit,
                                     MPIRUN + ["-np", "2"] if "2proc" in model else ())
            rates[name].append(ips)
            if devices:
                compute[name].append(devices)
    result = {"images_per_sec": {name: statistics.median(r) for name, r in rates.items()},
              "rounds": {name: r for name, r in rates.items()}, "device_compute_ms": {}, "bound": {}}
    for name, samples in compute.items():
        per_device = {d: statistics.median(s[d] for s in samples) for d in samples[0]} if samples else {}
        if per_device:
            result["device_compute_ms"][name] = per_device
            result["bound"][name] = sum(per_device.values()) / max(per_device.values())
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    parser.add_argument("--train-limit", type=int, default=1280)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--training-only", action="store_true", help="only the Deep-MNIST runs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {"cpu": cpu_flags(), "load_average_before": os.getloadavg()}
    if not args.training_only:
        result["edge"] = edge_overhead(args.build)
        result["process_edge"] = process_edges(args.build)
    result["deep_mnist"] = training(args.build, args.train_limit, args.rounds)
    result["load_average_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(result))
        return
    if not args.training_only:
        e = result["edge"]
        print(f"in-process edge: {e['overhead_us_per_edge']:.2f} us per edge "
              f"({e['one_device_us_per_step']:.1f} us one device, {e['two_devices_us_per_step']:.1f} us split, 64 edges)")
        print("edge between 2 MPI processes, one way (ours: partitioned graph; MPI: MPI_Send ping-pong):")
        for p in result["process_edge"]:
            print(f"  {p['bytes'] / 1024:8.0f} KB  ours {p['ours_us']:9.1f} us {p['ours_gbps']:6.2f} GB/s"
                  f"   MPI {p['mpi_us']:9.1f} us {p['mpi_gbps']:6.2f} GB/s   ratio {p['ours_us'] / p['mpi_us']:.2f}x")
    d = result["deep_mnist"]
    base = d["images_per_sec"]["unsplit, 1 thread"]
    print(f"Deep-MNIST training, images/s (median of {args.rounds} alternating rounds; CPU: {result['cpu']}; "
          f"load average {result['load_average_before'][0]:.1f} before, {result['load_average_after'][0]:.1f} after):")
    for name, ips in d["images_per_sec"].items():
        rounds = " / ".join(f"{r:.0f}" for r in d["rounds"][name])
        print(f"  {name:42s} {ips:8.0f}  {ips / base:.2f}x   (rounds: {rounds})")
    print("per split: compute per step by device (kernel time less Recv, from --profile); bound = total /"
          " largest; with M micro-batches at no cost each, 2 stages take largest + smallest / M:")
    if not d["bound"]:
        print("  none: train --profile starts after 5 steps; give --train-limit more than 5 batches of 64")
    for name, bound in d["bound"].items():
        ms = d["device_compute_ms"][name]
        devices = ", ".join(f"{dev} {t:.1f} ms" for dev, t in ms.items())
        line = f"  {name:42s} bound {bound:.2f}x   ({devices})"
        if "micro-batches" not in name and len(ms) == 2:
            total, big, small = sum(ms.values()), max(ms.values()), min(ms.values())
            line += f"; M=4 at best {total / (big + small / 4):.2f}x"
        print(line)


if __name__ == "__main__":
    main()
