"""What the benchmark scripts share: running our commands, reading their JSON lines, and the
CPU's features, which every reported figure names."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env=None):
    """Runs `cmd` in the repository root (its command line echoed to stderr) and returns its
    stdout; a failure ends the script, naming the command."""
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                          env=dict(os.environ, **(env or {})))
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}")
    return proc.stdout


def json_lines(text):
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def last_json(text):
    return json.loads([l for l in text.splitlines() if l.startswith("{")][-1])


def cpu_flags():
    """The CPU's vector and matrix extensions (avx*, amx*) as /proc/cpuinfo names them."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return " ".join(sorted(f for f in line.split(":", 1)[1].split()
                                           if f.startswith(("avx", "amx"))))
    except OSError:
        pass
    return "unknown"
