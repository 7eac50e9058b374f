// import_onnx: parses the ModelProto, lists unsupported nodes up front, creates placeholders
// and constants, converts node by node (folding what is static, and turning QDQ groups into
// integer ops: qdq_fusion.cc), and names the outputs.
#include "onnx/importer.h"

#include <algorithm>
#include <climits>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "core/limits.h"
#include <onnx/checker.h>
#include <onnx/version_converter/convert.h>

#include "onnx/context.h"
#include "onnx/qdq_fusion.h"
#include "ops/ops.h"

namespace sf {

namespace onnx_import {

// The converters by family, as the README lists them.
struct ConverterFamily {
  const char* name;
  std::vector<void (*)(ConverterMap&)> adds;
};

const std::vector<ConverterFamily>& converter_families() {
  static const std::vector<ConverterFamily> families = {
      {"Convolution, pooling, normalization, products and resizing",
       {add_nn_converters, add_einsum_converter}},
      {"Element-wise arithmetic, activations, comparisons, logic and reductions",
       {add_math_converters}},
      {"Shapes, indexing and data movement", {add_shape_converters}},
      {"Quantized (QDQ and integer products)", {add_quant_converters}},
      {"Recurrent", {add_rnn_converters}}};
  return families;
}

const ConverterMap& converters() {
  static const ConverterMap map = [] {
    ConverterMap m;
    for (const ConverterFamily& family : converter_families())
      for (auto add : family.adds) add(m);
    return m;
  }();
  return map;
}

namespace {

bool is_default_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

int default_opset(const onnx::ModelProto& model, const std::string& path) {
  for (const onnx::OperatorSetIdProto& o : model.opset_import())
    if (is_default_domain(o.domain())) return static_cast<int>(o.version());
  fail("{}: not a valid ONNX model (no default-domain opset_import)", path);
}

// Every node the importer has no converter for, in one message.
void check_supported(const onnx::GraphProto& graph, const std::string& path) {
  std::vector<std::string> bad;
  for (const onnx::NodeProto& n : graph.node()) {
    const std::string op =
        is_default_domain(n.domain()) ? n.op_type() : n.domain() + "." + n.op_type();
    if (!is_default_domain(n.domain()) || !converters().count(n.op_type())) {
      const std::string name = !n.name().empty()     ? n.name()
                               : n.output_size() > 0 ? n.output(0)
                                                     : std::string("?");
      bad.push_back(fmt::format("'{}' ({})", name, op));
    }
  }
  if (!bad.empty())
    throw OnnxUnsupported(fmt::format("{}: {} unsupported node{}: {}", path, bad.size(),
                                      bad.size() == 1 ? "" : "s", fmt::join(bad, ", ")));
}

Shape input_shape(const onnx::ValueInfoProto& info, const ImportOptions& options,
                  const std::string& path) {
  auto it = options.input_shapes.find(info.name());
  if (it != options.input_shapes.end()) return it->second;
  const onnx::TypeProto::Tensor& t = info.type().tensor_type();
  if (!t.has_shape())
    fail("{}: input '{}' has no declared shape; give it with --input-shape", path, info.name());
  Shape shape;
  for (int i = 0; i < t.shape().dim_size(); ++i) {
    const onnx::TensorShapeProto::Dimension& d = t.shape().dim(i);
    if (d.has_dim_value() && d.dim_value() >= 0) {
      shape.push_back(d.dim_value());
    } else if (i == 0) {
      shape.push_back(1);  // a dynamic batch: Session re-infers shapes for other sizes
    } else {
      fail("{}: input '{}' has a dynamic dimension {}{}; give its shape with --input-shape", path,
           info.name(), i, d.dim_param().empty() ? "" : " ('" + d.dim_param() + "')");
    }
  }
  limits::checked_num_elements(shape, fmt::format("{}: input '{}'", path, info.name()));
  return shape;
}

// ONNX is in SSA form: a value written twice (by two nodes, or by a node over an input or an
// initializer) makes every reader ambiguous.
void reject_rewritten_values(const onnx::GraphProto& graph, const std::string& path) {
  std::map<std::string, std::string> writer;
  for (const onnx::TensorProto& init : graph.initializer()) writer[init.name()] = "an initializer";
  for (const onnx::ValueInfoProto& in : graph.input())
    writer.emplace(in.name(), "a graph input");
  for (const onnx::NodeProto& n : graph.node()) {
    const std::string who = fmt::format("node '{}' ({})", n.name(), n.op_type());
    for (const std::string& out : n.output()) {
      if (out.empty()) continue;
      auto [it, fresh] = writer.emplace(out, who);
      if (!fresh)
        fail("{}: {} writes '{}', which {} already writes", path, who, out, it->second);
    }
  }
}

// ONNX's checker messages run over several lines (the failing node follows); one is enough.
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Models of opsets 1-8 go through the ONNX library's version converter to opset 9, the oldest
// the converters read. The converter trusts its input (a value without a type crashes it), so
// the ONNX checker sees the model first.
onnx::ModelProto upgraded(const onnx::ModelProto& proto, int opset, const std::string& name) {
  const auto invalid = [&](const std::string& why) {
    return OnnxUnsupported(fmt::format(
        "{}: opset {} model is not valid ONNX, so it cannot be upgraded to opset 9: {}", name,
        opset, why));
  };
  try {
    onnx::checker::check_model(proto);
  } catch (const std::exception& e) {
    throw invalid(first_line(e.what()));
  }
  // The checker leaves these to the converter, which dereferences what it cannot find.
  const onnx::GraphProto& graph = proto.graph();
  std::set<std::string> defined;
  for (const onnx::ValueInfoProto& in : graph.input()) defined.insert(in.name());
  for (const onnx::TensorProto& init : graph.initializer()) defined.insert(init.name());
  // The ranks the converter will see: its Gemm 6 -> 7 adapter reads two dimensions of A and B.
  std::map<std::string, int> declared_rank;
  for (const auto* infos : {&graph.input(), &graph.value_info()})
    for (const onnx::ValueInfoProto& v : *infos)
      if (v.type().has_tensor_type() && v.type().tensor_type().has_shape())
        declared_rank[v.name()] = v.type().tensor_type().shape().dim_size();
  for (const onnx::TensorProto& init : graph.initializer())
    declared_rank[init.name()] = init.dims_size();
  for (const onnx::NodeProto& n : graph.node()) {
    for (const onnx::AttributeProto& a : n.attribute())
      if (a.has_g() || a.graphs_size() > 0)
        throw invalid(fmt::format("node '{}' ({}) holds a subgraph", n.name(), n.op_type()));
    if (n.op_type() == "Gemm" && opset < 7)
      for (int i = 0; i < std::min(n.input_size(), 2); ++i)
        if (auto it = declared_rank.find(n.input(i)); it != declared_rank.end() && it->second != 2)
          throw invalid(fmt::format("node '{}' (Gemm) reads '{}' of rank {}; A and B must be 2-D",
                                    n.name(), n.input(i), it->second));
    for (const std::string& in : n.input())
      if (!in.empty() && !defined.count(in))
        throw invalid(fmt::format("node '{}' ({}) reads '{}' before anything writes it",
                                  n.name(), n.op_type(), in));
    for (const std::string& out : n.output()) defined.insert(out);
  }
  for (const onnx::ValueInfoProto& out : graph.output())
    if (!defined.count(out.name()))
      throw invalid(fmt::format("output '{}' is never computed", out.name()));
  try {
    return onnx::version_conversion::ConvertVersion(proto, 9);
  } catch (const std::exception& e) {
    throw OnnxUnsupported(fmt::format(
        "{}: opset {} could not be upgraded to 9 by the ONNX version converter: {}", name, opset,
        e.what()));
  }
}

void add_inputs(Context& c, const onnx::GraphProto& graph, const ImportOptions& options,
                ModelFile& model) {
  for (const onnx::TensorProto& init : graph.initializer()) {
    Value v;
    v.constant = tensor_from_proto(init, c.path + ": initializer");
    v.shape = v.constant->shape();
    v.dtype = v.constant->dtype();
    c.values[init.name()] = std::move(v);
  }
  for (const onnx::ValueInfoProto& info : graph.input()) {
    if (c.values.count(info.name())) continue;  // an initializer (IR < 4 lists them as inputs)
    Value v;
    auto bound = options.constant_inputs.find(info.name());
    if (bound != options.constant_inputs.end()) {
      v.constant = bound->second;
      v.shape = v.constant->shape();
      v.dtype = v.constant->dtype();
    } else {
      if (!info.type().has_tensor_type())
        throw OnnxUnsupported(fmt::format("{}: input '{}' is not a tensor", c.path, info.name()));
      const std::string where = fmt::format("{}: input '{}'", c.path, info.name());
      v.dtype = dtype_from_onnx(info.type().tensor_type().elem_type(), where);
      v.shape = input_shape(info, options, c.path);
      v.plain = ops::placeholder(c.g, v.dtype, v.shape, info.name());
      model.inputs.push_back(info.name());
    }
    c.values[info.name()] = std::move(v);
  }
}

}  // namespace

void convert_as(Context& c, const onnx::NodeProto& n, const std::function<void()>& convert) {
  // A converter may convert nodes of its own (a decomposition, a fused group) whose NodeProtos
  // live on its stack: c.node names n again when they are done, or when their errors pass by.
  struct RestoreNode {
    Context& c;
    const onnx::NodeProto* outer;
    ~RestoreNode() { c.node = outer; }
  } restore{c, c.node};
  c.node = &n;
  try {
    convert();
  } catch (const OnnxUnsupported&) {
    throw;
  } catch (const Error& e) {
    // Shape-function errors name our node; prefix the file and the ONNX node.
    const std::string msg = e.what();
    if (msg.rfind(c.path + ":", 0) == 0) throw;
    c.fail("{}", msg);
  } catch (const std::exception& e) {
    c.fail("{}", e.what());  // e.g. std::out_of_range from malformed attributes
  }
}

void convert_node(Context& c, const onnx::NodeProto& n) {
  convert_as(c, n, [&] {
    if (!try_fold(c)) converters().at(n.op_type())(c);
    for (const std::string& out : n.output())
      if (!out.empty() && !c.values.count(out))
        c.unsupported("output '{}' is not produced by this importer", out);
  });
}

namespace {

void add_outputs(Context& c, const onnx::GraphProto& graph, ModelFile& model) {
  c.node = nullptr;
  for (const onnx::ValueInfoProto& info : graph.output()) {
    auto it = c.values.find(info.name());
    if (it == c.values.end()) fail("{}: output '{}' is never computed", c.path, info.name());
    Value& v = it->second;
    c.label = info.name();
    c.reserved_names.erase(info.name());
    const int existing = c.g.find(info.name());
    if (existing >= 0) {
      // A graph input returned as an output: its placeholder already has the name.
      if (!(c.plain(v) == Output{existing, 0}))
        fail("{}: output '{}' clashes with another node's name", c.path, info.name());
      model.outputs.push_back(info.name());
      continue;
    }
    if (v.is_const() && !v.plain.valid())
      ops::constant(c.g, *v.constant, info.name());
    else
      ops::identity(c.g, c.plain(v), info.name());
    model.outputs.push_back(info.name());
  }
}

}  // namespace
}  // namespace onnx_import

ModelFile import_onnx_bytes(const std::string& bytes, const std::string& name,
                            const ImportOptions& options) {
  using namespace onnx_import;
  onnx::ModelProto proto;
  if (bytes.size() > INT_MAX || !proto.ParseFromString(bytes) || !proto.has_graph())
    fail("{}: not a valid ONNX model (protobuf parse failed)", name);
  check_supported(proto.graph(), name);
  int opset = default_opset(proto, name);
  if (opset > kNewestOnnxOpset)
    throw OnnxUnsupported(
        fmt::format("{}: opset {} is not supported (1 to {} are)", name, opset, kNewestOnnxOpset));
  if (opset < 9) {
    proto = upgraded(proto, opset, name);
    opset = default_opset(proto, name);
  }
  const onnx::GraphProto& graph = proto.graph();
  check_supported(graph, name);

  ModelFile model;
  Context c(model.graph, name, opset);
  for (const onnx::ValueInfoProto& out : graph.output()) c.reserved_names.insert(out.name());
  reject_rewritten_values(graph, name);
  add_inputs(c, graph, options, model);
  QdqFusion fusion(c, graph, options.fuse_qdq);
  for (const onnx::NodeProto& n : graph.node()) fusion.convert(n);
  add_outputs(c, graph, model);
  model.metadata["source"] = name;
  model.metadata["format"] = "onnx";
  model.metadata["onnx_opset"] = std::to_string(opset);
  // The interface keeps ONNX's layout; image feeding reads this (runtime/model_to_run.h).
  model.metadata["input_layout"] = "NCHW";
  if (!proto.producer_name().empty()) model.metadata["producer"] = proto.producer_name();
  return model;
}

std::vector<std::string> supported_onnx_ops() {
  std::vector<std::string> ops;
  for (const auto& [op, convert] : onnx_import::converters()) ops.push_back(op);
  return ops;
}

std::string supported_onnx_ops_markdown() {
  std::string text;
  for (const onnx_import::ConverterFamily& family : onnx_import::converter_families()) {
    onnx_import::ConverterMap ops;
    for (auto add : family.adds) add(ops);
    if (!text.empty()) text += "\n";
    text += fmt::format("- {}:", family.name);
    const char* separator = " ";
    for (const auto& [op, convert] : ops) {
      text += fmt::format("{}`{}`", separator, op);
      separator = ", ";
    }
  }
  return text;
}

ModelFile import_onnx(const std::string& path, const ImportOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return import_onnx_bytes(bytes.str(), path, options);
}

}  // namespace sf
