// Op declarations. Each op is declared exactly once: name and version, inputs, typed attributes
// with defaults, one shape/dtype function, a gradient written with other ops, and its traits
// (which inputs are weights, its FLOPs). Kernels are registered separately (kernels/registry.h).
#pragma once

#include <fmt/format.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace sf {

struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<AttrValue> default_value;  // nullopt: required
};

// Handed to an op's shape function.
class InferContext {
 public:
  InferContext(const Node& node, const std::vector<TensorType>& inputs)
      : node_(node), inputs_(inputs) {}
  const Node& node() const { return node_; }
  const Attrs& attrs() const { return node_.attrs; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const TensorType& input(int i) const { return inputs_.at(static_cast<size_t>(i)); }
  const Shape& shape(int i) const { return input(i).shape; }
  DType dtype(int i) const { return input(i).dtype; }

  // Throws "node 'name' (Op): <message>".
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw Error(fmt::format("node '{}' ({}): {}", node_.name, node_.op,
                            fmt::format(format, std::forward<Args>(args)...)));
  }
  // Checks that input i has the given rank.
  void expect_rank(int i, int rank, const char* what) const;
  void expect_dtype(int i, DType dtype, const char* what) const;

 private:
  const Node& node_;
  const std::vector<TensorType>& inputs_;
};

// Handed to an op's gradient function. Holds a copy of the node: the graph grows while
// gradient nodes are added, so references into it would dangle.
struct GradContext {
  Graph& graph;
  Node node;
  std::vector<Output> output_grads;  // invalid where no gradient flows into that output

  Output input(int i) const { return node.inputs.at(static_cast<size_t>(i)); }
  Output output(int i) const { return Output{node.id, i}; }
  Output grad(int i = 0) const { return output_grads.at(static_cast<size_t>(i)); }
  const Attrs& attrs() const { return node.attrs; }
  // A name for a gradient node: "<node>/grad/<suffix>".
  std::string name(const std::string& suffix) const;
};

using InferFn = std::function<std::vector<TensorType>(const InferContext&)>;
// Returns one entry per input; an invalid Output means "no gradient for this input".
using GradFn = std::function<std::vector<Output>(GradContext&)>;
// Floating-point operations (a multiply-add counts 2) of one run of `node`, from its attributes,
// its input shapes and its inferred outputs.
using FlopsFn = std::function<double(const Node& node, const std::vector<Shape>& input_shapes)>;

// An input holding a layer's learned weights (a conv filter, a matmul's matrix): the tensors
// weights-only quantization encodes, pruning zeros and size reports count. Biases are not.
struct WeightInput {
  int input = 1;
  // The axis of the output channels (per-channel scales run along it); negative counts from
  // the end.
  int channel_axis = -1;
  // A Bool attribute that, when true, means the weight is stored with its last two axes swapped
  // (MatMul's transpose_b); empty: none.
  std::string transposed_by;

  // The output-channel axis of a weight of rank `rank` read by a node with `attrs`.
  int channel_axis_for(const Attrs& attrs, int rank) const;
};

struct OpDef {
  std::string name;
  int version = 1;
  // Input names, for messages. Names that are or end in "params", "scale", "scales",
  // "zero_point" or "range" ("x_params", "w_scales") mark quantization parameters: constants of
  // the number format, which reports count apart from the learned weights.
  std::vector<std::string> inputs;
  bool variadic = false;            // any number (>= 1) of inputs, all named inputs[0]
  std::vector<AttrSpec> attrs;
  InferFn infer;
  GradFn grad;                       // empty: not differentiable
  std::vector<WeightInput> weights;  // empty: the op has no weights
  FlopsFn flops;                     // empty: not counted (0)
};

class OpRegistry {
 public:
  // The registry with every built-in op, registered on first use. Defined by the ops layer
  // (ops/register.cc), which holds the list of built-in ops.
  static OpRegistry& global();
  void add(OpDef def);
  const OpDef* find(const std::string& name) const;
  // Throws "unknown op 'X'" listing nothing else (the list is long); `where` prefixes it.
  const OpDef& get(const std::string& name, const std::string& where) const;
  std::vector<std::string> names() const;

 private:
  std::vector<OpDef> defs_;
};

// One weight input of one node: `layer` reads `weight` where its op declares weights. That is
// a Const or Variable in the models we build; callers check, since an imported MatMul may read
// two activations.
struct WeightUse {
  int layer;
  Output weight;
  int channel_axis;  // resolved for the weight's rank and the layer's attributes
};
// Every weight input of the graph's nodes, in node order (and input order within a node).
std::vector<WeightUse> weight_uses(const Graph& graph);

// Whether input `index` of an op holds quantization parameters (see OpDef::inputs).
bool is_quantization_input(const OpDef& def, int index);

// The FLOPs of one run of node `id` (0 for ops that declare no count).
double node_flops(const Graph& graph, int id);
// The same for a node given its input shapes (a kernel's spec).
double node_flops(const Node& node, const std::vector<Shape>& input_shapes);

}  // namespace sf
