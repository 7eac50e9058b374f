#!/usr/bin/env python3
"""Achieved OP/s of each convolution and matrix product, fp32, bf16 and int8, next to the peaks.

The peaks come from build/release/bench/op_ceiling on the same threads: the instruction-level
ceiling of the format (register-resident loops of AVX-512 FMA / vdpbf16ps / vpdpbusd and AMX
tdpbf16ps / tdpbssd) and oneDNN's matmul at 2048^3. Each model runs through `slimflow bench
--profile --json` at batch 64: fp32, `--precision bf16`, and int8 from `slimflow quantize --mode
eightbit` (deep-mnist calibrated on MNIST, resnet18 with ranges at run time). A kernel's OP/s
is 2 x its multiply-accumulates / its time per call; the table shows the largest kernels of each
model, and --json everything.

    /usr/bin/python3 bench/op_rates.py [--models deep-mnist,resnet18] [--threads 2] [--json]
"""
import argparse
import json
import os
import sys

from bench_common import ROOT, cpu_flags, last_json, run

# The ceiling each format's kernels are measured against: AMX where the CPU has it.
CEILINGS = {"fp32": ["fp32_avx512_fma"],
            "bf16": ["bf16_amx_tdpbf16ps", "bf16_avx512_dpbf16ps"],
            "int8": ["int8_amx_tdpbssd", "int8_avx512_vpdpbusd"]}


def ceiling_of(probe, fmt):
    for name in CEILINGS[fmt]:
        if name in probe["instruction"]:
            return name, probe["instruction"][name]
    return None, None


def percent(fraction):
    return f"{100 * fraction:.0f}%" if fraction else "-"


def profile(slimflow, model, precision, batch, threads, runs):
    cmd = [slimflow, "bench", "--model", model, "--batch", str(batch), "--threads", str(threads),
           "--runs", str(runs), "--warmup", "3", "--profile", "--json"]
    if precision:
        cmd += ["--precision", precision]
    return last_json(run(cmd))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="deep-mnist,resnet18")
    parser.add_argument("--dir", default="runs/onnx")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--top", type=int, default=4, help="kernels per model and format shown")
    parser.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    slimflow = os.path.join(args.build, "slimflow")
    probe_path = os.path.join(args.build, "bench/op_ceiling")
    if not os.path.exists(probe_path):
        sys.exit("op_ceiling is built on x86-64 only (bench/CMakeLists.txt)")
    models = args.models.split(",")
    if not all(os.path.exists(os.path.join(ROOT, args.dir, f"{m}.onnx")) for m in models):
        run(["/usr/bin/python3", "bench/export_onnx_models.py", "--out", args.dir])
    probe = last_json(run([probe_path, "--threads", str(args.threads)]))

    rows = []
    for name in models:
        onnx = os.path.join(args.dir, f"{name}.onnx")
        int8 = os.path.join(args.dir, f"{name}-int8-op-rates.sfm")
        calibration = (["--calib-data", "mnist", "--calib-count", "200"]
                       if name == "deep-mnist" else [])
        run([slimflow, "quantize", onnx, "--mode", "eightbit", "--out", int8] + calibration)
        for fmt, model, precision in (("fp32", onnx, "fp32"), ("bf16", onnx, "bf16"),
                                      ("int8", int8, None)):
            result = profile(slimflow, model, precision, args.batch, args.threads, args.runs)
            ceiling_name, ceiling = ceiling_of(probe, fmt)
            gemm = probe["onednn"].get(fmt, {}).get("ops_per_second")
            kernels = [k for k in result["profile"] if k["gflops"] > 0]
            for k in sorted(kernels, key=lambda k: -k["ms"]):
                ops = k["gflops"] * 1e9
                rows.append({"model": name, "format": fmt, "node": k["node"], "op": k["op"],
                             "impl": k["impl"], "ms": k["ms"], "ops_per_second": ops,
                             "of_instruction_ceiling": ops / ceiling if ceiling else None,
                             "instruction_ceiling": ceiling_name,
                             "of_onednn_matmul": ops / gemm if gemm else None})
    result = {"cpu": cpu_flags(), "threads": args.threads, "batch": args.batch, "probe": probe,
              "kernels": rows}
    if args.json:
        print(json.dumps(result))
        return
    print(f"\nOP/s per kernel at batch {args.batch}, {args.threads} threads; CPU: {result['cpu']}")
    print("peaks (op_ceiling):")
    for key, value in probe["instruction"].items():
        print(f"  instruction {key:24}{value / 1e9:10.0f} GOP/s")
    for key, value in probe["onednn"].items():
        size = probe["onednn_matmul_size"]
        print(f"  oneDNN matmul {size}^3 {key:6}{value['ops_per_second'] / 1e9:14.0f}"
              f" GOP/s ({value['impl']})")
    print(f"\n{'model':11}{'format':7}{'node':28}{'impl':28}{'ms':>8}{'GOP/s':>9}"
          f"{'of ceiling':>12}{'of matmul':>11}")
    shown = {}
    for r in rows:
        key = (r["model"], r["format"])
        shown[key] = shown.get(key, 0) + 1
        if shown[key] > args.top:
            continue
        ceiling, matmul = percent(r["of_instruction_ceiling"]), percent(r["of_onednn_matmul"])
        print(f"{r['model']:11}{r['format']:7}{r['node'][:27]:28}{r['impl'][:27]:28}"
              f"{r['ms']:8.3f}{r['ops_per_second'] / 1e9:9.0f}{ceiling:>12}{matmul:>11}")
    print("\nceiling: fp32 against AVX-512 FMA, bf16 and int8 against AMX where the CPU has it "
          "(else AVX512_BF16 / VNNI); matmul: oneDNN's own large product in the same format.")


if __name__ == "__main__":
    main()
