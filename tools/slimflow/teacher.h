// The teacher of `slimflow distill`: a training run, a frozen .sfm model or an ONNX model, run
// with inference kernels on batches of data-set images.
#pragma once

#include <memory>
#include <string>

#include "train/distillation.h"

namespace sf::cli {

struct TeacherSource {
  std::string path;         // run directory, .sfm or .onnx
  std::string logits_node;  // empty: the model's logits (a run's, or the softmax input)
  double temperature = 1.0;
  double alpha = 0.5;
  int threads = 0;
};

// Opens the teacher. Throws a one-line sf::Error naming the path or node when the teacher
// cannot be opened, has more than one input, or its logits node is not [batch, classes].
std::shared_ptr<Distillation> open_teacher(const TeacherSource& source);

}  // namespace sf::cli
