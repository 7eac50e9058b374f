// Weights-only quantization of a model (`slimflow quantize --mode weights`): the big weights of
// convolutions and matrix products are stored encoded (codec/weight_codec.h) and decoded to
// f32 at load, so the model computes in float exactly as before, from a smaller file.
//
// The weights chosen are f32 Const nodes that a layer reads as its weights (the weight inputs
// its op declares: OpDef::weights) with at least `min_elements` elements; biases and everything
// else stay dense. Per-channel scales follow each weight's output-channel axis, also declared
// by the op: the last axis of HWIO conv filters and of MatMul's [K, N] (axis 0 when
// transpose_b), axis 2 of ConvTranspose2D's [kh, kw, out/groups, in].
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "codec/weight_codec.h"
#include "modelfile/model_file.h"
#include "ops/op_names.h"

namespace sf::quant {

struct WeightQuantizeOptions {
  Encoding encoding = Encoding::linear;
  int bits = 8;              // linear and kmeans
  bool per_channel = false;  // linear only
  // Node names whose weights stay f32: the Const itself or a layer that reads it.
  std::set<std::string> exclude;
  int64_t min_elements = 256;
};

// One candidate weight tensor and what became of it.
struct WeightRow {
  std::string node;      // the Const
  std::string layer;     // the first layer reading it as its weight
  std::string layer_op;  // e.g. op_names::kFusedConv2D
  Shape shape;
  bool encoded = false;
  std::string encoding = "dense";  // "linear", "kmeans", "f16", "bf16" or "dense"
  std::string description;         // WeightEncoding::describe(), or "dense"
  int bits = 32;
  bool per_channel = false;
  size_t codebook_size = 0;
  std::string kept_reason;  // why it stayed dense ("excluded", "fewer than 256 elements")
  uint64_t fp32_bytes = 0;
  uint64_t stored_bytes = 0;  // encoded data + parameters, or fp32_bytes
  double max_abs_error = 0.0;
  double rms_error = 0.0;
};

struct WeightQuantizeReport {
  std::vector<WeightRow> rows;   // in graph order
  // Layers reading an excluded weight or excluded by name (what bf16 keeps computing in fp32).
  std::set<std::string> excluded_layers;
  uint64_t fp32_bytes = 0;       // all of the model's tensors, dense
  uint64_t quantized_bytes = 0;  // the same with the encoded weights at their stored size

  double compression_ratio() const {
    return quantized_bytes == 0
               ? 1.0
               : static_cast<double>(fp32_bytes) / static_cast<double>(quantized_bytes);
  }
};

// Checks the options (one-line sf::Error: bits range, per-channel with kmeans, f16 or bf16,
// unknown exclude names) and fills model.encoded_weights, which save_model then writes.
WeightQuantizeReport quantize_model_weights(ModelFile& model, const WeightQuantizeOptions& options);

}  // namespace sf::quant
