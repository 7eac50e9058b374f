#include "onnx/shape_specializer.h"

#include <onnx/onnx_pb.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <map>
#include <set>

#include "onnx/context.h"
#include "ops/ops.h"
#include "transforms/inference_passes.h"

namespace sf {

namespace {

// The inputs of each op that the importer reads as values at import time.
const std::map<std::string, std::set<int>>& shape_argument_slots() {
  static const std::map<std::string, std::set<int>> slots = {
      {"Reshape", {1}},   {"Squeeze", {1}},        {"Unsqueeze", {1}},       {"Pad", {1, 2, 3}},
      {"Resize", {1, 2, 3}}, {"Upsample", {1}},    {"Clip", {1, 2}},         {"Expand", {1}},
      {"Tile", {1}},      {"Slice", {1, 2, 3, 4}}, {"ConstantOfShape", {0}}, {"TopK", {1}},
      {"Split", {1}},     {"ReduceSum", {1}},      {"Range", {0, 1, 2}},     {"OneHot", {1}},
      {"Dropout", {1, 2}}, {"GRU", {4}},         {"LSTM", {4}},
      // Opset 18 moves the axes of these from an attribute to input 1.
      {"ReduceMean", {1}}, {"ReduceMax", {1}},     {"ReduceMin", {1}},
  };
  return slots;
}

onnx::ModelProto parse(const std::string& bytes, const std::string& name) {
  onnx::ModelProto proto;
  if (bytes.size() > INT_MAX || !proto.ParseFromString(bytes) || !proto.has_graph())
    fail("{}: not a valid ONNX model (protobuf parse failed)", name);
  return proto;
}

std::string key_of(const std::vector<DeclaredInput>& inputs, const std::vector<Tensor>& values) {
  std::string key;
  for (size_t i = 0; i < inputs.size(); ++i) {
    key += shape_str(values[i].shape());
    if (inputs[i].shape_argument) {
      key += '=';
      key.append(static_cast<const char*>(values[i].raw()),
                 static_cast<size_t>(values[i].numel()) * dtype_size(values[i].dtype()));
    }
    key += ';';
  }
  return key;
}

}  // namespace

bool DeclaredInput::symbolic() const {
  for (int64_t d : dims)
    if (d < 0) return true;
  return false;
}

std::string DeclaredInput::dims_str() const {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ',';
    s += dims[i] >= 0 ? std::to_string(dims[i]) : dim_names[i].empty() ? "?" : dim_names[i];
  }
  return s + "]";
}

std::vector<DeclaredInput> declared_onnx_inputs(const std::string& bytes, const std::string& name) {
  const onnx::ModelProto proto = parse(bytes, name);
  const onnx::GraphProto& graph = proto.graph();
  std::set<std::string> initializers;
  for (const onnx::TensorProto& t : graph.initializer()) initializers.insert(t.name());
  std::set<std::string> shape_arguments;
  for (const onnx::NodeProto& n : graph.node()) {
    auto it = shape_argument_slots().find(n.op_type());
    if (it == shape_argument_slots().end()) continue;
    for (int slot : it->second)
      if (slot < n.input_size()) shape_arguments.insert(n.input(slot));
  }
  std::vector<DeclaredInput> inputs;
  for (const onnx::ValueInfoProto& info : graph.input()) {
    if (initializers.count(info.name())) continue;
    DeclaredInput in;
    in.name = info.name();
    const onnx::TypeProto::Tensor& t = info.type().tensor_type();
    in.dtype = onnx_import::dtype_from_onnx(t.elem_type(), name + ": input '" + in.name + "'");
    if (!t.has_shape())
      fail("{}: input '{}' has no declared shape; give it with --input-shape", name, in.name);
    for (const onnx::TensorShapeProto::Dimension& d : t.shape().dim()) {
      const bool fixed = d.has_dim_value() && d.dim_value() >= 0;
      in.dims.push_back(fixed ? d.dim_value() : -1);
      in.dim_names.push_back(fixed ? "" : d.dim_param());
    }
    in.shape_argument = shape_arguments.count(in.name) > 0;
    inputs.push_back(std::move(in));
  }
  return inputs;
}

bool needs_symbolic_form(const std::vector<DeclaredInput>& inputs,
                         const std::map<std::string, Shape>& fixed) {
  for (const DeclaredInput& in : inputs) {
    if (in.shape_argument) return true;
    if (fixed.count(in.name)) continue;
    for (size_t d = 1; d < in.dims.size(); ++d)
      if (in.dims[d] < 0) return true;
  }
  return false;
}

ModelFile symbolic_model_file(const std::string& bytes, const std::string& source) {
  ModelFile model;
  Tensor t(DType::u8, {static_cast<int64_t>(bytes.size())});
  if (!bytes.empty()) std::memcpy(t.raw(), bytes.data(), bytes.size());
  ops::constant(model.graph, t, "onnx_model");
  model.outputs = {"onnx_model"};
  model.metadata = {{"onnx_symbolic", "1"},
                    {"format", "onnx"},
                    {"source", source},
                    {"input_layout", "NCHW"}};
  return model;
}

std::optional<std::string> symbolic_onnx_bytes(const ModelFile& model) {
  auto it = model.metadata.find("onnx_symbolic");
  if (it == model.metadata.end() || it->second != "1") return std::nullopt;
  const int id = model.graph.find("onnx_model");
  if (id < 0) fail("model file marks itself symbolic ONNX but has no node 'onnx_model'");
  const Attrs& attrs = model.graph.node(id).attrs;
  if (!attrs.has("value")) fail("model file: node 'onnx_model' holds no tensor");
  const Tensor& t = attrs.get_tensor("value");
  if (t.dtype() != DType::u8) fail("model file: node 'onnx_model' is not u8");
  return std::string(static_cast<const char*>(t.raw()), static_cast<size_t>(t.numel()));
}

struct ShapeSpecializer::Plan {
  std::string key;
  ModelToRun run;
  std::unique_ptr<Session> session;
  std::vector<size_t> feed_index;  // run.input_ports[k] is fed values[feed_index[k]]
};

ShapeSpecializer::ShapeSpecializer(std::string bytes, std::string name, ImportOptions base,
                                   SessionOptions session, size_t max_plans)
    : bytes_(std::move(bytes)),
      name_(std::move(name)),
      base_(std::move(base)),
      session_options_(std::move(session)),
      max_plans_(std::max<size_t>(1, max_plans)) {
  const onnx::ModelProto proto = parse(bytes_, name_);
  inputs_ = declared_onnx_inputs(bytes_, name_);
  for (const onnx::ValueInfoProto& out : proto.graph().output()) outputs_.push_back(out.name());
  for (auto& [input, shape] : base_.input_shapes) {
    const size_t i = input_index(input);
    if (i == inputs_.size()) fail("--input-shape {}: the model has no input '{}'", input, input);
    DeclaredInput& in = inputs_[i];
    if (shape.size() != in.dims.size())
      fail("--input-shape {}: rank {} given; input '{}' is {}", input, shape.size(), input,
           in.dims_str());
    for (size_t d = 0; d < shape.size(); ++d)
      if (in.dims[d] >= 0 && in.dims[d] != shape[d])
        fail("--input-shape {}: dimension {} is {}; input '{}' is {}", input, d, shape[d], input,
             in.dims_str());
    in.dims = shape;
    in.dim_names.assign(shape.size(), "");
  }
}

ShapeSpecializer::~ShapeSpecializer() = default;

bool ShapeSpecializer::dynamic() const {
  for (const DeclaredInput& in : inputs_)
    if (in.shape_argument || in.symbolic()) return true;
  return false;
}

size_t input_index(const std::vector<DeclaredInput>& inputs, const std::string& name) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].name == name) return i;
  return inputs.size();
}

size_t ShapeSpecializer::input_index(const std::string& name) const {
  return sf::input_index(inputs_, name);
}

void check_input(const DeclaredInput& in, size_t index, const Tensor& v,
                 std::map<std::string, std::pair<int64_t, std::string>>& bound) {
  auto mismatch = [&](const std::string& what) {
    throw InputMismatch(index, fmt::format("input '{}' {}", in.name, what));
  };
  if (!v.defined()) mismatch("was not given");
  if (v.dtype() != in.dtype)
    mismatch(fmt::format("dtype is {}; the model takes {} {}", dtype_name(v.dtype()),
                         dtype_name(in.dtype), in.dims_str()));
  if (static_cast<size_t>(v.rank()) != in.dims.size())
    mismatch(fmt::format("has shape {} (rank {}); the model takes rank {} {}",
                         shape_str(v.shape()), v.rank(), in.dims.size(), in.dims_str()));
  for (size_t d = 0; d < in.dims.size(); ++d) {
    const int64_t got = v.shape()[d];
    if (in.dims[d] >= 0 && got != in.dims[d] && d > 0)
      mismatch(fmt::format("shape {}: dimension {} is {}; the model allows only {} ({})",
                           shape_str(v.shape()), d, got, in.dims[d], in.dims_str()));
    const std::string& param = d < in.dim_names.size() ? in.dim_names[d] : std::string();
    if (param.empty()) continue;
    auto [it, fresh] = bound.emplace(param, std::make_pair(got, in.name));
    if (!fresh && it->second.first != got)
      mismatch(fmt::format("shape {}: dimension {} ('{}') is {}; input '{}' set '{}' to {}",
                           shape_str(v.shape()), d, param, got, it->second.second, param,
                           it->second.first));
  }
}

void check_inputs(const std::vector<DeclaredInput>& inputs, const std::vector<Tensor>& values,
                  const std::string& model) {
  if (values.size() != inputs.size())
    fail("{}: the model has {} inputs, {} given", model, inputs.size(), values.size());
  std::map<std::string, std::pair<int64_t, std::string>> bound;
  for (size_t i = 0; i < inputs.size(); ++i) check_input(inputs[i], i, values[i], bound);
}

void ShapeSpecializer::check_inputs(const std::vector<Tensor>& values) const {
  sf::check_inputs(inputs_, values, name_);
}

ShapeSpecializer::Plan& ShapeSpecializer::plan_for(const std::vector<Tensor>& values) {
  check_inputs(values);
  const std::string key = key_of(inputs_, values);
  for (auto it = plans_.begin(); it != plans_.end(); ++it) {
    if ((*it)->key != key) continue;
    plans_.splice(plans_.begin(), plans_, it);
    return *plans_.front();
  }
  const auto start = std::chrono::steady_clock::now();
  ImportOptions options = base_;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (inputs_[i].shape_argument)
      options.constant_inputs[inputs_[i].name] = values[i].clone();
    else
      options.input_shapes[inputs_[i].name] = values[i].shape();
  }
  ModelFile file = import_onnx_bytes(bytes_, name_, options);
  file.graph = optimize_constant_graph(file.graph, file.outputs);
  // An input that only its shape was read from (Shape, Size) or that the graph ignores (a
  // Dropout's ratio at inference) has no node left: it is checked but not fed.
  std::erase_if(file.inputs, [&](const std::string& input) { return file.graph.find(input) < 0; });
  auto plan = std::make_unique<Plan>();
  plan->key = key;
  plan->run = prepare_for_run(std::move(file));
  for (const std::string& input : plan->run.file.inputs) plan->feed_index.push_back(input_index(input));
  plan->session = std::make_unique<Session>(plan->run.file.graph, session_options_);
  if (plans_.size() >= max_plans_) plans_.pop_back();
  plans_.push_front(std::move(plan));
  ++plans_made_;
  Plan& made = *plans_.front();
  // The session plans on its first run; it counts as planning the new shape.
  Feeds feeds;
  for (size_t k = 0; k < made.feed_index.size(); ++k)
    feeds.emplace_back(made.run.input_ports[k], values[made.feed_index[k]]);
  made.session->run(feeds, made.run.output_ports);
  last_plan_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return made;
}

std::vector<Tensor> ShapeSpecializer::run(const std::vector<Tensor>& values) {
  Plan& plan = plan_for(values);
  Feeds feeds;
  for (size_t k = 0; k < plan.feed_index.size(); ++k)
    feeds.emplace_back(plan.run.input_ports[k], values[plan.feed_index[k]]);
  return plan.session->run(feeds, plan.run.output_ports);
}

const ModelToRun& ShapeSpecializer::specialization(const std::vector<Tensor>& values) {
  return plan_for(values).run;
}

Session& ShapeSpecializer::session(const std::vector<Tensor>& values) {
  return *plan_for(values).session;
}

SpecializerStats ShapeSpecializer::stats() const {
  SpecializerStats s;
  s.plans = plans_.size();
  s.max_plans = max_plans_;
  s.plans_made = plans_made_;
  s.last_plan_ms = last_plan_ms_;
  for (const auto& plan : plans_)
    s.cache_bytes += weight_bytes(plan->run.file) + plan->session->arena_bytes();
  return s;
}

}  // namespace sf
