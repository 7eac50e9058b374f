"""Gives every option of every subcommand hostile values (empty, negative, huge, NaN, inf,
malformed lists, missing paths, a folder, /dev/null, /dev/stdout) on top of a command line that
works, and reports any run that dies by a signal, hangs, prints a sanitizer or assertion message,
replaces /dev/null or /dev/stdout with a file, or fails with more than a couple of lines instead
of one error. About 2,900 runs, about 10 minutes on 2 cores (7 with the subcommands split over
two processes); not in CI, whose time it would take a sixth of. Run it after changing the command
line.

Usage: /usr/bin/python3 scripts/option_sweep.py build/release/slimflow [SUBCOMMAND ...]
Exits 1 when any run was flagged. Works in a temporary folder, which it removes; needs MNIST
under data/ (scripts/setup.sh).
"""
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VALUES = ["", "0", "-1", "-2147483649", "99999999999999999999", "1e30", "nan", "inf", "-inf",
          "abc", "1,2", "=", "x=1", "x=", "fc1=2", "fc1=nan", "fc1=-1,fc1=0.5", "shift:-1",
          "shift:99999", "flip,flip", "/nonexistent/x", "/dev/null", "0.5", "1", "2", "1000000",
          "3e9"]
# Commands that train take seconds a run: fewer values.
SLOW_VALUES = ["", "-1", "0", "nan", "1e30", "abc", "99999999999999999999", "fc1=2",
               "/nonexistent/x"]
STANDARD_STREAMS = ["/dev/stdin", "/dev/stdout", "/dev/stderr"]
# Options that write a file also get /dev/stdout. An option that reads one would wait on it for
# ever, as `cat /dev/stdout | wc` does: stdout is a pipe whose only writer is the reader.
WRITES = re.compile(r"--(out|output-dir|out-dir|log-placement|profile|write|report)$")
SLOW = {"train", "distill", "prune", "retrain", "quantize"}
FLAGGED_TEXT = re.compile(r"terminate called|Assertion|runtime error:|AddressSanitizer|"
                          r"Segmentation|what\(\)")


def run(argv, cwd, timeout=120):
    # errors="replace": a model written to /dev/stdout comes back as binary.
    return subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout,
                          cwd=cwd)


def prepare(sf, work):
    """A trained run, its model, images and an input, for the base command lines."""
    def ok(*args):
        p = run([sf, *args], cwd=REPO, timeout=600)
        if p.returncode != 0:
            sys.exit(f"option_sweep: preparing with `slimflow {' '.join(args)}` failed:\n{p.stderr}")
    ok("train", "--model", "models/deep-mnist.yaml", "--data", "mnist", "--train-limit", "256",
       "--test-limit", "64", "--epochs", "1", "--quiet", "--out", f"{work}/run")
    ok("freeze", f"{work}/run", "--out", f"{work}/m.sfm")
    ok("export", f"{work}/m.sfm", "--out", f"{work}/e.onnx")
    ok("export-images", "--count", "2", "--out-dir", f"{work}/img")
    ok("export-images", "--count", "60", "--by-label", "--out-dir", f"{work}/imgs")
    np.save(f"{work}/x.npy", np.random.default_rng(0).random((1, 28, 28, 1), dtype=np.float32))
    image = sorted(os.listdir(f"{work}/img"))[0]
    os.makedirs(f"{work}/folder")
    few = ["--train-limit", "128", "--test-limit", "64", "--epochs", "1", "--quiet"]
    return {
        "train": ["--model", "models/deep-mnist.yaml", "--data", "mnist", "--out", f"{work}/t",
                  "--overwrite", *few],
        "eval": ["--model", f"{work}/m.sfm", "--data", "mnist", "--limit", "64"],
        "freeze": [f"{work}/run", "--out", f"{work}/f.sfm"],
        "classify": ["--model", f"{work}/m.sfm", "--image", f"{work}/img/{image}"],
        "run": ["--model", f"{work}/m.sfm", "--input", f"{work}/x.npy", "--output-dir",
                f"{work}/out"],
        "bench": ["--model", f"{work}/m.sfm", "--runs", "2", "--warmup", "0"],
        "inspect": [f"{work}/m.sfm"],
        "quantize": [f"{work}/m.sfm", "--mode", "eightbit", "--out", f"{work}/q.sfm",
                     "--calib-data", "mnist", "--calib-count", "16"],
        "export-images": ["--out-dir", f"{work}/ei", "--count", "2"],
        "prune": [f"{work}/run", "--target", "0.5", "--out", f"{work}/pr", "--epochs", "1",
                  "--train-limit", "64", "--test-limit", "64", "--quiet"],
        "size-report": [f"{work}/m.sfm"],
        "export": [f"{work}/m.sfm", "--out", f"{work}/e2.onnx"],
        "distill": ["--teacher", f"{work}/m.sfm", "--student", "models/mlp-800.yaml", "--out",
                    f"{work}/d", "--overwrite", *few],
        "retrain": ["--base", f"{work}/m.sfm", "--bottleneck", "fc1", "--images", f"{work}/imgs",
                    "--out", f"{work}/rt", "--overwrite", "--epochs", "1", "--quiet"],
        "import": [f"{work}/e.onnx", "--out", f"{work}/i.sfm"],
    }


def options(sf, command):
    """(option, takes a value) for each option `slimflow COMMAND --help` lists."""
    text = run([sf, command, "--help"], cwd=REPO).stdout
    found = []
    for line in text.splitlines():
        m = re.match(r"\s+(?:-\w,)?(--[\w-]+)\s+(\S+)?", line)
        if not m or m.group(1) == "--help":
            continue
        kind = m.group(2) or ""
        found.append((m.group(1), kind.startswith(("TEXT", "INT", "FLOAT", "UINT", "SIZE"))))
    return found


def main():
    sf = os.path.abspath(sys.argv[1])
    only = set(sys.argv[2:])
    work = tempfile.mkdtemp(prefix="sf-option-sweep-")
    scratch = os.path.join(work, "cwd")  # relative paths the values name land here
    os.makedirs(scratch)
    flagged = runs = 0
    try:
        base = prepare(sf, work)
        for command, args in base.items():
            if only and command not in only:
                continue
            for option, takes_value in options(sf, command):
                values = (SLOW_VALUES if command in SLOW else VALUES) + [f"{work}/folder"]
                if WRITES.match(option):
                    values.append("/dev/stdout")
                for value in values if takes_value else [None]:
                    argv = [sf, command, *args, option] + ([] if value is None else [value])
                    # Relative model specs (models/...) resolve from the repository.
                    argv = [os.path.join(REPO, a) if a.startswith("models/") else a for a in argv]
                    runs += 1
                    try:
                        p = run(argv, cwd=scratch)
                    except subprocess.TimeoutExpired:
                        flagged += 1
                        print("HANG", " ".join(argv[1:]), flush=True)
                        continue
                    lines = [line for line in p.stderr.splitlines()
                             if line.strip() and not line.startswith(("epoch", "precision"))]
                    why = None
                    if p.returncode < 0 or p.returncode >= 128:
                        why = f"signal/exit {p.returncode}"
                    elif FLAGGED_TEXT.search(p.stderr):
                        why = "crash text"
                    elif p.returncode != 0 and len(lines) > 2:
                        why = f"{len(lines)} lines of error"
                    if not stat.S_ISCHR(os.stat("/dev/null").st_mode):
                        # An output written by renaming over /dev/null replaced the device.
                        os.remove("/dev/null")
                        os.mknod("/dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
                        why = why or "replaced /dev/null with a file (restored)"
                    for fd, name in enumerate(STANDARD_STREAMS):
                        if not os.path.islink(name):
                            # Renaming over /dev/stdout leaves every later program on the
                            # machine writing its "stdout" to a file.
                            if os.path.lexists(name):
                                os.remove(name)
                            os.symlink(f"/proc/self/fd/{fd}", name)
                            why = why or f"replaced {name} with a file (restored)"
                    if why:
                        flagged += 1
                        print(why, " ".join(argv[1:]), "\n   ", p.stderr.strip()[-400:], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{runs} runs, {flagged} flagged")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
