#!/usr/bin/env python3
"""Data-parallel training figures, in one run (docs/SCALING.md explains them):

1. Scaling: `slimflow train` Deep-MNIST, 2 ranks x 1 thread (mpirun) vs 1 rank x 1 thread at the
   same global batch: images/s ratio, with the 2-rank run's comm_seconds and overlap_fraction;
   next to the machine's own ceiling: two independent 1-thread processes at half the batch each,
   run at once with no communication (what 2 ranks would reach if averaging cost nothing).
2. Against PyTorch 1.13 DistributedDataParallel (gloo), same network, data and global batch,
   2 processes x 1 thread, channels_last (NHWC) tensors as PyTorch runs fastest here: images/s
   ratio and peak RSS per process.
4. With --accuracy-epochs E: test accuracy after E epochs of 1 rank (global batch) vs 2 ranks,
   2 ranks with each --grad-compression, and async (1 parameter server + 2 workers,
   --max-staleness 4), with the bytes each rank sends per step.
3. Allreduce efficiency: the bucketed gradient averaging's algorithm bandwidth vs OpenMPI's own
   MPI_Allreduce on one contiguous buffer of the same bytes (build/release/bench/allreduce_bench).
   Each of these runs writes its convergence (test accuracy after every epoch vs wall time and
   steps) as JSON next to its checkpoint: runs/bench-dp-sync/convergence.json and
   runs/bench-dp-async/convergence.json side by side for the same data, and so on.

Rounds alternate between the engines. Prints the CPU's features next to the figures.

    /usr/bin/python3 bench/data_parallel.py [--limit 6400] [--global-batch 64] [--rounds 2]
                                            [--accuracy-epochs 5] [--accuracy-limit N]
                                            [--accuracy-runs one,sync,fp16,topk,onebit,async]
                                            [--only-accuracy] [--json]
"""
import argparse
import json
import os
import subprocess
import sys

from bench_common import ROOT, cpu_flags

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def run_json_lines(cmd, env=None):
    print("  " + " ".join(cmd), file=sys.stderr)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def run_pair(cmds, env):
    """Runs the commands at once; their JSON lines, in order."""
    for cmd in cmds:
        print("  " + " ".join(cmd) + " &", file=sys.stderr)
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
             for cmd in cmds]
    outs = [p.communicate()[0] for p in procs]
    for cmd, p in zip(cmds, procs):
        if p.returncode != 0:
            sys.exit(f"benchmark command failed ({p.returncode}): {' '.join(cmd)}")
    return [[json.loads(l) for l in out.splitlines() if l.startswith("{")][-1] for out in outs]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=6400, help="training images per epoch")
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--bucket-mb", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    parser.add_argument("--accuracy-epochs", type=int, default=0,
                        help="also compare test accuracy after this many epochs (0: skip)")
    parser.add_argument("--accuracy-limit", type=int, default=0,
                        help="training images for the accuracy runs (0: all 60,000)")
    parser.add_argument("--accuracy-runs", default="one,sync,fp16,topk,onebit,async",
                        help="which accuracy runs, in this order (one: 1 rank; sync, fp16, topk, "
                             "onebit: 2 ranks; async: 1 server + 2 workers)")
    parser.add_argument("--only-accuracy", action="store_true",
                        help="skip the speed figures: only the --accuracy-epochs runs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    slimflow = os.path.join(args.build, "slimflow")
    half = args.global_batch // 2
    common = ["train", "--overwrite", "--model", "models/deep-mnist.yaml", "--data", "mnist", "--epochs", "1",
              "--train-limit", str(args.limit), "--test-limit", "1000", "--threads", "1",
              "--json", "--quiet", "--lr-schedule", "constant", "--precision", "fp32"]
    one_cmd = [slimflow] + common + ["--batch", str(args.global_batch), "--out",
                                     os.path.join(ROOT, "runs/bench-dp1")]
    two_cmd = MPIRUN + ["-np", "2", slimflow] + common + [
        "--batch", str(half), "--lr-scaling", "none", "--bucket-mb", str(args.bucket_mb),
        "--out", os.path.join(ROOT, "runs/bench-dp2")]
    pair_cmds = [[slimflow] + common + ["--batch", str(half),
                                        "--out", os.path.join(ROOT, f"runs/bench-dp-alone{i}")]
                 for i in (0, 1)]
    ddp_cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench/pytorch_ddp_deep_mnist.py"),
               "--procs", "2", "--threads", "1", "--global-batch", str(args.global_batch),
               "--limit", str(args.limit), "--channels-last"]
    env = dict(os.environ, OPENBLAS_CORETYPE="Cooperlake", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    if args.only_accuracy:
        result = {"cpu": cpu_flags(), "cores": os.cpu_count()}
        if args.accuracy_epochs > 0:
            result["accuracy"] = accuracy_runs(args, slimflow, env)
        if args.json:
            print(json.dumps(result))
            return
        print(f"CPU: {result['cores']} cores, {result['cpu']}")
        print_accuracy(result)
        return
    one, two, ddp, pair = [], [], [], []
    for round_ in range(args.rounds):
        print(f"round {round_ + 1}/{args.rounds}", file=sys.stderr)
        one += run_json_lines(one_cmd, env)
        two += run_json_lines(two_cmd, env)
        pair.append(sum(r["images_per_sec"] for r in run_pair(pair_cmds, env)))
        ddp += run_json_lines(ddp_cmd, env)
    allreduce = run_json_lines(MPIRUN + ["-np", "2", os.path.join(args.build, "bench/allreduce_bench"),
                                         "--bucket-mb", str(args.bucket_mb)])[0]
    allreduce_resnet = run_json_lines(MPIRUN + ["-np", "2",
                                                os.path.join(args.build, "bench/allreduce_bench"),
                                                "--bucket-mb", str(args.bucket_mb), "--resnet18"])[0]

    def best(rows, key="images_per_sec"):
        return max(r[key] for r in rows)

    two_best = max(two, key=lambda r: r["images_per_sec"])
    result = {
        "cpu": cpu_flags(), "cores": os.cpu_count(), "limit": args.limit,
        "global_batch": args.global_batch, "bucket_mb": args.bucket_mb, "rounds": args.rounds,
        "one_rank_images_per_sec": best(one),
        "two_ranks_images_per_sec": best(two),
        "scaling": best(two) / best(one),
        "ceiling_images_per_sec": max(pair),
        "ceiling_scaling": max(pair) / best(one),
        "of_ceiling": best(two) / max(pair),
        "two_ranks_comm_seconds": two_best["comm_seconds"],
        "two_ranks_overlap_fraction": two_best["overlap_fraction"],
        "two_ranks_epoch_seconds": two_best["epoch_seconds"],
        "two_ranks_peak_rss_mb": two_best["peak_rss_mb"],
        "pytorch_ddp_images_per_sec": best(ddp),
        "vs_pytorch_ddp": best(two) / best(ddp),
        "pytorch_ddp_peak_rss_mb": max(ddp, key=lambda r: r["images_per_sec"])["peak_rss_mb"],
        "allreduce_deep_mnist": allreduce,
        "allreduce_resnet18": allreduce_resnet,
    }
    if args.accuracy_epochs > 0:
        result["accuracy"] = accuracy_runs(args, slimflow, env)
    if args.json:
        print(json.dumps(result))
        return
    print(f"\nDeep-MNIST data parallel, global batch {args.global_batch}, {args.limit} images, "
          f"best of {args.rounds} rounds; CPU: {result['cores']} cores, {result['cpu']}")
    print(f"  1 rank x 1 thread:        {result['one_rank_images_per_sec']:8.1f} images/s")
    print(f"  2 ranks x 1 thread:       {result['two_ranks_images_per_sec']:8.1f} images/s  "
          f"scaling {result['scaling']:.2f}x (goal 1.85)  comm {result['two_ranks_comm_seconds']:.2f} s"
          f"  overlap {result['two_ranks_overlap_fraction']:.2f}")
    print(f"  ceiling, 2 independent 1-thread processes at batch {half}, no communication: "
          f"{result['ceiling_images_per_sec']:.1f} images/s = {result['ceiling_scaling']:.2f}x; "
          f"2 ranks reach {100 * result['of_ceiling']:.0f}% of it")
    print(f"  PyTorch DDP 2 x 1 thread (NHWC): "
          f"{result['pytorch_ddp_images_per_sec']:8.1f} images/s  "
          f"slimflow/PyTorch {result['vs_pytorch_ddp']:.2f}x (goal 2)")
    print(f"  peak RSS per process: slimflow {result['two_ranks_peak_rss_mb']:.0f} MB (rank 0), "
          f"PyTorch {result['pytorch_ddp_peak_rss_mb']} MB")
    for a in (allreduce, allreduce_resnet):
        print(f"  allreduce {a['network']} ({a['bytes'] / 1e6:.1f} MB, {a['buckets']} buckets): "
              f"ours {a['ours_algbw_gbps']:.2f} Gb/s vs MPI_Allreduce {a['mpi_algbw_gbps']:.2f} Gb/s"
              f" = {100 * a['efficiency']:.0f}% (goal 90%)")
    print_accuracy(result)


def print_accuracy(result):
    for row in result.get("accuracy", []):
        print(f"  {row['run']:<24} test accuracy {100 * row['test_accuracy']:.2f}%  "
              f"bytes sent per step {row['bytes_per_step']:>12.0f}")
    for line in convergence_lines(result.get("accuracy", [])):
        print(line)


def convergence_lines(rows):
    lines = []
    for row in rows:
        name = row["run"]
        for p in row["curve"]["points"]:
            lines.append(f"  {name:<24} epoch {p['epoch']}: step {p['step']:>6}  "
                         f"{p['wall_seconds']:8.1f} s  test accuracy {100 * p['test_accuracy']:.2f}%"
                         f"  staleness max {p['staleness_max']} mean {p['staleness_mean']:.2f}")
    return lines


def accuracy_runs(args, slimflow, env):
    """Test accuracy after --accuracy-epochs: one process vs 2 ranks, plain and compressed."""
    common = ["train", "--overwrite", "--model", "models/deep-mnist.yaml", "--data", "mnist", "--epochs",
              str(args.accuracy_epochs), "--threads", "1", "--json", "--quiet", "--precision", "fp32"]
    if args.accuracy_limit:
        common += ["--train-limit", str(args.accuracy_limit)]
    half = str(args.global_batch // 2)
    runs = [("1 rank", "one", [slimflow] + common + ["--batch", str(args.global_batch)])]
    for scheme in ["none", "fp16", "topk:0.01", "onebit"]:
        runs.append((f"2 ranks, {scheme}", "sync" if scheme == "none" else scheme.split(":")[0],
                     MPIRUN + ["-np", "2", slimflow] + common + [
                         "--batch", half, "--lr-scaling", "none", "--grad-compression", scheme]))
    runs.append(("async, 1 ps + 2 workers", "async", MPIRUN + ["-np", "3", slimflow] + common + [
        "--batch", half, "--lr-scaling", "none", "--data-parallel", "async", "--ps", "1",
        "--max-staleness", "4"]))
    by_folder = {folder: (name, folder, cmd) for name, folder, cmd in runs}
    wanted = [w for w in args.accuracy_runs.split(",") if w]
    unknown = [w for w in wanted if w not in by_folder]
    if unknown:
        sys.exit(f"--accuracy-runs: unknown run {', '.join(unknown)}; "
                 f"expected some of {','.join(by_folder)}")
    rows = []
    for name, folder, cmd in (by_folder[w] for w in wanted):
        out_dir = os.path.join(ROOT, f"runs/bench-dp-{folder}")
        epochs = run_json_lines(cmd + ["--out", out_dir], env)
        last = epochs[-1]
        steps = last["step"] / max(len(epochs), 1)
        wall = 0.0
        points = []
        for e in epochs:
            wall += e["epoch_seconds"]
            points.append({"epoch": e["epoch"], "step": e["step"], "wall_seconds": wall,
                           "test_accuracy": e["test_accuracy"], "loss": e["loss"],
                           "staleness_max": e.get("staleness_max", 0),
                           "staleness_mean": e.get("staleness_mean", 0.0)})
        curve = {"run": name, "command": " ".join(cmd), "world_size": last["world_size"],
                 "global_batch": last["global_batch"], "points": points}
        with open(os.path.join(out_dir, "convergence.json"), "w") as f:
            json.dump(curve, f, indent=1)
        rows.append({"run": name, "test_accuracy": last["test_accuracy"],
                     "bytes_per_step": last.get("comm_bytes_per_step",
                                                last.get("comm_bytes", 0) / max(steps, 1)),
                     "staleness_mean": last.get("staleness_mean", 0.0), "curve": curve})
    return rows


if __name__ == "__main__":
    main()
