#include "model_io.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "onnx/importer.h"
#include "transforms/inference_passes.h"

namespace sf::cli {

std::pair<std::string, Shape> parse_input_shape(const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    fail("--input-shape '{}': expected NAME=D1,D2,... (e.g. input=1,3,224,224)", text);
  Shape shape;
  std::string dims = text.substr(eq + 1);
  size_t start = 0;
  while (start <= dims.size()) {
    size_t comma = dims.find(',', start);
    std::string part = dims.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    try {
      size_t used = 0;
      int64_t d = std::stoll(part, &used);
      if (used != part.size() || d <= 0) throw std::invalid_argument(part);
      shape.push_back(d);
    } catch (const std::exception&) {
      fail("--input-shape '{}': '{}' is not a positive dimension", text, part);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return {text.substr(0, eq), shape};
}

namespace {

void reject_run_directory(const std::string& path) {
  if (!std::filesystem::is_directory(path)) return;
  // Only a training run (its checkpoint) can be frozen; any other folder is just not a model.
  if (std::filesystem::exists(std::filesystem::path(path) / "checkpoint.sfck"))
    fail("{}: is a training run, not a model file; freeze it first (slimflow freeze {} --out "
         "model.sfm)",
         path, path);
  fail("{}: is a directory, not a model file (.sfm or .onnx)", path);
}

bool is_onnx(const std::string& path) { return std::filesystem::path(path).extension() == ".onnx"; }

ModelFile import_model(const std::string& path, const std::map<std::string, Shape>& input_shapes) {
  ImportOptions options;
  options.input_shapes = input_shapes;
  ModelFile model = import_onnx(path, options);
  model.graph = optimize_constant_graph(model.graph, model.outputs);
  model.file_bytes = std::filesystem::file_size(path);
  return model;
}

}  // namespace

ModelFile open_model(const std::string& path, const std::map<std::string, Shape>& input_shapes) {
  reject_run_directory(path);
  return is_onnx(path) ? import_model(path, input_shapes) : load_model(path);
}

ModelToRun open_model_to_run(const std::string& path) {
  reject_run_directory(path);
  return is_onnx(path) ? prepare_for_run(import_model(path, {})) : load_for_run(path);
}

Shape with_batch(const Shape& shape, int64_t batch) {
  Shape s = shape;
  if (!s.empty()) s[0] = batch;
  return s;
}

double metadata_number(const ModelFile& model, const std::string& key, double fallback) {
  auto it = model.metadata.find(key);
  if (it == model.metadata.end()) return fallback;
  size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != it->second.size() || !std::isfinite(value))
    fail("the model's metadata {} is '{}', not a finite number", key, it->second);
  return value;
}

Tensor as_probabilities(const Tensor& output) {
  const int64_t batch = output.rank() > 0 ? output.dim(0) : 1;
  const int64_t classes = output.numel() / std::max<int64_t>(batch, 1);
  Tensor probs = output.clone().reshaped({batch, classes});
  float* p = probs.data<float>();
  for (int64_t b = 0; b < batch; ++b) {
    float* row = p + b * classes;
    double sum = 0.0;
    bool non_negative = true;
    for (int64_t k = 0; k < classes; ++k) {
      sum += row[k];
      non_negative = non_negative && row[k] >= 0.0f;
    }
    if (non_negative && std::abs(sum - 1.0) < 1e-3) continue;
    float max = row[0];
    for (int64_t k = 1; k < classes; ++k) max = std::max(max, row[k]);
    double total = 0.0;
    for (int64_t k = 0; k < classes; ++k) total += row[k] = std::exp(row[k] - max);
    for (int64_t k = 0; k < classes; ++k) row[k] = static_cast<float>(row[k] / total);
  }
  return probs;
}

}  // namespace sf::cli
