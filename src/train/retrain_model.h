// The models of transfer learning (`slimflow retrain`): the new head trained on cached
// bottlenecks, and the deployable model that runs the base model up to the bottleneck node and
// the head after it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "modelfile/model_file.h"

namespace sf {

// A model spec (models/spec.h) for the head: bottlenecks [1, 1, dim] -> (a dense ReLU layer of
// `hidden` units when hidden > 0) -> dense logits over `classes`. Its layers are named
// retrain_*, apart from the base model's.
std::string head_spec_text(int64_t dim, int64_t classes, int64_t hidden);

// The float values of node `name` of a model graph: its output 0 when that is f32. In an int8
// model (`quantize --mode eightbit`), where layer X's u8 result is node "X/quantized", a
// Dequantize of that result with the params of the integer op that made it, added to `g`.
// Throws sf::Error naming the node when there is neither.
Output float_output(Graph& g, const std::string& name);

// `base`'s graph up to node `bottleneck` (its float_output) (output 0), flattened per example, feeding the
// frozen `head` (freeze_run of a run of head_spec_text) in place of its input. Inputs and
// metadata are the base's; the output is the head's probabilities. Throws sf::Error naming the
// node when it is missing or its output is not f32 with `head`'s row length.
ModelFile attach_head(const ModelFile& base, const std::string& bottleneck, const ModelFile& head);

}  // namespace sf

namespace sf {

struct FineTuneOptions {
  double lr = 1e-4;  // Adam's
  int threads = 0;
};

// Throws sf::Error "--fine-tune-from '<from>': ..." unless node `from` exists in `g` and every
// node after it on the way to `end` can train (has a gradient, or is a fused conv or matmul,
// which fine_tune unfuses): an int8 layer cannot.
void check_fine_tunable(const Graph& g, const std::string& from, Output end);

// The feeds of one fine-tuning step: images as the model's input takes them, i32 labels. Returns
// false when the pass is over. Every batch must have the same size.
using ImageBatches = std::function<bool(Tensor& images, Tensor& labels)>;

// Trains, in place, the weights of `model` (attach_head's result) that only nodes after node
// `from` read (the base's layers after it and the head) on the batches `next` gives, with
// softmax cross-entropy on the logits its final Softmax reads; the other weights stay frozen.
// Returns the mean loss of the pass and how many weights trained. Throws sf::Error naming the
// node when it is missing, nothing after it trains, or an op after it has no gradient.
struct FineTuneResult {
  double loss = 0.0;
  int64_t steps = 0;
  int64_t weights = 0;
};
FineTuneResult fine_tune(ModelFile& model, const std::string& from, const FineTuneOptions& options,
                         const ImageBatches& next);

}  // namespace sf
