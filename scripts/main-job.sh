#!/usr/bin/env bash
# The main job: set everything up, train the Deep-MNIST CNN on MNIST, evaluate it, and compare
# training speed with PyTorch on the same network, data and threads. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== build"
bash scripts/build.sh release
sf=build/release/slimflow
mkdir -p runs

echo "== train: Deep-MNIST CNN on MNIST, 5 epochs (models/deep-mnist.yaml)"
rm -rf runs/mnist
"$sf" train --model models/deep-mnist.yaml --data mnist --epochs 5 --threads 2 \
  --out runs/mnist --json | tee runs/mnist-train.jsonl

echo "== eval"
"$sf" eval --model runs/mnist --data mnist --json | tee runs/mnist-eval.json

echo "== freeze into one deployable file, classify a few test digits, bench"
"$sf" freeze runs/mnist --out runs/mnist.sfm
printf '%s\n' zero one two three four five six seven eight nine > runs/digit-labels.txt
"$sf" export-images --data mnist --count 4 --out-dir runs/digits > runs/digits.txt
while read -r png; do
  echo "-- $png"
  "$sf" classify --model runs/mnist.sfm --image "$png" --labels runs/digit-labels.txt --top 2
done < runs/digits.txt
"$sf" bench --model runs/mnist.sfm --batch 1 --threads 2 --runs 200 --json | tee runs/mnist-bench-b1.json
"$sf" bench --model runs/mnist.sfm --batch 64 --threads 2 --runs 50 --json | tee runs/mnist-bench-b64.json

echo "== PyTorch 1.13 on the same network, batch and threads (1 epoch, for speed and memory;"
echo "   glibc malloc tuned with mallopt, PyTorch's fastest setting here)"
OPENBLAS_CORETYPE=Cooperlake OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/pytorch_deep_mnist.py \
  --epochs 1 --batch 64 --threads 2 | tee runs/pytorch-train.jsonl

/usr/bin/python3 - <<'PY'
import json
ours = [json.loads(l) for l in open("runs/mnist-train.jsonl") if l.startswith("{")]
ev = json.load(open("runs/mnist-eval.json"))
torch = [json.loads(l) for l in open("runs/pytorch-train.jsonl") if l.startswith("{")]
ips = sum(r["images_per_sec"] for r in ours) / len(ours)
tips = torch[0]["images_per_sec"]
print()
print("Results: Deep-MNIST CNN on MNIST (batch 64, 2 threads)")
print(f"{'':34}{'slimflow':>12}{'PyTorch 1.13':>14}{'ratio':>8}")
print(f"{'':34}{'':>12}{'(mallopt)':>14}")
print(f"{'test accuracy (5 ep.; PyTorch 1)':34}{100 * ev['accuracy']:11.2f}%"
      f"{100 * torch[0]['test_accuracy']:13.2f}%")
print(f"{'training images/s':34}{ips:12.0f}{tips:14.0f}{ips / tips:7.2f}x")
peak, tpeak = max(r["peak_rss_mb"] for r in ours), torch[0]["peak_rss_mb"]
print(f"{'peak RSS while training (MB)':34}{peak:12.0f}{tpeak:14.0f}{peak / tpeak:7.2f}x")
print(f"{'total training time (s)':34}{sum(r['epoch_seconds'] for r in ours):12.0f}")
b1, b64 = json.load(open("runs/mnist-bench-b1.json")), json.load(open("runs/mnist-bench-b64.json"))
print(f"{'frozen model (runs/mnist.sfm) bytes':34}{b1['model_bytes']:12d}")
print(f"{'batch-1 latency (ms, median)':34}{b1['latency_ms_median']:12.3f}")
print(f"{'batch-64 throughput (images/s)':34}{b64['throughput_per_sec']:12.0f}")
print("ONNX Runtime comparison of the same network: /usr/bin/python3 bench/inference_vs_ort.py")
PY
