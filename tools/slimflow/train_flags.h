// The flags and console output that `train` and `distill` share, so that every training option
// applies to both.
#pragma once

#include <CLI/CLI.hpp>

#include "train/trainer.h"

namespace sf::cli {

// --model, --data, --out, --resume, --epochs ... --json, --quiet, --profile.
void add_training_flags(CLI::App* cmd, TrainOptions& options, bool& json_output, bool& quiet);

// Progress line and epoch lines on stderr, and with `json_output` one JSON object per epoch on
// stdout.
TrainCallbacks printing_callbacks(bool json_output, bool quiet);

}  // namespace sf::cli
