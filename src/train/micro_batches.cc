#include "train/micro_batches.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "ops/op_names.h"
#include "ops/ops.h"

namespace sf {

namespace {

// By node of the step's graph: a weight's gradient that is a sum over the batch of its inputs'
// rows (x^T dy of a MatMul, a filter's or a bias's gradient), read by no other node. The sum
// over the micro-batches is then the same op once on their rows together, in the order of the
// whole batch: no accumulation of weight-sized tensors, and the weight-bound products run once
// instead of M times. It runs after every backward pass, off the path to the other devices.
std::vector<bool> summed_over_the_batch(const StepGraph& step) {
  const Graph& part = *step.graph;
  std::vector<bool> once(static_cast<size_t>(part.num_nodes()), false);
  // The shapes again with one more example: what has the batch as its first axis grows there.
  Graph grown = part;
  std::map<int, Shape> bigger;
  for (const Output& f : step.fed) {
    Shape shape = part.type(f).shape;
    if (shape.empty()) return once;
    ++shape[0];
    bigger[f.node] = shape;
  }
  try {
    grown.reinfer(bigger);
  } catch (const Error&) {
    return once;  // a shape fixed to the micro-batch: accumulate instead
  }
  auto batch_major = [&](Output o) {
    const Shape& a = part.type(o).shape;
    const Shape& b = grown.type(o).shape;
    return !a.empty() && a.size() == b.size() && b[0] == a[0] + 1 &&
           std::equal(a.begin() + 1, a.end(), b.begin() + 1);
  };
  std::vector<int> readers(static_cast<size_t>(part.num_nodes()), 0);
  for (const Node& node : part.nodes())
    for (const Output& in : node.inputs) ++readers[static_cast<size_t>(in.node)];
  std::map<int, int> grads_of_node;
  for (const Output& grad : step.grads) ++grads_of_node[grad.node];
  for (const Output& grad : step.grads) {
    const Node& node = part.node(grad.node);
    // FusedConv2DMaxPoolGrad gives two such gradients, a filter's and a bias's.
    const bool sums_rows =
        node.op == op_names::kMatMul || node.op == op_names::kConv2DBackpropFilter ||
        node.op == op_names::kBiasAddGrad || node.op == op_names::kFusedConv2DMaxPoolGrad;
    if (!sums_rows || grad.node < step.first_backward ||
        readers[static_cast<size_t>(grad.node)] != 0 ||
        grads_of_node[grad.node] != static_cast<int>(node.outputs.size()) ||
        part.type(grad).shape != grown.type(grad).shape)
      continue;
    bool rows_in = true;
    for (const Output& in : node.inputs) rows_in = rows_in && batch_major(in);
    once[static_cast<size_t>(grad.node)] = rows_in;
  }
  return once;
}

}  // namespace

MicroBatchGraph micro_batch_graph(const StepGraph& step, int64_t micro_batches) {
  const Graph& part = *step.graph;
  const int n = part.num_nodes();
  SF_CHECK(micro_batches >= 2, "micro_batch_graph needs 2 or more micro-batches, got {}",
           micro_batches);
  SF_CHECK(step.first_backward > 0 && step.first_backward < n, "first_backward {} of {} nodes",
           step.first_backward, n);
  const Node& seed = part.node(step.first_backward);
  SF_CHECK(seed.op == op_names::kConst && seed.attrs.get_tensor("value").numel() == 1 &&
               *seed.attrs.get_tensor("value").data<float>() == 1.0f,
           "node {} ('{}') is not the gradient seed", step.first_backward, seed.name);
  const float scale = 1.0f / static_cast<float>(micro_batches);

  MicroBatchGraph out;
  Graph& g = out.graph;
  auto is_shared = [&](int id) { return part.node(id).op == op_names::kVariable; };
  auto name_in = [&](int64_t k, int id) {
    const std::string& name = part.node(id).name;
    return is_shared(id) ? name : fmt::format("{}/mb{}", name, k);
  };
  std::vector<int> shared(static_cast<size_t>(n), -1);
  std::vector<std::vector<int>> copy_of(static_cast<size_t>(micro_batches),
                                        std::vector<int>(static_cast<size_t>(n), -1));
  auto copy = [&](int64_t k, int id) {
    const Node& node = part.node(id);
    int& target = copy_of[static_cast<size_t>(k)][static_cast<size_t>(id)];
    if (is_shared(id) && shared[static_cast<size_t>(id)] >= 0) {
      target = shared[static_cast<size_t>(id)];
      return;
    }
    std::vector<Output> inputs;
    for (const Output& in : node.inputs) {
      const int from = copy_of[static_cast<size_t>(k)][static_cast<size_t>(in.node)];
      SF_CHECK(from >= 0, "node '{}' reads '{}', not copied yet", node.name,
               part.node(in.node).name);
      inputs.push_back(Output{from, in.index});
    }
    Attrs attrs = node.attrs;
    if (id == step.first_backward) {
      Tensor value(DType::f32, {});
      *value.data<float>() = scale;
      attrs.set("value", value);
    }
    target = g.add_node(node.op, std::move(inputs), std::move(attrs), name_in(k, id));
    Node& c = g.mutable_node(target);
    c.requested_device = node.requested_device;
    if (!node.colocate_with.empty()) c.colocate_with = name_in(k, part.id_of(node.colocate_with));
    if (is_shared(id)) shared[static_cast<size_t>(id)] = target;
  };
  auto copied = [&](int64_t k, Output o) {
    return Output{copy_of[static_cast<size_t>(k)][static_cast<size_t>(o.node)], o.index};
  };

  const std::vector<bool> once = summed_over_the_batch(step);
  for (int64_t k = 0; k < micro_batches; ++k)
    for (int id = 0; id < step.first_backward; ++id) copy(k, id);
  std::vector<Output> sums(step.grads.size());
  for (int64_t k = micro_batches - 1; k >= 0; --k) {
    for (int id = step.first_backward; id < n; ++id)
      if (!once[static_cast<size_t>(id)]) copy(k, id);
    // Each other weight's gradient is summed next to where it is computed (with its forward
    // layer, its variable and the optimizer's update of it).
    for (size_t i = 0; i < step.grads.size(); ++i) {
      if (once[static_cast<size_t>(step.grads[i].node)]) continue;
      const Output grad = copied(k, step.grads[i]);
      if (k == micro_batches - 1) {
        sums[i] = grad;
        continue;
      }
      // A node may give two gradients (FusedConv2DMaxPoolGrad: a filter's and a bias's).
      const std::string& node_name = part.node(step.grads[i].node).name;
      const std::string grad_name = step.grads[i].index == 0
                                        ? node_name
                                        : fmt::format("{}:{}", node_name, step.grads[i].index);
      sums[i] = ops::add(g, sums[i], grad, fmt::format("{}/acc/mb{}", grad_name, k));
      g.mutable_node(sums[i].node).colocate_with = g.node(grad.node).name;
    }
  }
  // The micro-batches' rows of a tensor, in order (once however many gradients read it).
  std::map<Output, Output> rows_of;
  auto all_rows = [&](Output o) {
    auto [it, added] = rows_of.emplace(o, Output{});
    if (!added) return it->second;
    std::vector<Output> parts;
    for (int64_t k = 0; k < micro_batches; ++k) parts.push_back(copied(k, o));
    const std::string& name = part.node(o.node).name;
    it->second = ops::concat(g, parts, 0,
                             o.index == 0 ? name + "/rows" : fmt::format("{}:{}/rows", name, o.index));
    g.mutable_node(it->second.node).colocate_with = name_in(0, o.node);
    return it->second;
  };
  std::map<int, int> once_copy;  // by node of the step's graph
  for (size_t i = 0; i < step.grads.size(); ++i) {
    const int id = step.grads[i].node;
    if (!once[static_cast<size_t>(id)]) continue;
    auto [it, added] = once_copy.emplace(id, -1);
    if (added) {
      const Node& node = part.node(id);
      std::vector<Output> inputs;
      for (const Output& in : node.inputs) inputs.push_back(all_rows(in));
      it->second = g.add_node(node.op, std::move(inputs), node.attrs, node.name);
      Node& c = g.mutable_node(it->second);
      c.requested_device = node.requested_device;
      if (!node.colocate_with.empty()) c.colocate_with = name_in(0, part.id_of(node.colocate_with));
    }
    sums[i] = Output{it->second, step.grads[i].index};
  }
  out.grads = sums;
  for (int64_t k = 0; k < micro_batches; ++k) {
    std::vector<Output> fed;
    for (const Output& f : step.fed) fed.push_back(copied(k, f));
    out.fed.push_back(fed);
    out.losses.push_back(copied(k, step.loss));
    out.probs.push_back(copied(k, step.probs));
  }
  const std::string loss_name = part.node(step.loss.node).name;
  const Output sum = ops::add_n(g, out.losses, loss_name + "/sum");
  const Output mean_scale = ops::scalar(g, scale, loss_name + "/scale");
  out.loss = ops::mul(g, sum, mean_scale, loss_name);
  g.mutable_node(mean_scale.node).colocate_with = loss_name;
  out.probs_all = ops::concat(g, out.probs, 0, loss_name + "/probs");
  return out;
}

}  // namespace sf
