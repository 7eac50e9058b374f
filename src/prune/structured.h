// Structured pruning: remove whole conv filters / dense neurons (smallest L1 or L2 norm)
// together with the input channels or rows of the next layer that read them, giving a smaller
// dense model (a new spec with fewer filters and sliced variables), not a masked one.
// Works on sequential models through conv -> conv, conv -> flatten -> dense and dense -> dense,
// with pooling, dropout, activations and batch-norm in between (their channels follow).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/spec.h"

namespace sf {

struct StructuredLayer {
  std::string layer;
  int64_t before = 0;  // filters / units
  std::vector<int64_t> kept;  // output channels kept, ascending
};

struct StructuredPruning {
  std::string spec_text;  // the smaller model
  std::vector<StructuredLayer> layers;
  std::map<std::string, Tensor> variables;  // every variable of the smaller model, by name
};

// Keeps round((1 - fraction) * n) (at least 1) channels of every conv/dense layer but the last
// (the classifier). `norm` is "l1" or "l2". `variables` are the trained model's.
StructuredPruning prune_structured(const ModelSpec& spec,
                                   const std::map<std::string, Tensor>& variables,
                                   double fraction, const std::string& norm);

}  // namespace sf
