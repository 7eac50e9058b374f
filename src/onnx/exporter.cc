// export_onnx: checks every node can be written, declares the inputs, writes node by node
// (export_float.cc, export_quantized.cc), names the outputs as the model does, and serializes.
#include "onnx/exporter.h"

#include <climits>

#include "io/atomic_file.h"
#include "onnx/context.h"
#include "onnx/export_context.h"
#include "ops/op_names.h"
#include "transforms/graph_uses.h"

namespace sf {

namespace onnx_export {

int onnx_elem_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return onnx::TensorProto::FLOAT;
    case DType::i32:
      return onnx::TensorProto::INT32;
    case DType::i64:
      return onnx::TensorProto::INT64;
    case DType::u8:
      return onnx::TensorProto::UINT8;
    case DType::i8:
      return onnx::TensorProto::INT8;
  }
  fail("dtype {} has no ONNX element type", dtype_name(dtype));
}

Form normalized(Form form) {
  for (size_t i = 0; i < form.size(); ++i)
    if (form[i] != static_cast<int64_t>(i)) return form;
  return kAsIs;
}

int64_t axis_in(const Form& form, int64_t axis, size_t rank) {
  if (axis < 0) axis += static_cast<int64_t>(rank);
  if (form.empty()) return axis;
  for (size_t i = 0; i < form.size(); ++i)
    if (form[i] == axis) return static_cast<int64_t>(i);
  fail("axis {} is not in form of rank {}", axis, form.size());
}

void set_attr(onnx::NodeProto& n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void set_attr(onnx::NodeProto& n, const std::string& name, float v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void set_attr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void set_attr(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

bool is_run_time_range_op(const std::string& op) {
  return op == "ChooseQParams" || op == "QuantizedConv2D" || op == "QuantizedMatMul" ||
         op == "RequantizationRange" || op == "Requantize";
}

Context::Context(const ModelFile& model, std::string name, const ExportOptions& options,
                 onnx::GraphProto& graph)
    : g(model.graph), name(std::move(name)), options(options), graph_(graph) {
  // Inputs and outputs keep their names: reserve them before anything else is named.
  for (const std::string& n : model.inputs) names_.insert(n);
  for (const std::string& n : model.outputs) {
    names_.insert(n);
    output_names_.insert(n);
  }
}

const Tensor* Context::const_value(Output o) const { return sf::const_value(g, o); }

const Tensor& Context::const_in(int i, const char* what) const {
  const Tensor* t = const_value(node->inputs.at(static_cast<size_t>(i)));
  if (!t) fail("{} must be a constant to be exported", what);
  return *t;
}

bool Context::has_form(Output o, const Form& form) const {
  auto it = forms_.find(o);
  return it != forms_.end() && it->second.count(normalized(form));
}

const std::map<Form, std::string>& Context::forms(Output o) {
  if (const_value(o) && forms_[o].empty()) get(o, kAsIs);
  return forms_[o];
}

Form Context::held_form(Output o) const {
  return has_form(o, kChannelsFirst) && !has_form(o, kAsIs) ? kChannelsFirst : kAsIs;
}

void Context::define(Output o, const Form& form, const std::string& onnx_name) {
  forms_[o].emplace(normalized(form), onnx_name);
}

std::string Context::define_out(const Form& form, int index) {
  const Output o{node->id, index};
  // A model output's value takes the output's (reserved) name, so it needs no Identity.
  std::string n = node->name;
  if (index > 0) n += fmt::format("_{}", index);
  if (!form.empty()) n += form == kChannelsFirst ? "/nchw" : "/permuted";
  if (!(index == 0 && form.empty() && output_names_.count(node->name))) n = fresh(n);
  define(o, form, n);
  return n;
}

std::string Context::get(Output o, const Form& wanted_in) {
  const Form wanted = normalized(wanted_in);
  std::map<Form, std::string>& held = forms_[o];
  if (auto it = held.find(wanted); it != held.end()) return it->second;
  const size_t rank = shape(o).size();
  SF_CHECK(wanted.empty() || wanted.size() == rank, "form of rank {} for a rank-{} value",
           wanted.size(), rank);
  if (const Tensor* value = const_value(o)) {
    const Node& n = g.node(o.node);
    const std::string made = initializer(
        wanted.empty() ? *value : onnx_import::permute(*value, wanted),
        wanted.empty() ? n.name : n.name + "/permuted");
    held.emplace(wanted, made);
    return made;
  }
  SF_CHECK(!held.empty(), "value '{}':{} is read before it is written", g.node(o.node).name,
           o.index);
  // From held form A to wanted form B: onnx_B[i] = ours[B[i]] = onnx_A[inv(A)[B[i]]].
  const auto& [from_form, from_name] = *held.begin();
  Form inverse(rank);
  for (size_t i = 0; i < rank; ++i)
    inverse[static_cast<size_t>(from_form.empty() ? static_cast<int64_t>(i) : from_form[i])] =
        static_cast<int64_t>(i);
  Form perm(rank);
  for (size_t i = 0; i < rank; ++i)
    perm[i] = inverse[static_cast<size_t>(wanted.empty() ? static_cast<int64_t>(i) : wanted[i])];
  const std::string base = g.node(o.node).name + (wanted == kChannelsFirst ? "/nchw" : "/transposed");
  const std::string made = fresh(base);
  onnx::NodeProto& t = add_node("Transpose", {from_name}, {made});
  set_attr(t, "perm", perm);
  held.emplace(wanted, made);
  return made;
}

std::string Context::fresh(const std::string& base) {
  std::string n = base;
  for (int k = 1; names_.count(n); ++k) n = base + "_" + std::to_string(k);
  names_.insert(n);
  return n;
}

onnx::NodeProto& Context::add_node(const std::string& op, const std::vector<std::string>& inputs,
                                   const std::vector<std::string>& outputs) {
  onnx::NodeProto* n = graph_.add_node();
  n->set_op_type(op);
  n->set_name(outputs.empty() ? fresh(op) : outputs[0]);
  for (const std::string& in : inputs) n->add_input(in);
  for (const std::string& out : outputs) n->add_output(out);
  return *n;
}

std::string Context::add(const std::string& op, const std::vector<std::string>& inputs,
                         const std::string& suffix, onnx::NodeProto** made) {
  const std::string out = fresh(node->name + "/" + suffix);
  onnx::NodeProto& n = add_node(op, inputs, {out});
  if (made) *made = &n;
  return out;
}

std::string Context::initializer(const Tensor& t, const std::string& base) {
  const std::string n = fresh(base);
  onnx::TensorProto* p = graph_.add_initializer();
  p->set_name(n);
  p->set_data_type(onnx_elem_type(t.dtype()));
  for (int64_t d : t.shape()) p->add_dims(d);
  // Tensors are little-endian in memory and in raw_data.
  p->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.bytes()));
  return n;
}

std::string Context::scalar_f32(float v, const std::string& base) {
  return initializer(Tensor::scalar_f32(v), base);
}

std::string Context::ints_i64(const std::vector<int64_t>& v, const std::string& base) {
  return initializer(Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v), base);
}

QuantNames Context::quant_params(Output params) {
  if (auto it = quant_names_.find(params); it != quant_names_.end()) return it->second;
  const Tensor* p = const_value(params);
  if (!p || p->dtype() != DType::f32 || p->numel() != 2)
    fail("params '{}' ({}) must be a constant [scale, zero_point] to be exported",
         g.node(params.node).name, g.node(params.node).op);
  const float scale = p->data<float>()[0];
  const float zero_point = p->data<float>()[1];
  if (!(scale > 0.0f) || zero_point < 0.0f || zero_point > 255.0f ||
      zero_point != static_cast<float>(static_cast<int>(zero_point)))
    fail("params '{}' [{}, {}] are not a valid u8 quantization", g.node(params.node).name, scale,
         zero_point);
  Tensor zp(DType::u8, {});
  zp.data<uint8_t>()[0] = static_cast<uint8_t>(zero_point);
  const std::string base = g.node(params.node).name;
  QuantNames names{scalar_f32(scale, base + "/scale"), initializer(zp, base + "/zero_point")};
  quant_names_[params] = names;
  return names;
}

namespace {

const WriterMap& writers() {
  static const WriterMap map = [] {
    WriterMap m;
    add_float_writers(m);
    add_quantized_writers(m);
    return m;
  }();
  return map;
}

// Ops that make no ONNX node of their own: their values are written when a consumer asks.
bool is_source(const std::string& op) { return op == "Const" || op == "Placeholder"; }

// The model's outputs as graph outputs; fails naming one that is not a node.
std::vector<Output> output_values(const ModelFile& model, const std::string& name) {
  std::vector<Output> outputs;
  for (const std::string& out : model.outputs) {
    const int id = model.graph.find(out);
    if (id < 0) fail("{}: output '{}' is not a node", name, out);
    outputs.push_back({id, 0});
  }
  return outputs;
}

// Every node without a writer, in one message; run-time ranges get their own, with the remedy.
void check_supported(const Graph& g, const std::vector<bool>& needed, const std::string& name) {
  std::vector<std::string> bad;
  for (const Node& n : g.nodes()) {
    if (!needed[static_cast<size_t>(n.id)]) continue;
    if (is_run_time_range_op(n.op))
      fail("{}: node '{}' ({}): quantization ranges measured at run time have no ONNX form; "
           "calibrate them: slimflow quantize MODEL --mode eightbit --calib-data DATA --out M.sfm",
           name, n.name, n.op);
    if (n.op == op_names::kBinarizeActivation)
      fail("{}: node '{}' ({}): XNOR layers' binary activations (+1 where x > 0, else -1) have "
           "no ONNX operator this exporter writes; models trained with --binarize weights or "
           "ternary export as their float equivalent",
           name, n.name, n.op);
    if (!is_source(n.op) && !writers().count(n.op)) bad.push_back(fmt::format("'{}' ({})", n.name, n.op));
  }
  if (bad.size() == 1) fail("{}: node {}: cannot be exported to ONNX", name, bad[0]);
  if (!bad.empty())
    fail("{}: {} nodes cannot be exported to ONNX: {}", name, bad.size(), fmt::join(bad, ", "));
}

// Dimension 0 is the batch: symbolic, so ONNX Runtime accepts any batch size.
void set_value_info(onnx::ValueInfoProto& info, const std::string& value_name,
                    const TensorType& type) {
  info.set_name(value_name);
  onnx::TypeProto::Tensor* t = info.mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx_elem_type(type.dtype));
  onnx::TensorShapeProto* shape = t->mutable_shape();
  for (size_t i = 0; i < type.shape.size(); ++i) {
    if (i == 0)
      shape->add_dim()->set_dim_param("batch");
    else
      shape->add_dim()->set_dim_value(type.shape[i]);
  }
}

void write_node(Context& c, const Node& n) {
  c.node = &n;
  try {
    writers().at(n.op)(c);
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(c.name + ":", 0) == 0) throw;
    c.fail("{}", msg);
  }
}

}  // namespace

}  // namespace onnx_export

std::string export_onnx_bytes(const ModelFile& model, const std::string& name,
                              const ExportOptions& options) {
  using namespace onnx_export;
  if (options.opset < 13 || options.opset > 17)
    fail("{}: opset {} is not supported (13 to 17 are)", name, options.opset);
  const Graph& g = model.graph;
  const std::vector<bool> needed = needed_nodes(g, output_values(model, name));
  check_supported(g, needed, name);

  onnx::ModelProto proto;
  proto.set_ir_version(8);
  proto.set_producer_name("slimflow");
  proto.set_producer_version("0.1.0");
  onnx::OperatorSetIdProto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(options.opset);
  onnx::GraphProto& graph = *proto.mutable_graph();
  graph.set_name(model.metadata.count("model") ? model.metadata.at("model") : "slimflow");

  Context c(model, name, options, graph);
  for (const std::string& input : model.inputs) {
    const int id = g.id_of(input);
    c.define({id, 0}, kAsIs, input);
    set_value_info(*graph.add_input(), input, g.node(id).outputs[0]);
  }
  for (const Node& n : g.nodes())
    if (needed[static_cast<size_t>(n.id)] && !is_source(n.op)) write_node(c, n);

  c.node = nullptr;
  for (const std::string& output : model.outputs) {
    const Output o{g.id_of(output), 0};
    // The value is renamed to the output's name by an Identity unless it already has it.
    const std::string value = c.get(o, kAsIs);
    if (value != output) {
      onnx::NodeProto* id = graph.add_node();
      id->set_op_type("Identity");
      id->set_name(output);
      id->add_input(value);
      id->add_output(output);
    }
    set_value_info(*graph.add_output(), output, g.type(o));
  }
  for (const auto& [k, v] : model.metadata) {
    onnx::StringStringEntryProto* entry = proto.add_metadata_props();
    entry->set_key(k);
    entry->set_value(v);
  }
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) fail("{}: the ONNX model does not serialize", name);
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    fail("{}: the ONNX model is {} bytes, over protobuf's 2 GB limit", name, bytes.size());
  return bytes;
}

uint64_t export_onnx(const ModelFile& model, const std::string& name, const std::string& path,
                     const ExportOptions& options) {
  const std::string bytes = export_onnx_bytes(model, name, options);
  AtomicFile file(path, "ONNX model");
  file.write(bytes.data(), bytes.size());
  file.commit();
  return bytes.size();
}

}  // namespace sf
