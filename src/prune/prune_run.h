// Iterative magnitude pruning with retraining: start from a trained run, zero the smallest
// weights, or blocks of adjacent output channels, of each layer (all at once or along the cubic
// gradual schedule), retrain with masks
// that hold pruned weights and their optimizer state at exactly zero, and write a new run that
// `freeze` and `eval` use like any other.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace sf {

struct PruneOptions {
  std::string run_dir;  // the trained run to prune
  std::string data = "mnist";
  std::string out_dir;
  // Exactly one way to choose per-layer sparsities:
  std::optional<double> target;               // model-wide, one magnitude threshold
  std::map<std::string, double> per_layer;    // layer name -> sparsity; others stay dense
  bool from_sensitivity = false;              // the most each layer tolerates within max_drop
  // Remove the `target` fraction of filters / neurons of each layer (but the classifier) by
  // norm, making a smaller dense model, instead of zeroing single weights.
  bool structured = false;
  // Prune blocks of this many adjacent output channels of one input row (1, 4, 8 or 16; 1:
  // single weights), which the block-sparse kernels run faster; see prune/magnitude.h.
  int64_t block = 1;
  std::string norm = "l1";  // l1 | l2: ranks filters for structured, blocks for block > 1
  double max_drop = 0.1;                      // accuracy points, for from_sensitivity
  std::vector<double> levels = {0.5, 0.7, 0.8, 0.9, 0.95, 0.98};
  std::string schedule = "gradual";  // gradual | oneshot
  int64_t epochs = 4;
  // Default: the run's own learning rate (its schedule restarts): a tenth of it recovered
  // LeNet-300-100 at 92% sparsity only to -0.4 points in 10 epochs, the full rate to -0.07.
  std::optional<double> lr;
  int threads = 0;
  int64_t train_limit = 0;
  int64_t test_limit = 0;
};

struct LayerSparsity {
  std::string layer;
  int64_t weights = 0;
  int64_t nonzero = 0;
  double target = 0.0;
  double sparsity = 0.0;
};

struct PruneResult {
  double dense_accuracy = 0.0;
  std::vector<LayerSparsity> layers;
  std::vector<EpochReport> history;
  int64_t total_weights() const;
  int64_t nonzero_weights() const;
};

// Parses "fc1=0.97,conv2=0.8". Throws a one-line error for a malformed entry.
std::map<std::string, double> parse_layer_sparsities(const std::string& text);

// Checks the options, chooses the per-layer sparsities, retrains and returns the result.
// `callbacks.on_message` receives the chosen sparsities and schedule.
PruneResult prune_run(const PruneOptions& options, const TrainCallbacks& callbacks);

}  // namespace sf
