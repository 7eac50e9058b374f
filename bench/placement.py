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
   (models/deep-mnist-2dev.yaml), and over the 2 processes of an MPI job
   (models/deep-mnist-2proc.yaml): training images/s over the same images.

    /usr/bin/python3 bench/placement.py [--train-limit 1280] [--json]

Not measured yet (not built): --micro-batches pipelining.
"""
import argparse
import json
import os

from bench_common import ROOT, json_lines, run

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


def images_per_sec(build, model, flags, train_limit, launcher=()):
    out_dir = os.path.join(ROOT, "runs", "bench-placement", os.path.basename(model) + "-".join(flags))
    out = run(list(launcher) + [os.path.join(build, "slimflow"), "train", "--model", model, "--epochs", "1",
               "--train-limit", str(train_limit), "--test-limit", "64", "--quiet", "--json",
               "--overwrite", "--out", out_dir] + flags)
    return json.loads(out.strip().splitlines()[-1])["images_per_sec"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    parser.add_argument("--train-limit", type=int, default=1280)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {"edge": edge_overhead(args.build), "process_edge": process_edges(args.build)}
    runs = {
        "unsplit, 1 thread": ("models/deep-mnist.yaml", ["--threads", "1"]),
        "unsplit, 2 threads": ("models/deep-mnist.yaml", ["--threads", "2"]),
        "split /cpu:0 + /cpu:1, 1 thread each": ("models/deep-mnist-2dev.yaml",
                                                 ["--cpu-devices", "2", "--device-threads", "1"]),
        "split over 2 MPI processes, 1 thread each": ("models/deep-mnist-2proc.yaml",
                                                      ["--threads", "1"]),
    }
    result["deep_mnist_images_per_sec"] = {
        name: images_per_sec(args.build, model, flags, args.train_limit,
                             MPIRUN + ["-np", "2"] if "2proc" in model else ())
        for name, (model, flags) in runs.items()}
    if args.json:
        print(json.dumps(result))
        return
    e = result["edge"]
    print(f"in-process edge: {e['overhead_us_per_edge']:.2f} us per edge "
          f"({e['one_device_us_per_step']:.1f} us one device, {e['two_devices_us_per_step']:.1f} us split, 64 edges)")
    print("edge between 2 MPI processes, one way (ours: partitioned graph; MPI: MPI_Send ping-pong):")
    for p in result["process_edge"]:
        print(f"  {p['bytes'] / 1024:8.0f} KB  ours {p['ours_us']:9.1f} us {p['ours_gbps']:6.2f} GB/s"
              f"   MPI {p['mpi_us']:9.1f} us {p['mpi_gbps']:6.2f} GB/s   ratio {p['ours_us'] / p['mpi_us']:.2f}x")
    base = result["deep_mnist_images_per_sec"]["unsplit, 1 thread"]
    print("Deep-MNIST training, images/s:")
    for name, ips in result["deep_mnist_images_per_sec"].items():
        print(f"  {name:40s} {ips:8.0f}  {ips / base:.2f}x")


if __name__ == "__main__":
    main()
