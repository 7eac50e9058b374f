// Turns a training run into a deployable model: the spec's graph at batch 1 with a Softmax
// "probabilities" output, its variables from the run's last checkpoint, optimized for
// inference (constants, no dropout, batch-norm folded, bias and activation fused).
#pragma once

#include <string>

#include "modelfile/model_file.h"

namespace sf {

ModelFile freeze_run(const std::string& run_dir);

}  // namespace sf
