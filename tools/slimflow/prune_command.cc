// slimflow prune: magnitude pruning with retraining, and the per-layer sensitivity analysis.
#include <cstdio>
#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "progress.h"
#include "prune/prune_run.h"
#include "prune/sensitivity.h"

namespace sf::cli {

namespace {

struct SensitivityArgs {
  std::string run_dir;
  std::string data = "mnist";
  std::string levels = "0.5,0.7,0.8,0.9,0.95,0.98";
  double max_drop = -1;  // < 0: not asked
  int64_t limit = 0;
  int threads = 0;
  bool json = false;
};

int run_sensitivity(const SensitivityArgs& a) {
  const std::vector<double> levels = parse_levels(a.levels);
  RunEvaluator run(a.run_dir, a.data, a.limit, a.threads);
  const SensitivityTable table =
      analyse_sensitivity(run, levels, [&](const std::string& layer, double level) {
        if (!a.json) std::fprintf(stderr, "\r%-60s", fmt::format("{} at {:.2f} ...", layer, level).c_str());
      });
  if (!a.json) std::fprintf(stderr, "\r%-60s\r", "");
  std::map<std::string, double> within;
  if (a.max_drop >= 0) within = sparsity_within(table, a.max_drop);
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const SensitivityRow& r : table.rows) {
      nlohmann::json row = {{"layer", r.layer}, {"weights", r.weights}, {"accuracy", r.accuracy}};
      if (a.max_drop >= 0) row["max_sparsity"] = within.at(r.layer);
      rows.push_back(row);
    }
    nlohmann::json out = {{"baseline_accuracy", table.baseline},
                          {"eval_count", table.eval_count},
                          {"levels", table.levels},
                          {"layers", rows}};
    if (a.max_drop >= 0) out["max_drop"] = a.max_drop;
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("sensitivity of %s on %s (%lld test images), dense accuracy %.2f%%\n",
              a.run_dir.c_str(), a.data.c_str(), static_cast<long long>(table.eval_count),
              100.0 * table.baseline);
  std::printf("%-12s %10s", "layer", "weights");
  for (double l : table.levels) std::printf(" %7.0f%%", 100.0 * l);
  if (a.max_drop >= 0) std::printf("  max sparsity (drop <= %.2f)", a.max_drop);
  std::printf("\n");
  for (const SensitivityRow& r : table.rows) {
    std::printf("%-12s %10lld", r.layer.c_str(), static_cast<long long>(r.weights));
    for (double acc : r.accuracy) std::printf(" %7.2f%%", 100.0 * acc);
    if (a.max_drop >= 0) std::printf("  %.2f", within.at(r.layer));
    std::printf("\n");
  }
  return 0;
}

void print_result(const PruneOptions& o, const PruneResult& r, bool json) {
  const double accuracy = r.history.empty() ? 0.0 : r.history.back().test_accuracy;
  const double compression = static_cast<double>(r.total_weights()) /
                             static_cast<double>(std::max<int64_t>(r.nonzero_weights(), 1));
  if (json) {
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerSparsity& l : r.layers)
      layers.push_back({{"layer", l.layer},
                        {"weights", l.weights},
                        {"nonzero", l.nonzero},
                        {"target", l.target},
                        {"sparsity", l.sparsity}});
    std::printf("%s\n", nlohmann::json{{"run", o.out_dir},
                                       {"dense_accuracy", r.dense_accuracy},
                                       {"accuracy", accuracy},
                                       {"total_weights", r.total_weights()},
                                       {"nonzero_weights", r.nonzero_weights()},
                                       {"compression", compression},
                                       {"layers", layers}}
                            .dump()
                            .c_str());
    return;
  }
  std::printf("\n%-12s %10s %10s %9s\n", "layer", "weights", o.structured ? "kept" : "nonzero",
              o.structured ? "removed" : "sparsity");
  for (const LayerSparsity& l : r.layers)
    std::printf("%-12s %10lld %10lld %8.2f%%\n", l.layer.c_str(), static_cast<long long>(l.weights),
                static_cast<long long>(l.nonzero), 100.0 * l.sparsity);
  std::printf("%-12s %10lld %10lld %8.2f%%   %.1fx fewer weights\n", "total",
              static_cast<long long>(r.total_weights()), static_cast<long long>(r.nonzero_weights()),
              100.0 * (1.0 - 1.0 / compression), compression);
  std::printf("accuracy: dense %.2f%% -> pruned %.2f%% (%+.2f points); run written to %s\n",
              100.0 * r.dense_accuracy, 100.0 * accuracy, 100.0 * (accuracy - r.dense_accuracy),
              o.out_dir.c_str());
}

}  // namespace

Action add_prune_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "prune", "Prune a trained run by weight magnitude and retrain (or: prune sensitivity RUN)");
  auto o = std::make_shared<PruneOptions>();
  auto per_layer = std::make_shared<std::string>();
  auto target = std::make_shared<double>(-1);
  auto lr = std::make_shared<double>(0);
  auto json = std::make_shared<bool>(false);
  auto quiet = std::make_shared<bool>(false);
  cmd->add_option("run", o->run_dir, "Trained run directory (from slimflow train)");
  cmd->add_option("--data", o->data, "mnist, fashion-mnist, or a folder of IDX files")
      ->default_str("mnist");
  cmd->add_option("--target", *target, "Model-wide sparsity in [0, 1), one magnitude threshold");
  cmd->add_option("--per-layer", *per_layer, "Per-layer sparsities, e.g. fc1=0.97,conv2=0.8");
  cmd->add_flag("--from-sensitivity", o->from_sensitivity,
                "Per-layer sparsities from a sensitivity analysis within --max-drop");
  cmd->add_option("--max-drop", o->max_drop, "Accuracy points each layer may lose (0.1)");
  cmd->add_flag("--structured", o->structured,
                "Remove whole filters/neurons (--target of them per layer): a smaller dense model");
  cmd->add_option("--block", o->block,
                  "Prune dense layers in blocks of R adjacent output channels (1, 4, 8, 16), "
                  "which block-sparse kernels run faster; conv filters by single weights")
      ->default_val(1);
  cmd->add_option("--norm", o->norm, "l1 | l2: filter ranking for --structured, block ranking for --block")
      ->default_str("l1");
  cmd->add_option("--schedule", o->schedule, "gradual (cubic, Zhu & Gupta 2017) | oneshot")
      ->default_str("gradual");
  cmd->add_option("--epochs", o->epochs, "Retraining epochs")->default_val(4);
  cmd->add_option("--lr", *lr, "Retraining learning rate (default: the run's)");
  cmd->add_option("--out", o->out_dir, "Directory for the pruned run");
  cmd->add_option("--threads", o->threads, "Threads (0: all cores)")->default_val(0);
  cmd->add_option("--train-limit", o->train_limit, "Use only the first N training examples");
  cmd->add_option("--test-limit", o->test_limit, "Use only the first N test examples");
  cmd->add_flag("--json", *json, "Print the result as one JSON object on stdout");
  cmd->add_flag("--quiet", *quiet, "No progress line");

  auto s = std::make_shared<SensitivityArgs>();
  auto* sens = cmd->add_subcommand(
      "sensitivity", "Accuracy with each layer pruned alone at each level (magnitude)");
  sens->add_option("run", s->run_dir, "Trained run directory")->required();
  sens->add_option("--data", s->data, "Evaluation data (its test split)")->default_str("mnist");
  sens->add_option("--levels", s->levels, "Sparsity levels")->default_str(s->levels);
  sens->add_option("--max-drop", s->max_drop,
                   "Also print the sparsity each layer takes within this many accuracy points");
  sens->add_option("--limit", s->limit, "Evaluate on the first N test images only");
  sens->add_option("--threads", s->threads, "Threads (0: all cores)")->default_val(0);
  sens->add_flag("--json", s->json, "Print one JSON object");
  cmd->require_subcommand(0, 1);

  return [cmd, sens, o, s, per_layer, target, lr, json, quiet]() {
    if (sens->parsed()) return run_sensitivity(*s);
    if (o->run_dir.empty()) throw CLI::RequiredError("run");
    PruneOptions opts = *o;
    if (cmd->count("--target")) opts.target = *target;
    if (!per_layer->empty()) opts.per_layer = parse_layer_sparsities(*per_layer);
    if (cmd->count("--lr")) opts.lr = *lr;
    auto printer = std::make_shared<ProgressPrinter>();
    TrainCallbacks callbacks;
    if (!*quiet) callbacks.on_progress = [printer](const Progress& p) { printer->update(p); };
    callbacks.on_message = [printer](const std::string& m) {
      printer->end_line();
      std::fprintf(stderr, "%s\n", m.c_str());
    };
    callbacks.on_epoch = [printer](const EpochReport& r) {
      printer->end_line();
      std::fprintf(stderr, "epoch %lld/%lld: loss %.4f  test acc %.2f%%  %.1f s\n",
                   static_cast<long long>(r.epoch), static_cast<long long>(r.epochs), r.loss,
                   100.0 * r.test_accuracy, r.epoch_seconds);
    };
    const PruneResult result = prune_run(opts, callbacks);
    print_result(opts, result, *json);
    return 0;
  };
}

}  // namespace sf::cli
