#include "prune/sensitivity.h"

#include <sstream>

#include "core/error.h"
#include "prune/magnitude.h"

namespace sf {

SensitivityTable analyse_sensitivity(
    RunEvaluator& run, const std::vector<double>& levels,
    const std::function<void(const std::string&, double)>& on_step) {
  SensitivityTable table;
  table.levels = levels;
  const EvalResult dense = run.evaluate();
  table.baseline = dense.accuracy;
  table.eval_count = dense.count;
  VariableStore& vars = run.variables();
  for (const std::string& name : prunable_weights(run.model())) {
    Tensor& w = vars.get(name);
    const Tensor original = w.clone();
    SensitivityRow row{layer_of(name), name, w.numel(), {}};
    for (double level : levels) {
      if (on_step) on_step(row.layer, level);
      apply_mask(w, magnitude_mask(original, level));
      row.accuracy.push_back(run.evaluate().accuracy);
      std::copy(original.data<float>(), original.data<float>() + original.numel(),
                w.data<float>());
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

std::map<std::string, double> sparsity_within(const SensitivityTable& table,
                                              double max_drop_points) {
  std::map<std::string, double> out;
  for (const SensitivityRow& row : table.rows) {
    double best = 0.0;
    for (size_t i = 0; i < table.levels.size(); ++i)
      if ((table.baseline - row.accuracy[i]) * 100.0 <= max_drop_points)
        best = std::max(best, table.levels[i]);
    out[row.layer] = best;
  }
  return out;
}

std::vector<double> parse_levels(const std::string& text) {
  std::vector<double> levels;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !(v >= 0.0 && v < 1.0))
      fail("--levels: '{}' is not a sparsity in [0, 1)", item);
    levels.push_back(v);
  }
  if (levels.empty()) fail("--levels: no levels given");
  return levels;
}

}  // namespace sf
