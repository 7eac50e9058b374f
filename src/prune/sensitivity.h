// Sensitivity analysis: prune one layer at a time at each level and measure held-out accuracy,
// to see which layers tolerate pruning (our reference guide's first step before pruning).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace sf {

struct SensitivityRow {
  std::string layer;   // "fc1"
  std::string weight;  // "fc1/weights"
  int64_t weights = 0;
  std::vector<double> accuracy;  // one per level
};

struct SensitivityTable {
  std::vector<double> levels;
  double baseline = 0.0;  // dense accuracy
  int64_t eval_count = 0;
  std::vector<SensitivityRow> rows;
};

// Evaluates the run with each prunable layer pruned alone at each level; the variables are
// restored afterwards. `on_step(layer, level)` reports progress.
SensitivityTable analyse_sensitivity(
    RunEvaluator& run, const std::vector<double>& levels,
    const std::function<void(const std::string&, double)>& on_step = nullptr);

// For each layer, the highest level whose accuracy stays within `max_drop_points` percentage
// points of the baseline (0 when none does).
std::map<std::string, double> sparsity_within(const SensitivityTable& table,
                                              double max_drop_points);

// Levels as "0.5,0.7,..."; each in [0, 1). Throws a one-line error otherwise.
std::vector<double> parse_levels(const std::string& text);

}  // namespace sf
