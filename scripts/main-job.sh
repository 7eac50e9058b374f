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

echo "== compress: 8-bit weights; the integer (eightbit) graph calibrated on 1,000 images"
"$sf" quantize runs/mnist.sfm --mode weights --out runs/mnist-w8.sfm
"$sf" quantize runs/mnist.sfm --mode eightbit --calib-data mnist --calib-count 1000 \
  --out runs/mnist-q8.sfm

echo "== prune by magnitude (gradual), retrain 4 epochs: conv2 90%, fc1 97% in blocks of 16"
echo "   outputs (block-sparse kernel); then quantize the nonzeros to a 5-bit k-means codebook"
echo "   and Huffman-code values and indices"
rm -rf runs/mnist-pruned
"$sf" prune runs/mnist --data mnist --per-layer conv2=0.9,fc1=0.97 --block 16 --epochs 4 \
  --threads 2 --out runs/mnist-pruned --quiet --json | tee runs/mnist-prune.json
"$sf" freeze runs/mnist-pruned --out runs/mnist-pruned.sfm
"$sf" size-report runs/mnist-pruned.sfm --bits 5 --scheme kmeans --write runs/mnist-pruned-q.sfm
echo "== the pruned model as an eightbit graph: sparse int8 kernels where the zeros pay"
"$sf" quantize runs/mnist-pruned.sfm --mode eightbit --calib-data mnist --calib-count 1000 \
  --out runs/mnist-pruned-q8.sfm
for m in mnist mnist-w8 mnist-q8 mnist-pruned mnist-pruned-q mnist-pruned-q8; do
  "$sf" eval --model "runs/$m.sfm" --data mnist --threads 2 --json > "runs/$m-eval.json"
  "$sf" bench --model "runs/$m.sfm" --batch 1 --threads 2 --runs 300 --json > "runs/$m-b1.json"
done

echo "== distill: the trained CNN (runs/mnist) teaches squeezenet-mnist (36k parameters, 90x"
echo "   fewer), 1 epoch on 30,000 images at T = 4, alpha = 0.9 (teacher logits cached once)"
rm -rf runs/mnist-distilled
"$sf" distill --teacher runs/mnist --student models/squeezenet-mnist.yaml --data mnist \
  --temperature 4 --alpha 0.9 --epochs 1 --train-limit 30000 --threads 2 --quiet --json \
  --out runs/mnist-distilled | tee runs/mnist-distill.jsonl
"$sf" freeze runs/mnist-distilled --out runs/mnist-distilled.sfm
"$sf" eval --model runs/mnist-distilled.sfm --data mnist --threads 2 --json > runs/mnist-distilled-eval.json
"$sf" bench --model runs/mnist-distilled.sfm --batch 1 --threads 2 --runs 300 --json \
  > runs/mnist-distilled-b1.json

echo "== ONNX Runtime 1.30 on the same network (exported from PyTorch; outputs checked)"
/usr/bin/python3 bench/inference_vs_ort.py --models deep-mnist --json > runs/ort-deep-mnist.json

echo "== PyTorch 1.13 on the same network, batch and threads (1 epoch, for speed and memory;"
echo "   glibc malloc tuned with mallopt and NHWC tensors (channels_last), PyTorch's fastest"
echo "   settings here)"
OPENBLAS_CORETYPE=Cooperlake OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/pytorch_deep_mnist.py \
  --epochs 1 --batch 64 --threads 2 --channels-last | tee runs/pytorch-train.jsonl

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
print(f"{'':34}{'':>12}{'(mallopt+NHWC)':>14}")
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
ort = json.load(open("runs/ort-deep-mnist.json"))["rows"][0]
print(f"{'ONNX Runtime, same network (ONNX)':34}{ort['slimflow_latency_ms']:12.3f}"
      f"{ort['ort_latency_ms']:14.3f}{ort['latency_ratio']:7.2f}x  (batch-1 ms; ratio > 1: faster)")
print(f"{'  batch-64 images/s':34}{ort['slimflow_b64_per_sec']:12.0f}{ort['ort_b64_per_sec']:14.0f}"
      f"{ort['b64_ratio']:7.2f}x")
print()
print("Compressed models (MNIST test set, batch-1 latency median, 2 threads)")
print(f"{'model':34}{'accuracy':>10}{'bytes':>12}{'smaller':>9}{'ms':>8}{'faster':>8}")
base = None
names = [("mnist", "fp32 (frozen)"), ("mnist-w8", "8-bit weights, float compute"),
         ("mnist-q8", "eightbit integer graph, calibrated"),
         ("mnist-pruned", "pruned (conv2 90%, fc1 97%), fp32"),
         ("mnist-pruned-q", "pruned + 5-bit k-means + Huffman"),
         ("mnist-pruned-q8", "pruned + eightbit integer graph")]
for key, label in names:
    acc = json.load(open(f"runs/{key}-eval.json"))["accuracy"]
    b = json.load(open(f"runs/{key}-b1.json"))
    if base is None:
        base = b
    print(f"{label:34}{100 * acc:9.2f}%{b['model_bytes']:12d}{base['model_bytes'] / b['model_bytes']:8.1f}x"
          f"{b['latency_ms_median']:8.3f}{base['latency_ms_median'] / b['latency_ms_median']:7.2f}x")
print()
print("Distillation: the CNN above teaches squeezenet-mnist (MNIST test set, batch-1 median)")
print(f"{'model':34}{'accuracy':>10}{'bytes':>12}{'smaller':>9}{'ms':>8}{'faster':>8}{'train s':>9}")
d_ev = json.load(open("runs/mnist-distilled-eval.json"))
d_b1 = json.load(open("runs/mnist-distilled-b1.json"))
d_tr = [json.loads(l) for l in open("runs/mnist-distill.jsonl") if l.startswith("{")]
print(f"{'teacher: Deep-MNIST CNN, 5 epochs':34}{100 * ev['accuracy']:9.2f}%{base['model_bytes']:12d}"
      f"{'':9}{base['latency_ms_median']:8.3f}")
print(f"{'student: squeezenet-mnist, 1 ep.':34}{100 * d_ev['accuracy']:9.2f}%{d_b1['model_bytes']:12d}"
      f"{base['model_bytes'] / d_b1['model_bytes']:8.1f}x{d_b1['latency_ms_median']:8.3f}"
      f"{base['latency_ms_median'] / d_b1['latency_ms_median']:7.2f}x"
      f"{sum(r['epoch_seconds'] for r in d_tr):9.0f}")
print("More: bench/inference_vs_ort.py (4 models), bench/pruning.py, bench/quantization.py, "
      "bench/distill.py")
PY
