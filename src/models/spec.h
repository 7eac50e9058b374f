// Model specs: plain-text YAML files under models/ that describe a network layer by layer, so a
// user adds a layer or a model without recompiling. See models/deep-mnist.yaml.
//
//   name: deep-mnist
//   input: [28, 28, 1]          # H, W, C of one example
//   classes: 10
//   layers:                      # each layer reads the previous one unless `inputs:` names others
//     - {name: conv1, type: conv2d, filters: 32, kernel: 5, padding: same, activation: relu}
//     ...
//   train: {optimizer: adam, lr: 0.001, batch: 64, epochs: 5}   # defaults for `slimflow train`
//
// Layer types and their keys are listed by layer_types(); unknown types and keys are errors.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "models/initializers.h"

namespace sf {

struct ModelSpec {
  std::string origin;  // file path, for messages
  std::string text;    // the YAML source, stored in checkpoints
  std::string name;
  Shape input;  // [H, W, C]
  int64_t classes = 0;
  std::map<std::string, std::string> train_defaults;  // key -> scalar text
  // Quantization-aware training (`qat: {bits: B}`): weights fake-quantized to B bits per
  // channel, the input and conv/dense/add/concat results to u8 with learned ranges. 0: off.
  int64_t qat_bits = 0;
  // Binarized training (`binarize: {mode: M, all: false}`, `train --binarize M`): the conv2d and
  // dense layers train with binary (weights, xnor) or ternary weights, xnor layers with binary
  // inputs too; the first conv and the last dense stay float unless `all`. Empty: off. A layer's
  // own `binary:` key overrides this either way.
  std::string binarize;
  bool binarize_all = false;
  // The MPI job its layers are placed on (a layer's `device: /job:NAME/task:K/cpu:N`): under
  // mpirun it trains as one model whose parts run on the job's processes. Empty: none.
  std::string job;
};

ModelSpec load_model_spec(const std::string& path);
ModelSpec parse_model_spec(const std::string& text, const std::string& origin);
// The spec with `qat: {bits: B}` added (`train --qat B`); an error when it already has other bits.
ModelSpec with_qat(const ModelSpec& spec, int64_t bits);
// The spec with `binarize: {mode: M, all: A}` added (`train --binarize M [--binarize-all]`); an
// error when it already binarizes otherwise.
ModelSpec with_binarize(const ModelSpec& spec, const std::string& mode, bool all);
// The binarization modes of specs and `train --binarize`: weights, xnor, ternary.
bool is_binarize_mode(const std::string& mode);

// A trainable variable of a built model.
struct Parameter {
  std::string name;  // the Variable node's name, e.g. "conv1/weights"
  Output output;
  Initializer init;
  int64_t fan_in = 1;
  int64_t fan_out = 1;
  bool decay = true;  // weight decay applies (weights yes, biases and norm scales no)
  // Binarized weights: clipped to [-1, 1] after each step, where the straight-through gradient
  // stops, so that a weight can always change sign again (BinaryConnect).
  bool clip_to_unit = false;
};

// A moving average the trainer updates after each step (batch-norm statistics).
struct MovingAverage {
  std::string variable;  // Variable node name
  Output batch_value;    // the value observed this step
  double momentum = 0.99;
};

struct Model {
  Graph graph;
  Output input;   // Placeholder [batch, H, W, C] f32
  Output logits;  // [batch, classes]
  std::vector<Parameter> parameters;
  std::vector<MovingAverage> moving_averages;
  // Non-trainable variables (moving statistics) and their initial values' initializers.
  std::vector<std::pair<std::string, Initializer>> state;
};

Model build_model(const ModelSpec& spec, int64_t batch);

// "conv2d: filters kernel strides padding dilation groups activation use_bias init" ...
std::vector<std::string> layer_types();

}  // namespace sf
