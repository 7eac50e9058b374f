// The training loop: builds the training graph from a model spec (model + loss + gradients),
// feeds batches, applies the optimizer, evaluates at each epoch's end and writes checkpoints
// atomically, so that a killed run resumes from its last checkpoint with nothing lost.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/dataset.h"
#include "models/spec.h"
#include "placement/placer.h"
#include "runtime/session.h"
#include "train/distillation.h"
#include "train/epoch_report.h"
#include "train/training_run.h"

namespace sf {

class Communicator;

struct TrainOptions {
  std::string model_path;  // a spec file; empty when resuming
  std::string data;  // empty: mnist for a new run, the run's own data set when resuming
  std::string out_dir;
  bool overwrite = false;  // a new run may replace the checkpoint already in out_dir
  std::string resume_dir;  // non-empty: continue the run stored there
  // Non-empty: a new run in out_dir that starts from this run's model, variables and training
  // options (fine-tuning, e.g. retraining after pruning); the other options override them.
  std::string init_from;
  std::optional<int64_t> epochs;
  std::optional<int64_t> batch;
  std::optional<double> lr;
  std::optional<std::string> optimizer;
  std::optional<double> weight_decay;
  std::optional<double> momentum;
  std::optional<std::string> lr_schedule;
  std::optional<uint64_t> seed;
  int threads = 0;
  int64_t checkpoint_every = 0;  // steps; 0: only at the end of each epoch
  int64_t train_limit = 0;       // use only the first N training examples (0: all)
  int64_t test_limit = 0;
  // Training-image augmentation (io/dataset.h parse_augmentation: "shift:2", "flip", ...);
  // empty: a new run has none, a resumed one keeps its own.
  std::string augment;
  // Quantization-aware training with weights in this many bits (2..8) and u8 activations; a
  // new run or --init-from (fine-tuning a float run). 0: as the spec says.
  int64_t qat_bits = 0;
  // Binarized training (weights, xnor, ternary; models/spec.h's `binarize:`), with the first
  // conv and the last dense binarized too when binarize_all. Empty: as the spec says.
  std::string binarize;
  bool binarize_all = false;
  // Placement (placement/placer.h): the device of nodes the spec places nowhere, the CPU
  // devices of this process (0: one per core), OpenMP threads per device when the graph spans
  // several, and whether a device without a kernel is an error instead of a fallback.
  std::string device = "/cpu:0";
  int cpu_devices = 0;
  int device_threads = 1;
  bool strict_placement = false;
  // GPipe-style pipelining (train/micro_batches.h): each batch in this many equal micro-batches,
  // which devices holding consecutive layers work on at once; the gradients are accumulated
  // into the whole batch's, then one optimizer step. 1: the batch at once. Chosen per
  // invocation (the update is the same).
  int64_t micro_batches = 1;
  std::string kernel_impl;  // "" best available; "reference" for debugging
  // Mixed precision (runtime/precision.h): fp32, bf16 (conv and matmul products, forward and
  // backward, in bf16 through oneDNN; master weights, optimizer state, losses and softmax fp32)
  // or auto (bf16 where the CPU has AMX). Chosen per invocation; checkpoints stay fp32.
  std::string precision = "fp32";
  bool profile = false;     // report per-node training-step times at the end
  // Synchronous data parallelism (train/data_parallel.h) over this job's communicator; null:
  // one process. Each rank trains `batch` examples per step; rank 0 alone reports and writes.
  Communicator* comm = nullptr;
  double bucket_mb = 4.0;                 // gradient bucket size for the overlapped allreduce
  std::optional<std::string> lr_scaling;  // linear (default) | sqrt | none, for the world size
  int64_t check_replicas_every = 100;     // steps between replica checksums (0: never)
  std::string grad_compression = "none";  // none | fp16 | topk:F | onebit (train/grad_compression.h)
  // auto: sync without compression exchanges a dense layer's weight gradient as its factors
  // where they are fewer floats (GradientBuckets::exchange_as_factors); off: never.
  std::string factored_gradients = "auto";
  // sync (allreduce) or async: parameter servers (train/parameter_server.h), the first
  // `parameter_servers` ranks (default 1) serving, the others training at most `max_staleness`
  // steps (default 4) ahead of the slowest.
  std::string data_parallel = "sync";
  std::optional<int64_t> parameter_servers;
  std::optional<int64_t> max_staleness;
  // Set: the student learns from this teacher too (train/distillation.h). A run trained so
  // records the teacher in its metadata, and resuming it needs the teacher again.
  std::shared_ptr<const Distillation> distillation;
  // Set: train and evaluate on these examples instead of loading `data`, which then only names
  // them in the run's metadata (retrain's cached bottlenecks). Resuming needs them again.
  std::shared_ptr<const DataSplit> data_split;
};

struct Progress {
  int64_t epoch;  // 1-based
  int64_t epochs;
  int64_t batch;  // 1-based within the epoch
  int64_t batches;
  double loss;            // running mean over the epoch so far
  double accuracy;        // running training accuracy over the epoch so far
  double images_per_sec;  // over the epoch so far
  double eta_seconds;     // to the end of the epoch
};

class Optimizer;

// What a callback may change after each optimizer step.
struct StepState {
  int64_t step;  // steps done so far in this run, >= 1
  int64_t total_steps;
  VariableStore& variables;
  Optimizer& optimizer;
};

struct TrainCallbacks {
  // Runs after every optimizer step (pruning holds masked weights at zero here).
  std::function<void(const StepState&)> after_step;
  std::function<void(const Progress&)> on_progress;
  std::function<void(const EpochReport&)> on_epoch;
  std::function<void(const std::string&)> on_message;
  std::function<void(const std::vector<NodeProfile>&)> on_profile;
  // The training graph's placement, once before the first step (rank 0 of a job).
  std::function<void(const Graph&, const PlacementReport&)> on_placement;
};

// Runs the whole training. Throws sf::Error for bad options, data or specs, and for a
// non-finite loss (naming the step).
std::vector<EpochReport> train(const TrainOptions& options, const TrainCallbacks& callbacks);

struct EvalResult {
  double accuracy = 0.0;
  int64_t count = 0;
  double loss = 0.0;
};

// Evaluates the model of a run directory (its latest checkpoint) on `data`'s test split.
EvalResult evaluate_run(const std::string& run_dir, const std::string& data, int64_t limit,
                        int threads);

// A run's model and variables loaded once, evaluated as often as needed after editing the
// variables (what pruning's sensitivity analysis does).
class RunEvaluator {
 public:
  RunEvaluator(const std::string& run_dir, const std::string& data, int64_t limit, int threads);
  ~RunEvaluator();
  EvalResult evaluate();
  VariableStore& variables();
  const Model& model() const;
  const ModelSpec& spec() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sf
