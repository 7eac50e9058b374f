#include "train/run_config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <type_traits>

#include "core/error.h"
#include "train/data_parallel.h"
#include "train/optimizer.h"

namespace sf {

using json = nlohmann::json;

json RunConfig::to_json() const {
  return {{"epochs", epochs},       {"batch", batch},
          {"lr", lr},               {"optimizer", optimizer},
          {"weight_decay", weight_decay}, {"momentum", momentum},
          {"lr_schedule", lr_schedule}, {"seed", seed},
          {"data", data},           {"train_limit", train_limit},
          {"test_limit", test_limit}, {"lr_scaling", lr_scaling},
          {"augment", augmentation_str(augment)}};
}

namespace {

// The recipe a run recorded in its metadata's "options", which both --resume and --init-from
// take over; the epochs and data limits only a resumed run keeps.
void read_recipe(const json& o, RunConfig& config) {
  config.batch = o.at("batch");
  config.lr = o.at("lr");
  config.optimizer = o.at("optimizer");
  config.weight_decay = o.at("weight_decay");
  config.momentum = o.at("momentum");
  config.lr_schedule = o.at("lr_schedule");
  config.seed = o.at("seed");
  config.data = o.at("data");
  config.lr_scaling = o.value("lr_scaling", config.lr_scaling);
  config.augment = parse_augmentation(o.value("augment", ""));
}

template <typename T>
T spec_default(const ModelSpec& spec, const std::string& key, T fallback) {
  auto it = spec.train_defaults.find(key);
  if (it == spec.train_defaults.end()) return fallback;
  try {
    if constexpr (std::is_same_v<T, std::string>) {
      return it->second;
    } else if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(std::stod(it->second));
    } else {
      return static_cast<T>(std::stoll(it->second));
    }
  } catch (const std::exception&) {
    fail("{}: train.{}: '{}' is not a valid value", spec.origin, key, it->second);
  }
}

// --resume continues the run as it was started: a flag that names another model, data set or
// option would silently mix two runs, so it is refused rather than obeyed or ignored.
void refuse_contradictions(const TrainOptions& options, const RunConfig& run) {
  const std::string& dir = options.resume_dir;
  if (!options.model_path.empty())
    fail("train: --resume {} trains the run's own model; drop --model {} (or start a new run "
         "with --out)", dir, options.model_path);
  if (!options.out_dir.empty() && options.out_dir != dir)
    fail("train: --resume {} writes to its own directory; drop --out {}", dir, options.out_dir);
  auto refuse = [&](const char* flag, const auto& given, const auto& stored) {
    if (given != stored)
      fail("train: {} {} contradicts the run in {}, which trains with {} {}; drop it to resume",
           flag, given, dir, flag, stored);
  };
  if (!options.data.empty()) refuse("--data", options.data, run.data);
  if (options.batch) refuse("--batch", *options.batch, run.batch);
  if (options.lr) refuse("--lr", *options.lr, run.lr);
  if (options.optimizer) refuse("--optimizer", *options.optimizer, run.optimizer);
  if (options.weight_decay) refuse("--weight-decay", *options.weight_decay, run.weight_decay);
  if (options.momentum) refuse("--momentum", *options.momentum, run.momentum);
  if (options.lr_schedule) refuse("--lr-schedule", *options.lr_schedule, run.lr_schedule);
  if (options.seed) refuse("--seed", *options.seed, run.seed);
  if (options.train_limit) refuse("--train-limit", options.train_limit, run.train_limit);
  if (options.test_limit) refuse("--test-limit", options.test_limit, run.test_limit);
}

// The spec and the recipe as the run to resume, the run to start from, or the spec file has
// them, before the command line's flags.
void start_from(const TrainOptions& options, ResolvedRun& run) {
  ModelSpec& spec = run.spec;
  RunConfig& config = run.config;
  if (!options.resume_dir.empty() && !options.init_from.empty())
    fail("train: --resume continues a run, --init-from starts a new one from it: give one");
  if (!options.resume_dir.empty()) {
    std::string path = checkpoint_path(options.resume_dir);
    if (!std::filesystem::exists(path))
      fail("{}: no checkpoint to resume from (expected {})", options.resume_dir, path);
    run.resumed.emplace(options.resume_dir);
    spec = run.resumed->spec();
    if (run.resumed->metadata().contains("distill") && !options.distillation)
      fail("{}: a distillation run; resume it with slimflow distill --resume {}",
           options.resume_dir, options.resume_dir);
    run.resumed->read_metadata([&](const json& meta) {
      const json& o = meta.at("options");
      read_recipe(o, config);
      config.epochs = o.at("epochs");
      config.train_limit = o.at("train_limit");
      config.test_limit = o.at("test_limit");
    });
    refuse_contradictions(options, config);
  } else if (!options.init_from.empty()) {
    if (options.out_dir.empty()) fail("train: --out DIR is required");
    run.initial.emplace(options.init_from);
    spec = run.initial->spec();
    run.initial->read_metadata([&](const json& meta) { read_recipe(meta.at("options"), config); });
    config.train_limit = options.train_limit;
    config.test_limit = options.test_limit;
  } else {
    if (options.model_path.empty()) fail("train: --model is required (or --resume DIR)");
    if (options.out_dir.empty()) fail("train: --out DIR is required");
    spec = load_model_spec(options.model_path);
    config.epochs = spec_default<int64_t>(spec, "epochs", config.epochs);
    config.batch = spec_default<int64_t>(spec, "batch", config.batch);
    config.lr = spec_default<double>(spec, "lr", config.lr);
    config.optimizer = spec_default<std::string>(spec, "optimizer", config.optimizer);
    config.weight_decay = spec_default<double>(spec, "weight_decay", config.weight_decay);
    config.momentum = spec_default<double>(spec, "momentum", config.momentum);
    config.lr_schedule = spec_default<std::string>(spec, "lr_schedule", config.lr_schedule);
    config.seed = spec_default<uint64_t>(spec, "seed", config.seed);
    config.data = options.data.empty() ? "mnist" : options.data;
    config.train_limit = options.train_limit;
    config.test_limit = options.test_limit;
  }
}

}  // namespace

ResolvedRun resolve_run(const TrainOptions& options) {
  ResolvedRun run;
  start_from(options, run);
  ModelSpec& spec = run.spec;
  RunConfig& config = run.config;
  const bool resuming = run.resumed.has_value();
  if (options.qat_bits != 0) {
    if (resuming && spec.qat_bits != options.qat_bits)
      fail("train: --qat cannot change when resuming ({} trains with qat bits {})",
           options.resume_dir, spec.qat_bits);
    spec = with_qat(spec, options.qat_bits);
  }
  if (options.binarize_all && options.binarize.empty())
    fail("train: --binarize-all needs --binarize weights|xnor|ternary");
  if (!options.binarize.empty()) {
    if (resuming && (spec.binarize != options.binarize || spec.binarize_all != options.binarize_all))
      fail("train: --binarize cannot change when resuming ({} trains with binarize '{}'{})",
           options.resume_dir, spec.binarize, spec.binarize_all ? " on all layers" : "");
    spec = with_binarize(spec, options.binarize, options.binarize_all);
  }
  if (!options.data.empty()) config.data = options.data;
  if (options.batch) config.batch = *options.batch;
  if (options.lr) config.lr = *options.lr;
  if (options.optimizer) config.optimizer = *options.optimizer;
  if (options.weight_decay) config.weight_decay = *options.weight_decay;
  if (options.momentum) config.momentum = *options.momentum;
  if (options.lr_schedule) config.lr_schedule = *options.lr_schedule;
  if (options.seed) config.seed = *options.seed;
  if (options.lr_scaling) config.lr_scaling = *options.lr_scaling;
  check_lr_scaling(config.lr_scaling);
  if (!options.augment.empty()) config.augment = parse_augmentation(options.augment);
  if (!resuming && options.epochs) config.epochs = *options.epochs;
  if (resuming && options.train_limit) config.train_limit = options.train_limit;
  if (resuming && options.test_limit) config.test_limit = options.test_limit;
  check_optimizer_kind(config.optimizer);
  check_lr_schedule(config.lr_schedule);
  if (config.batch <= 0) fail("train: --batch must be positive, got {}", config.batch);
  if (config.epochs < 0) fail("train: --epochs must be non-negative, got {}", config.epochs);
  if (!(config.lr > 0.0) || !std::isfinite(config.lr))
    fail("train: --lr must be a positive number, got {}", config.lr);
  // Either would train, and a NaN would only show as a NaN loss steps later.
  if (!(config.weight_decay >= 0.0) || !std::isfinite(config.weight_decay))
    fail("train: --weight-decay must be a number >= 0, got {}", config.weight_decay);
  if (!(config.momentum >= 0.0 && config.momentum < 1.0))
    fail("train: --momentum must be in [0, 1), got {}", config.momentum);
  run.out_dir = resuming ? options.resume_dir : options.out_dir;
  if (!resuming && !options.overwrite && std::filesystem::exists(checkpoint_path(run.out_dir)))
    fail("train: {} already holds a run (its checkpoint {}); continue it with --resume {}, or "
         "replace it with --overwrite",
         run.out_dir, checkpoint_path(run.out_dir), run.out_dir);
  return run;
}

}  // namespace sf
