// What a training run trains with: the model spec and the recipe (batch, learning rate,
// optimizer, data, ...) merged from the command line, a resumed or fine-tuned run, the spec's
// `train:` section and the built-in defaults, in that order of precedence, and checked.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "io/dataset.h"
#include "models/spec.h"
#include "train/trainer.h"
#include "train/training_run.h"

namespace sf {

struct RunConfig {
  int64_t epochs = 5;
  int64_t batch = 64;
  double lr = 1e-3;
  std::string optimizer = "adam";
  double weight_decay = 0.0;
  double momentum = 0.9;
  std::string lr_schedule = "constant";
  uint64_t seed = 1;
  std::string data;
  int64_t train_limit = 0;
  int64_t test_limit = 0;
  std::string lr_scaling = "linear";
  Augmentation augment;

  // The run's metadata "options", which --resume and --init-from read back.
  nlohmann::json to_json() const;
};

struct ResolvedRun {
  ModelSpec spec;  // with --qat and --binarize applied
  RunConfig config;
  std::optional<TrainingRun> resumed;  // --resume: the run to continue
  std::optional<TrainingRun> initial;  // --init-from: the run to start from
  std::string out_dir;                 // where checkpoints go
};

// Merges and checks the options of `train` (and `distill`, `prune`'s retraining). Throws
// sf::Error "train: ..." for a missing or contradictory flag, a value out of range, a resumed
// run's flag that names another model, data set or recipe, or an --out that already holds a
// run without --overwrite.
ResolvedRun resolve_run(const TrainOptions& options);

}  // namespace sf
