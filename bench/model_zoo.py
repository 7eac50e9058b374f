#!/usr/bin/env python3
"""The model zoo's table (docs/MODEL_ZOO.md): for each spec under models/ that takes MNIST-sized
images, train it on MNIST and on Fashion-MNIST, freeze it, quantize it to an eightbit integer
graph (1,000 calibration images), and measure parameters, FLOPs per image, test accuracy, file
size and batch-1 latency (fp32 and int8), next to the Deep-MNIST CNN as the reference.

    /usr/bin/python3 bench/model_zoo.py [--threads 2] [--epochs N] [--train-limit N]
        [--models squeezenet-mnist,...] [--data mnist,fashion-mnist] [--json]

--epochs defaults to each spec's own (train.epochs); full runs take hours on two shared cores,
so the table printed says how many epochs and training images each row had. Writes
runs/bench-zoo/results.json and prints the table as Markdown.
"""
import argparse
import json
import os
import subprocess

from bench_common import ROOT, run, last_json, cpu_flags

OUT = os.path.join(ROOT, "runs", "bench-zoo")
MODELS = ["deep-mnist", "squeezenet-mnist", "mobilenet-mnist", "resnet-mnist", "wide-resnet-mnist",
          "lenet5", "mlp-1200", "mlp-800"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", default="2")
    p.add_argument("--epochs", type=int, default=0, help="0: each spec's train.epochs")
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--data", default="mnist,fashion-mnist")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    sf = os.path.join(ROOT, "build", "release", "slimflow")
    os.makedirs(OUT, exist_ok=True)
    t = a.threads
    rows = []
    for model in a.models.split(","):
        row = {"model": model}
        for data in a.data.split(","):
            base = os.path.join(OUT, f"{model}-{data}")
            cmd = [sf, "train", "--overwrite", "--model", f"models/{model}.yaml", "--data", data, "--threads", t,
                   "--quiet", "--json", "--out", base]
            if a.epochs:
                cmd += ["--epochs", str(a.epochs)]
            if a.train_limit:
                cmd += ["--train-limit", str(a.train_limit)]
            subprocess.run(["rm", "-rf", base])
            history = [json.loads(l) for l in run(cmd).splitlines() if l.startswith("{")]
            run([sf, "freeze", base, "--out", base + ".sfm"])
            run([sf, "quantize", base + ".sfm", "--mode", "eightbit", "--calib-data", data,
                 "--calib-count", "1000", "--threads", t, "--out", base + "-q8.sfm"])
            fp32 = last_json(run([sf, "eval", "--model", base + ".sfm", "--data", data,
                                  "--threads", t, "--json"]))
            int8 = last_json(run([sf, "eval", "--model", base + "-q8.sfm", "--data", data,
                                  "--threads", t, "--json"]))
            row[data] = {"epochs": len(history), "train_images": a.train_limit or 60000,
                         "accuracy": fp32["accuracy"], "int8_accuracy": int8["accuracy"]}
            if "parameters" in row:
                continue
            inspect = run([sf, "inspect", base + ".sfm"]).strip().splitlines()[-1]
            row["parameters"] = int(inspect.split()[0])
            b1 = last_json(run([sf, "bench", "--model", base + ".sfm", "--batch", "1", "--threads",
                                t, "--runs", "300", "--profile", "--json"]))
            q1 = last_json(run([sf, "bench", "--model", base + "-q8.sfm", "--batch", "1",
                                "--threads", t, "--runs", "300", "--json"]))
            row["mflops"] = sum(r["gflops"] * r["ms"] * 1e6 for r in b1["profile"]) / 1e6
            row["fp32"] = {"latency_ms": b1["latency_ms_median"], "bytes": b1["model_bytes"]}
            row["int8"] = {"latency_ms": q1["latency_ms_median"], "bytes": q1["model_bytes"]}
        rows.append(row)
    results = {"cpu_features": cpu_flags(), "threads": t, "rows": rows}
    json.dump(results, open(os.path.join(OUT, "results.json"), "w"), indent=1)
    if a.json:
        print(json.dumps(results))
        return
    datas = a.data.split(",")
    print(f"CPU: {results['cpu_features']}; {t} threads; batch-1 median latency")
    head = "| model | parameters | MFLOPs | " + " | ".join(f"{d} (epochs, images)" for d in datas)
    print(head + " | fp32 ms | int8 ms | fp32 bytes | int8 bytes |")
    print("|" + "---|" * (head.count("|") + 4))
    for r in rows:
        accs = " | ".join(f"{100 * r[d]['accuracy']:.2f}% / int8 {100 * r[d]['int8_accuracy']:.2f}% "
                          f"({r[d]['epochs']}, {r[d]['train_images']})" for d in datas)
        print(f"| {r['model']} | {r['parameters']} | {r['mflops']:.2f} | {accs} | "
              f"{r['fp32']['latency_ms']:.3f} | {r['int8']['latency_ms']:.3f} | "
              f"{r['fp32']['bytes']} | {r['int8']['bytes']} |")


if __name__ == "__main__":
    main()
