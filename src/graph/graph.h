// The dataflow graph: named nodes, each an op with typed attributes and typed outputs.
//
// Nodes are appended in topological order (a node's inputs must already exist), so node ids
// are an execution order. Every node's output types are inferred by its op's shape function
// when the node is added, and again by reinfer() when placeholder shapes change (a different
// batch size); there is no second copy of the shape logic anywhere.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/activation.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "graph/attr.h"

namespace sf {

// One output of one node.
struct Output {
  int node = -1;
  int index = 0;
  bool valid() const { return node >= 0; }
  bool operator==(const Output&) const = default;
  auto operator<=>(const Output&) const = default;
};

struct TensorType {
  DType dtype = DType::f32;
  Shape shape;
  bool operator==(const TensorType&) const = default;
};
std::string type_str(const TensorType& type);  // "f32[64,10]"

struct Node {
  int id = -1;
  std::string name;
  std::string op;
  std::vector<Output> inputs;
  Attrs attrs;
  std::vector<TensorType> outputs;
  std::string device = "/cpu:0";  // where it runs: set by placement (placement/placer.h)
  // What the model asked for; empty: no request (placement decides). A device name, parsed
  // and checked by placement.
  std::string requested_device;
  // A node that must share this node's device (a gradient its forward op; a user's
  // `colocate_with`); empty: none.
  std::string colocate_with;
};

// The "activation" attribute of a fused or integer node; None when the node has none. Throws
// naming the node when it is not none, relu or relu6 (shape functions check it this way).
Activation activation_of(const Node& node);

class Graph {
 public:
  // Adds a node after checking its attributes against the op's declaration (unknown names and
  // wrong kinds are errors; missing ones take their defaults) and inferring its output types.
  // Throws sf::Error naming the node, the op and the shapes when anything does not fit.
  // An empty name becomes a unique name derived from the op.
  int add_node(const std::string& op, std::vector<Output> inputs, Attrs attrs = {},
               const std::string& name = "");
  // add_node, returning output 0.
  Output add(const std::string& op, std::vector<Output> inputs, Attrs attrs = {},
             const std::string& name = "") {
    return Output{add_node(op, std::move(inputs), std::move(attrs), name), 0};
  }

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const Node& node(int id) const { return nodes_.at(static_cast<size_t>(id)); }
  Node& mutable_node(int id) { return nodes_.at(static_cast<size_t>(id)); }
  const std::vector<Node>& nodes() const { return nodes_; }
  const TensorType& type(Output output) const;

  // -1 when absent.
  int find(const std::string& name) const;
  // Throws sf::Error when absent.
  int id_of(const std::string& name) const;
  std::string unique_name(const std::string& base) const;

  // Sets new shapes for Placeholder nodes and re-runs shape inference over the whole graph.
  void reinfer(const std::map<int, Shape>& placeholder_shapes);

 private:
  std::vector<TensorType> infer(const Node& node) const;
  std::vector<Node> nodes_;
  std::map<std::string, int> by_name_;
};

// By node id: whether `outputs` depend on the node (the outputs' own nodes included).
std::vector<bool> needed_nodes(const Graph& graph, const std::vector<Output>& outputs);

}  // namespace sf
