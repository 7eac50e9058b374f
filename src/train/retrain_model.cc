#include "train/retrain_model.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "autodiff/gradients.h"
#include "core/activation.h"
#include "core/error.h"
#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/quantized_ops.h"
#include "transforms/graph_uses.h"
#include "runtime/session.h"
#include "train/optimizer.h"
#include "transforms/rewriter.h"

namespace sf {

std::string head_spec_text(int64_t dim, int64_t classes, int64_t hidden) {
  std::string text = fmt::format(
      "name: retrain-head\n"
      "input: [1, 1, {}]\n"
      "classes: {}\n"
      "layers:\n"
      "  - {{name: retrain_flatten, type: flatten}}\n",
      dim, classes);
  if (hidden > 0)
    text += fmt::format("  - {{name: retrain_hidden, type: dense, units: {}, activation: relu}}\n",
                        hidden);
  text += fmt::format(
      "  - {{name: retrain_logits, type: dense, units: {}}}\n"
      "train: {{optimizer: adam, lr: 0.001, batch: 100, epochs: 20}}\n",
      classes);
  return text;
}

namespace {

// The [scale, zero_point] params of a u8 tensor of an eightbit graph: set by the op that
// quantized or requantized it, carried through by the ops that only move u8 data.
std::optional<Output> u8_params(const Graph& g, Output x) {
  for (int hops = 0; hops < g.num_nodes(); ++hops) {
    const Node& n = g.node(x.node);
    if (n.op == op_names::kQuantize) return n.inputs.at(1);
    if (n.op == op_names::kRequantize) return n.inputs.at(3);
    if (n.op == op_names::kQuantizedConv2DRequantized || n.op == op_names::kQuantizedMatMulRequantized)
      return n.inputs.at(5);
    if (n.inputs.empty()) return std::nullopt;
    x = n.inputs[0];
  }
  return std::nullopt;
}

}  // namespace

Output float_output(Graph& g, const std::string& name) {
  const int id = g.find(name);
  if (id >= 0 && g.type({id, 0}).dtype == DType::f32) return {id, 0};
  const int dequantized = g.find(name + "/dequantize");
  if (dequantized >= 0 && g.type({dequantized, 0}).dtype == DType::f32) return {dequantized, 0};
  const int quantized = g.find(name + "/quantized");
  const int u8 = quantized >= 0 ? quantized : id;
  if (u8 < 0) fail("no node named '{}'", name);
  const Output data{u8, 0};
  const std::optional<Output> params =
      g.type(data).dtype == DType::u8 ? u8_params(g, data) : std::nullopt;
  if (!params)
    fail("node '{}' gives {} values, which cannot be read as floats", g.node(u8).name,
         dtype_name(g.type(data).dtype));
  return ops::dequantize(g, data, *params, g.unique_name(name + "/dequantize"));
}

ModelFile attach_head(const ModelFile& base, const std::string& bottleneck, const ModelFile& head) {
  Graph work = base.graph;
  const Output feature = float_output(work, bottleneck);
  const TensorType& type = work.type(feature);
  if (head.inputs.size() != 1 || head.outputs.size() != 1)
    fail("retrain: the head model must have one input and one output");
  const int head_input = head.graph.id_of(head.inputs[0]);
  const Shape& head_shape = head.graph.type({head_input, 0}).shape;
  const int64_t dim = head_shape.back();
  if (type.dtype != DType::f32 || type.shape.empty() || num_elements(type.shape) / type.shape[0] != dim)
    fail("bottleneck node '{}' gives {} {}, but the head reads {} floats per example", bottleneck,
         dtype_name(type.dtype), shape_str(type.shape), dim);

  std::vector<Output> outputs = {feature};
  Rewriter base_copy(work);
  base_copy.copy_needed(GraphUses(work, outputs), [](const Node&) { return false; });
  Graph graph = base_copy.finish(outputs);
  const Output rows = ops::reshape(graph, outputs[0], {-1, 1, 1, dim},
                                   graph.unique_name("retrain_bottleneck"));

  Rewriter head_copy(head.graph);
  head_copy.target() = std::move(graph);
  for (const Node& n : head.graph.nodes()) {
    if (n.id == head_input) {
      head_copy.set({n.id, 0}, rows);
      continue;
    }
    Graph& g = head_copy.target();
    const int id = g.add_node(n.op, head_copy.mapped(n.inputs), n.attrs, g.unique_name(n.name));
    for (int i = 0; i < static_cast<int>(n.outputs.size()); ++i) head_copy.set({n.id, i}, {id, i});
  }
  std::vector<Output> probabilities = {Output{head.graph.id_of(head.outputs[0]), 0}};
  ModelFile file;
  file.graph = head_copy.finish(probabilities);
  file.inputs = base.inputs;
  file.outputs = {file.graph.node(probabilities[0].node).name};
  file.metadata = base.metadata;
  return file;
}

}  // namespace sf

namespace sf {

namespace {

// The fused inference ops have no gradient: a fused conv or matmul trains as the op, a bias
// add, the addend and the activation.
Output unfused(Graph& g, const Node& n, const std::vector<Output>& in) {
  const std::string base = n.op == op_names::kFusedMatMul ? op_names::kMatMul : op_names::kConv2D;
  Attrs attrs;
  for (const auto& [name, value] : n.attrs.all())
    if (name != "activation") attrs.set(name, value);
  Output y = g.add(base, {in[0], in[1]}, attrs, g.unique_name(n.name + "/op"));
  y = ops::bias_add(g, y, in[2], g.unique_name(n.name + "/bias"));
  if (in.size() == 4) y = ops::add(g, y, in[3], g.unique_name(n.name + "/add"));
  const Activation act = activation_of(n);
  if (act == Activation::Relu) return ops::relu(g, y, n.name);
  if (act == Activation::Relu6) return ops::relu6(g, y, n.name);
  return ops::identity(g, y, n.name);
}

}  // namespace

namespace {

// Nodes that depend on node `from`.
std::vector<bool> nodes_after(const Graph& g, int from) {
  std::vector<bool> after(static_cast<size_t>(g.num_nodes()), false);
  for (const Node& n : g.nodes())
    for (const Output& in : n.inputs)
      if (in.node == from || after[static_cast<size_t>(in.node)]) after[static_cast<size_t>(n.id)] = true;
  return after;
}

bool unfusable(const Node& n) {
  return n.op == op_names::kFusedMatMul || n.op == op_names::kFusedConv2D ||
         n.op == op_names::kFusedConv2DAdd;
}

}  // namespace

void check_fine_tunable(const Graph& g, const std::string& from, Output end) {
  const int from_id = g.find(from);
  if (from_id < 0) fail("--fine-tune-from: the model has no node named '{}'", from);
  const GraphUses uses(g, {end});
  if (!uses.needed(from_id))
    fail("--fine-tune-from '{}' is not on the way to node '{}'", from, g.node(end.node).name);
  const std::vector<bool> after = nodes_after(g, from_id);
  for (const Node& n : g.nodes()) {
    if (!after[static_cast<size_t>(n.id)] || !uses.needed(n.id) || unfusable(n)) continue;
    if (!OpRegistry::global().get(n.op, "fine-tuning").grad)
      fail("--fine-tune-from '{}': node '{}' ({}) after it cannot train (no gradient); fine-tune "
           "a float base model, or from a later node",
           from, n.name, n.op);
  }
}

FineTuneResult fine_tune(ModelFile& model, const std::string& from, const FineTuneOptions& options,
                         const ImageBatches& next) {
  const Graph& src = model.graph;
  const int output = src.id_of(model.outputs.at(0));
  check_fine_tunable(src, from, {output, 0});
  // Nodes that depend on `from`, and the weights only they read.
  const std::vector<bool> after = nodes_after(src, src.id_of(from));
  std::vector<int> readers(static_cast<size_t>(src.num_nodes()), 0), later_readers = readers;
  for (const Node& n : src.nodes())
    for (const Output& in : n.inputs) {
      ++readers[static_cast<size_t>(in.node)];
      if (after[static_cast<size_t>(n.id)]) ++later_readers[static_cast<size_t>(in.node)];
    }
  auto trainable = [&](const Node& n) {
    return n.op == op_names::kConst && n.attrs.get_tensor("value").dtype() == DType::f32 &&
           readers[static_cast<size_t>(n.id)] > 0 &&
           readers[static_cast<size_t>(n.id)] == later_readers[static_cast<size_t>(n.id)];
  };
  if (src.node(output).op != op_names::kSoftmax)
    fail("--fine-tune-from: the model's output '{}' is {}, not the Softmax of retrain's head",
         src.node(output).name, src.node(output).op);

  Rewriter rw(src);
  auto store = std::make_shared<VariableStore>();
  std::vector<std::pair<int, Output>> variables;  // Const node id -> its Variable
  for (const Node& n : src.nodes()) {
    Graph& g = rw.target();
    if (trainable(n)) {
      const Tensor& value = n.attrs.get_tensor("value");
      const Output v = ops::variable(g, DType::f32, value.shape(), n.name);
      store->set(n.name, value.clone());
      variables.emplace_back(n.id, v);
      rw.set({n.id, 0}, v);
    } else if (after[static_cast<size_t>(n.id)] && unfusable(n)) {
      rw.set({n.id, 0}, unfused(g, n, rw.mapped(n.inputs)));
    } else {
      rw.copy(n);
    }
  }
  if (variables.empty()) fail("--fine-tune-from '{}': no weights after that node to train", from);
  std::vector<Output> ends = {src.node(output).inputs.at(0), {src.id_of(model.inputs.at(0)), 0}};
  Graph g = rw.finish(ends);
  const Output logits = ends[0], input = ends[1];

  Tensor images, labels;
  FineTuneResult result;
  std::optional<Session> session;
  Output label_port, loss;
  std::vector<Output> fetches;
  Optimizer optimizer(OptimizerConfig{.kind = "adam"});
  while (next(images, labels)) {
    if (!session) {
      // The gradient graph is built for the batch size, which then stays.
      g.reinfer({{input.node, images.shape()}});
      label_port = ops::placeholder(g, DType::i32, {images.dim(0)}, "fine_tune_labels");
      loss = ops::softmax_cross_entropy(g, logits, label_port, "fine_tune_loss");
      std::vector<Output> wrt;
      for (const auto& [id, v] : variables) wrt.push_back(v);
      fetches = {loss};
      for (const Output& grad : gradients(g, loss, wrt)) fetches.push_back(grad);
      session.emplace(g, SessionOptions{.threads = options.threads}, store);
    }
    std::vector<Tensor> out = session->run({{input, images}, {label_port, labels}}, fetches, true);
    const float step_loss = *out[0].data<float>();
    if (!std::isfinite(step_loss))
      fail("--fine-tune-from: loss is {} at step {}; lower --fine-tune-lr (now {:g})", step_loss,
           result.steps + 1, options.lr);
    result.loss += step_loss;
    optimizer.begin_step();
    for (size_t i = 0; i < variables.size(); ++i) {
      const std::string& name = src.node(variables[i].first).name;
      optimizer.apply(name, store->get(name), out[1 + i], options.lr, false);
    }
    ++result.steps;
  }
  for (const auto& [id, v] : variables) {
    const Tensor& value = store->get(src.node(id).name);
    result.weights += value.numel();
    model.graph.mutable_node(id).attrs.set("value", value.clone());
  }
  if (result.steps > 0) result.loss /= static_cast<double>(result.steps);
  return result;
}

}  // namespace sf
