#include "model_io.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

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

std::map<std::string, Shape> parse_input_shapes(const std::vector<std::string>& texts) {
  std::map<std::string, Shape> shapes;
  for (const std::string& text : texts) {
    auto [name, shape] = parse_input_shape(text);
    if (!shapes.emplace(name, shape).second)
      fail("--input-shape '{}': input '{}' is given twice", text, name);
  }
  return shapes;
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

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

ModelFile import_model(const std::string& bytes, const std::string& path,
                       const std::map<std::string, Shape>& input_shapes) {
  ImportOptions options;
  options.input_shapes = input_shapes;
  ModelFile model = import_onnx_bytes(bytes, path, options);
  model.graph = optimize_constant_graph(model.graph, model.outputs);
  model.file_bytes = std::filesystem::file_size(path);
  return model;
}

}  // namespace

std::optional<std::string> onnx_source(const std::string& path) {
  reject_run_directory(path);
  if (is_onnx(path)) return read_file_bytes(path);
  return symbolic_onnx_bytes(load_model(path));
}

ModelFile open_model(const std::string& path, const std::map<std::string, Shape>& input_shapes) {
  reject_run_directory(path);
  if (is_onnx(path)) return import_model(read_file_bytes(path), path, input_shapes);
  ModelFile model = load_model(path);
  if (std::optional<std::string> bytes = symbolic_onnx_bytes(model))
    return import_model(*bytes, path, input_shapes);
  return model;
}

ModelToRun open_model_to_run(const std::string& path,
                             const std::map<std::string, Shape>& input_shapes) {
  return prepare_for_run(open_model(path, input_shapes));
}

std::vector<DeclaredInput> declared_inputs(const std::string& path) {
  if (std::optional<std::string> bytes = onnx_source(path)) return declared_onnx_inputs(*bytes, path);
  const ModelFile model = load_model(path);
  std::vector<DeclaredInput> inputs;
  for (const std::string& name : model.inputs) {
    const TensorType& t = model.graph.node(model.graph.id_of(name)).outputs[0];
    inputs.push_back({.name = name, .dtype = t.dtype, .dims = t.shape,
                      .dim_names = std::vector<std::string>(t.shape.size())});
  }
  return inputs;
}

std::map<std::string, Shape> image_input_shapes(const std::string& path,
                                                std::map<std::string, Shape> given, int64_t height,
                                                int64_t width, int64_t channels) {
  if (!onnx_source(path)) return given;
  const std::vector<DeclaredInput> inputs = declared_inputs(path);
  if (inputs.size() != 1 || given.count(inputs[0].name) || !inputs[0].symbolic()) return given;
  const DeclaredInput& in = inputs[0];
  if (in.dims.size() != 4) return given;
  const bool spatial_symbolic = in.dims[2] < 0 || in.dims[3] < 0;
  if (!spatial_symbolic) return given;
  given[in.name] = {1, in.dims[1] >= 0 ? in.dims[1] : channels, in.dims[2] >= 0 ? in.dims[2] : height,
                    in.dims[3] >= 0 ? in.dims[3] : width};
  return given;
}

ModelRunner::ModelRunner(const std::string& path, const std::map<std::string, Shape>& input_shapes,
                         SessionOptions options, const std::string& precision,
                         const PlacementFlags* placement, bool json)
    : path_(path) {
  if (placement) options.device_threads = placement->device_threads;
  if (std::optional<std::string> bytes = onnx_source(path)) {
    precision_ = choose_model_precision(ModelFile{}, path, precision, options);
    if (placement && placement->device != "/cpu:0")
      fail("--device {}: {} is an ONNX model, which runs on /cpu:0 only (import it to .sfm to "
           "place it)",
           placement->device, path);
    ImportOptions base;
    base.input_shapes = input_shapes;
    specializer_ = std::make_unique<ShapeSpecializer>(std::move(*bytes), path, base, options);
    inputs_ = specializer_->inputs();
    outputs_ = specializer_->outputs();
    return;
  }
  fixed_ = load_for_run(path);
  precision_ = choose_model_precision(fixed_->file, path, precision, options);
  if (placement) {
    const PlacementReport report =
        place(fixed_->file.graph, device_set(*placement), placement_options(*placement));
    write_placement_log(*placement, fixed_->file.graph, report, json);
  }
  session_ = std::make_unique<Session>(fixed_->file.graph, options);
  inputs_ = declared_inputs(path);
  for (DeclaredInput& in : inputs_)
    if (!in.dims.empty()) in.dims[0] = -1;  // the session re-plans for any batch size
  outputs_ = fixed_->file.outputs;
}

size_t ModelRunner::input_index(const std::string& name) const {
  return sf::input_index(inputs_, name);
}

void ModelRunner::check_inputs(const std::vector<Tensor>& values) const {
  if (specializer_) return specializer_->check_inputs(values);
  sf::check_inputs(inputs_, values, path_);
}

std::vector<Tensor> ModelRunner::run(const std::vector<Tensor>& values) {
  if (specializer_) return specializer_->run(values);
  check_inputs(values);
  Feeds feeds;
  for (size_t i = 0; i < values.size(); ++i) feeds.emplace_back(fixed_->input_ports[i], values[i]);
  return session_->run(feeds, fixed_->output_ports);
}

const ModelToRun& ModelRunner::model_for(const std::vector<Tensor>& values) {
  if (specializer_) return specializer_->specialization(values);
  return *fixed_;
}

Session& ModelRunner::session_for(const std::vector<Tensor>& values) {
  if (specializer_) return specializer_->session(values);
  return *session_;
}

SpecializerStats ModelRunner::plan_stats() const {
  if (specializer_) return specializer_->stats();
  SpecializerStats s;
  s.plans = session_->plan_count();
  s.max_plans = Session::kMaxPlans;
  s.cache_bytes = weight_bytes(fixed_->file) + session_->arena_bytes();
  return s;
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

void check_printable_label(const std::string& label, const std::string& where) {
  for (char ch : label)
    if ((static_cast<unsigned char>(ch) < 0x20 && ch != '\t') || ch == 0x7f)
      fail("{}: control byte 0x{:02x}: not a text label", where, static_cast<unsigned char>(ch));
}

std::vector<std::string> metadata_labels(const ModelFile& model, const std::string& path) {
  auto it = model.metadata.find("labels");
  if (it == model.metadata.end()) return {};
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) fail("{}: metadata 'labels' is not a JSON array of label names", path);
  std::vector<std::string> labels;
  for (const nlohmann::json& label : j) {
    if (!label.is_string()) fail("{}: metadata 'labels' holds a non-string value", path);
    check_printable_label(label.get<std::string>(),
                          fmt::format("{}: metadata label {}", path, labels.size()));
    labels.push_back(label.get<std::string>());
  }
  return labels;
}

}  // namespace sf::cli
