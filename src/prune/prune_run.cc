#include "prune/prune_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "prune/magnitude.h"
#include "prune/sensitivity.h"
#include "prune/structured.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/training_run.h"

namespace sf {

namespace {

std::string joined_layers(const std::vector<std::string>& weights) {
  std::string out;
  for (const std::string& w : weights) out += (out.empty() ? "" : ", ") + layer_of(w);
  return out;
}

void check_sparsity(const std::string& what, double s) {
  if (!(s >= 0.0 && s < 1.0)) fail("{} {} is outside [0, 1)", what, s);
}

double run_learning_rate(const std::string& run_dir) {
  return TrainingRun(run_dir).read_metadata(
      [](const nlohmann::json& meta) { return meta.at("options").at("lr").get<double>(); });
}

// Slices the run into a smaller model written as the first checkpoint of out_dir, then retrains
// it from there.
PruneResult structured_prune_run(const PruneOptions& options, const TrainCallbacks& callbacks,
                                 double lr) {
  if (!options.target) fail("prune --structured: --target (the fraction of filters to remove) is required");
  const TrainingRun run(options.run_dir);
  const std::map<std::string, Tensor> variables = run.variables();
  PruneResult result;
  result.dense_accuracy =
      RunEvaluator(options.run_dir, options.data, options.test_limit, options.threads).evaluate().accuracy;
  const StructuredPruning pruned =
      prune_structured(run.spec(), variables, *options.target, options.norm);
  if (pruned.layers.empty())
    fail("{}: the model has nothing to prune structurally (one conv/dense layer)", options.run_dir);
  std::string chosen;
  for (const StructuredLayer& l : pruned.layers)
    chosen += fmt::format(" {} {}->{}", l.layer, l.before, l.kept.size());
  if (callbacks.on_message)
    callbacks.on_message(fmt::format("structured pruning of {} ({} norm):{}", options.run_dir,
                                     options.norm, chosen));

  Checkpoint start;
  for (const auto& [name, t] : pruned.variables) start.tensors[kVariablePrefix + name] = t;
  nlohmann::json meta = run.metadata();
  meta["model_spec"] = pruned.spec_text;
  meta["history"] = nlohmann::json::array();
  start.metadata_json = meta.dump();
  std::filesystem::create_directories(options.out_dir);
  save_checkpoint(checkpoint_path(options.out_dir), start);

  TrainOptions train{.data = options.data,
                     .out_dir = options.out_dir,
                     .overwrite = true,  // prune owns its --out directory
                     .init_from = options.out_dir,
                     .epochs = options.epochs,
                     .lr = lr,
                     .threads = options.threads,
                     .train_limit = options.train_limit,
                     .test_limit = options.test_limit};
  result.history = sf::train(train, callbacks);
  const std::vector<std::string> weights = prunable_weights(build_model(run.spec(), 1));
  for (const auto& [name, t] : variables) {
    if (std::find(weights.begin(), weights.end(), name) == weights.end()) continue;
    const int64_t after = pruned.variables.at(name).numel();
    result.layers.push_back(LayerSparsity{layer_of(name), t.numel(), after, *options.target,
                                          1.0 - static_cast<double>(after) / static_cast<double>(t.numel())});
  }
  return result;
}

// The pruned run replaces whatever run --out holds (so that pruning again is one command), but
// never the run being pruned.
void check_out_dir(const PruneOptions& options) {
  if (options.out_dir.empty()) fail("prune: --out DIR is required");
  std::error_code unused;
  if (std::filesystem::equivalent(options.run_dir, options.out_dir, unused))
    fail("prune: --out {} is the run being pruned ({}), which the pruned run would replace; give "
         "another directory",
         options.out_dir, options.run_dir);
}

}  // namespace

int64_t PruneResult::total_weights() const {
  int64_t n = 0;
  for (const LayerSparsity& l : layers) n += l.weights;
  return n;
}

int64_t PruneResult::nonzero_weights() const {
  int64_t n = 0;
  for (const LayerSparsity& l : layers) n += l.nonzero;
  return n;
}

std::map<std::string, double> parse_layer_sparsities(const std::string& text) {
  std::map<std::string, double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      fail("--per-layer: '{}' is not LAYER=SPARSITY (e.g. fc1=0.97)", item);
    double v = 0;
    size_t used = 0;
    const std::string value = item.substr(eq + 1);
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != value.size())
      fail("--per-layer: '{}' is not LAYER=SPARSITY (e.g. fc1=0.97)", item);
    check_sparsity("--per-layer " + item.substr(0, eq) + ":", v);
    out[item.substr(0, eq)] = v;
  }
  if (out.empty()) fail("--per-layer: no layers given");
  return out;
}

PruneResult prune_run(const PruneOptions& options, const TrainCallbacks& callbacks) {
  auto message = [&](const std::string& text) {
    if (callbacks.on_message) callbacks.on_message(text);
  };
  if (!is_prune_block(options.block))
    fail("prune: --block must be 1, 4, 8 or 16 (output channels per block), got {}", options.block);
  if (options.norm != "l1" && options.norm != "l2")
    fail("prune: --norm must be l1 or l2, got '{}'", options.norm);
  if (options.block > 1 && (options.structured || options.from_sensitivity))
    fail("prune: --block works with --target or --per-layer (structured pruning removes whole "
         "filters, the sensitivity analysis prunes single weights)");
  const double lr = options.lr ? *options.lr : run_learning_rate(options.run_dir);
  if (options.structured) {
    if (!options.per_layer.empty() || options.from_sensitivity)
      fail("prune --structured: use --target (the fraction of filters to remove)");
    if (options.epochs < 0) fail("prune: --epochs must be non-negative, got {}", options.epochs);
    check_out_dir(options);
    return structured_prune_run(options, callbacks, lr);
  }
  const int ways = (options.target ? 1 : 0) + (options.per_layer.empty() ? 0 : 1) +
                   (options.from_sensitivity ? 1 : 0);
  if (ways != 1) fail("prune: give exactly one of --target, --per-layer, --from-sensitivity");
  if (options.target) check_sparsity("--target", *options.target);
  if (options.schedule != "gradual" && options.schedule != "oneshot")
    fail("prune: --schedule must be gradual or oneshot, got '{}'", options.schedule);
  if (options.epochs < 1) fail("prune: --epochs must be at least 1, got {}", options.epochs);
  check_out_dir(options);
  if (options.from_sensitivity && !(options.max_drop >= 0.0))
    fail("prune: --max-drop must be non-negative, got {}", options.max_drop);

  PruneResult result;
  std::map<std::string, double> targets;  // weight name -> sparsity
  std::vector<std::string> prunable;
  {
    RunEvaluator run(options.run_dir, options.data, options.test_limit, options.threads);
    prunable = prunable_weights(run.model());
    if (prunable.empty())
      fail("{}: the model has nothing to prune (no conv or dense weights)", options.run_dir);
    std::map<std::string, std::string> weight_of_layer;
    for (const std::string& w : prunable) weight_of_layer[layer_of(w)] = w;
    if (options.target) {
      std::map<std::string, const Tensor*> weights;
      for (const std::string& w : prunable) weights[w] = &run.variables().get(w);
      targets = global_sparsities(weights, *options.target, options.block, options.norm);
      result.dense_accuracy = run.evaluate().accuracy;
    } else if (!options.per_layer.empty()) {
      for (const auto& [layer, s] : options.per_layer) {
        auto it = weight_of_layer.find(layer);
        if (it == weight_of_layer.end())
          fail("--per-layer: unknown layer '{}' (prunable: {})", layer, joined_layers(prunable));
        targets[it->second] = s;
      }
      result.dense_accuracy = run.evaluate().accuracy;
    } else {
      message("sensitivity analysis ...");
      const SensitivityTable table = analyse_sensitivity(run, options.levels);
      result.dense_accuracy = table.baseline;
      for (const auto& [layer, s] : sparsity_within(table, options.max_drop))
        targets[weight_of_layer.at(layer)] = s;
    }
  }
  std::string chosen;
  for (const auto& [w, s] : targets) chosen += fmt::format(" {}={:.3f}", layer_of(w), s);
  const std::string blocks =
      options.block > 1 ? fmt::format(", blocks of {} by {} norm", options.block, options.norm) : "";
  message(fmt::format("pruning {} ({} schedule, {} epochs{}):{}", options.run_dir,
                      options.schedule, options.epochs, blocks, chosen));

  std::map<std::string, Tensor> masks;
  TrainCallbacks cb = callbacks;
  const bool gradual = options.schedule == "gradual";
  cb.after_step = [&](const StepState& s) {
    // Gradual: sparsity rises along the cubic over the first two thirds of training, masks
    // recomputed every 2% of it; the last third retrains at the final masks.
    const int64_t ramp = gradual ? std::max<int64_t>(1, s.total_steps * 2 / 3) : 0;
    const int64_t every = std::max<int64_t>(1, s.total_steps / 50);
    const bool update = s.step == 1 || (gradual && s.step <= ramp + every && s.step % every == 0);
    for (const auto& [name, final_sparsity] : targets) {
      Tensor& w = s.variables.get(name);
      if (update)
        masks[name] = magnitude_mask(w, cubic_sparsity(s.step, ramp, final_sparsity),
                                     prune_block_for(w, options.block), options.norm);
      apply_mask(w, masks.at(name));
      s.optimizer.mask_state(name, masks.at(name));
    }
  };

  TrainOptions train{.data = options.data,
                     .out_dir = options.out_dir,
                     .overwrite = true,  // prune owns its --out directory
                     .init_from = options.run_dir,
                     .epochs = options.epochs,
                     .lr = lr,
                     .threads = options.threads,
                     .train_limit = options.train_limit,
                     .test_limit = options.test_limit};
  result.history = sf::train(train, cb);

  const std::map<std::string, Tensor> pruned = TrainingRun(options.out_dir).variables();
  for (const std::string& name : prunable) {
    const double target = targets.count(name) ? targets.at(name) : 0.0;
    const Tensor& w = pruned.at(name);
    const double sparsity = sparsity_of(w);
    const int64_t nonzero = w.numel() - std::llround(sparsity * static_cast<double>(w.numel()));
    result.layers.push_back(LayerSparsity{layer_of(name), w.numel(), nonzero, target, sparsity});
  }
  return result;
}

}  // namespace sf
