// Opening models for the commands: .sfm files directly, .onnx through the importer, and helpers
// shared by classify/run/eval/bench.
#pragma once

#include <map>
#include <string>

#include "modelfile/model_file.h"
#include "runtime/model_to_run.h"
#include "runtime/session.h"

namespace sf::cli {

// "name=1,3,224,224" -> {name, shape}; throws sf::Error on bad syntax.
std::pair<std::string, Shape> parse_input_shape(const std::string& text);

// Loads a .sfm (memory-mapped) or imports a .onnx model, as stored: for commands that read or
// rewrite a model.
ModelFile open_model(const std::string& path,
                     const std::map<std::string, Shape>& input_shapes = {});

// The same prepared to run (runtime/model_to_run.h): the C API's load_for_run, plus .onnx.
ModelToRun open_model_to_run(const std::string& path);

// The model's input shape with its batch dimension set to `batch`.
Shape with_batch(const Shape& shape, int64_t batch);

// A metadata value as a number, or `fallback`.
double metadata_number(const ModelFile& model, const std::string& key, double fallback);

// Output 0 of a classifier as probabilities [batch, classes] (softmax applied if needed).
Tensor as_probabilities(const Tensor& output);

}  // namespace sf::cli
