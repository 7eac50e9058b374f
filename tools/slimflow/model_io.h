// Opening models for the inference commands: .sfm files directly, .onnx through the importer,
// and helpers shared by classify/run/eval/bench.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "modelfile/model_file.h"
#include "runtime/session.h"

namespace sf::cli {

// "name=1,3,224,224" -> {name, shape}; throws sf::Error on bad syntax.
std::pair<std::string, Shape> parse_input_shape(const std::string& text);

// Loads a .sfm (memory-mapped) or imports a .onnx model.
ModelFile open_model(const std::string& path,
                     const std::map<std::string, Shape>& input_shapes = {});

// The model's graph as it will run: open_model's graph after the execution passes
// (transforms/execution_passes.h). Commands that only read or rewrite a model skip them.
ModelFile open_model_to_run(const std::string& path);

// The declared type of input `index`.
const TensorType& input_type(const ModelFile& model, size_t index);
Output input_output(const ModelFile& model, size_t index);
Output output_output(const ModelFile& model, size_t index);

// The model's input shape with its batch dimension set to `batch`.
Shape with_batch(const Shape& shape, int64_t batch);

// A metadata value as a number, or `fallback`.
double metadata_number(const ModelFile& model, const std::string& key, double fallback);

}  // namespace sf::cli

namespace sf::cli {

// Whether the model's 4-D image input is NCHW (ONNX models) rather than our NHWC.
bool input_is_nchw(const ModelFile& model, size_t index = 0);
// Converts an NHWC image batch to the layout of the model's input.
Tensor to_model_layout(const Tensor& nhwc, const ModelFile& model, size_t index = 0);
// Output 0 of a classifier as probabilities [batch, classes] (softmax applied if needed).
Tensor as_probabilities(const Tensor& output);

}  // namespace sf::cli
