#!/usr/bin/env python3
"""Transfer-learning figures (`slimflow retrain`), one run.

Base: the Deep-MNIST CNN trained briefly on MNIST and frozen. New task: Fashion-MNIST, exported
as a PNG folder with one subfolder per label (`slimflow export-images --by-label`). Rows:

  head            a dense + softmax head on the cached bottlenecks
  --hidden 256    one more dense ReLU layer in the head
  --fine-tune-from NODE   (when given) the head, then the base's layers after NODE on images

and for the first run: the time to build the bottleneck cache plus its first epoch, against the
mean time of each later epoch (goal: >= 20x faster), and the cache file's size.

    /usr/bin/python3 bench/retrain.py [--threads 2] [--images 6000] [--base FILE.sfm] [--base-epochs 1]
        [--base-train-limit 20000] [--epochs 10] [--bottleneck fc1] [--fine-tune-from NODE] [--json]

Writes runs/bench-retrain/ (base run and model, images, runs, results.json) and prints a table.
"""
import argparse
import json
import os
import time

from bench_common import ROOT, run, json_lines

OUT = os.path.join(ROOT, "runs", "bench-retrain")
SF = os.path.join(ROOT, "build", "release", "slimflow")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--images", type=int, default=6000, help="Fashion-MNIST training images exported")
    p.add_argument("--base-epochs", type=int, default=1)
    p.add_argument("--base-train-limit", type=int, default=20000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--bottleneck", default="fc1")
    p.add_argument("--fine-tune-from", default="")
    p.add_argument("--eval-limit", type=int, default=2000,
                   help="Fashion-MNIST test images each model is evaluated on (slimflow eval, 0: all)")
    p.add_argument("--base", default="", help="a frozen base model to use instead of training one "
                   "(e.g. runs/bench-distill/deep-mnist-mnist.sfm: 5 epochs on all of MNIST)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    os.makedirs(OUT, exist_ok=True)
    path = lambda name: os.path.join(OUT, name)
    common = ["--threads", str(a.threads)]

    base = a.base or path("base.sfm")
    if not os.path.exists(base):
        run([SF, "train", "--model", "models/deep-mnist.yaml", "--data", "mnist", "--epochs", str(a.base_epochs),
             "--train-limit", str(a.base_train_limit), "--out", path("base"), "--overwrite", "--quiet", *common])
        run([SF, "freeze", path("base"), "--out", base])
    images = path(f"fashion-{a.images}")
    if not os.path.isdir(images):
        run([SF, "export-images", "--data", "fashion-mnist", "--split", "train", "--by-label",
             "--count", str(a.images), "--out-dir", images])
    cache = path("bottlenecks.cache")
    if os.path.exists(cache):
        os.remove(cache)  # the first row times building it

    rows = []

    def retrain(name, extra=()):
        start = time.time()
        lines = json_lines(run([SF, "retrain", "--base", base, "--bottleneck", a.bottleneck, "--images", images,
                                "--cache", cache, "--out", path(name), "--epochs", str(a.epochs), "--seed", "1",
                                "--overwrite", "--quiet", "--json", *extra, *common]))
        summary, epochs = lines[-1], lines[:-1]
        later = [e["epoch_seconds"] for e in epochs[1:]]
        row = {"run": name, "args": " ".join(extra), "test_accuracy": summary["test_accuracy"],
               "test_images": summary["test"], "validation_accuracy": epochs[-1]["test_accuracy"],
               "bottlenecks_computed": summary["bottlenecks_computed"],
               "cache_seconds": summary["cache_seconds"], "cache_bytes": summary["cache_bytes"],
               "first_epoch_seconds": summary["cache_seconds"] + epochs[0]["epoch_seconds"],
               "later_epoch_seconds": sum(later) / len(later) if later else float("nan"),
               "wall_seconds": time.time() - start}
        # The data set's own test images, through `eval`, which reads the model's preprocessing.
        limit = ["--limit", str(a.eval_limit)] if a.eval_limit else []
        ev = json_lines(run([SF, "eval", "--model", summary["model"], "--data", "fashion-mnist", "--json",
                             *limit, *common]))[-1]
        row["eval_accuracy"], row["eval_images"] = ev["accuracy"], ev["count"]
        rows.append(row)
        return row

    retrain("head")
    retrain("hidden-256", ["--hidden", "256"])
    if a.fine_tune_from:
        retrain("fine-tune", ["--fine-tune-from", a.fine_tune_from])
    first = rows[0]
    result = {"rows": rows, "images": a.images, "epochs": a.epochs, "bottleneck": a.bottleneck,
              "base": a.base, "base_epochs": a.base_epochs, "base_train_limit": a.base_train_limit,
              "threads": a.threads,
              "speedup": first["first_epoch_seconds"] / first["later_epoch_seconds"]}
    with open(path("results.json"), "w") as f:
        json.dump(result, f, indent=1)
    if a.json:
        print(json.dumps(result))
        return
    base_text = a.base or f"MNIST, {a.base_epochs} epoch on {a.base_train_limit} images"
    print(f"Transfer: Deep-MNIST ({base_text}) -> "
          f"Fashion-MNIST ({a.images} PNGs), bottleneck '{a.bottleneck}', {a.epochs} epochs, {a.threads} threads")
    print(f"{'head':<36} {'split test':>10} {'(images)':>9} {'eval':>8} {'(images)':>9} {'computed':>9}")
    for r in rows:
        print(f"{r['run'] + ' ' + r['args']:<36} {100 * r['test_accuracy']:9.2f}% {r['test_images']:9d} "
              f"{100 * r['eval_accuracy']:7.2f}% {r['eval_images']:9d} {r['bottlenecks_computed']:9d}")
    print(f"first epoch (building the cache) {first['first_epoch_seconds']:.2f} s, later epochs "
          f"{first['later_epoch_seconds']:.3f} s each: {result['speedup']:.0f}x; cache "
          f"{first['cache_bytes'] / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
