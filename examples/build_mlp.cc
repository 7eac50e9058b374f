// Builds a small classifier with slimflow's C++ API (the same graph a model spec describes),
// differentiates it, and trains it for a few steps on a synthetic problem.
//
//   build/release/example_build_mlp
//
// What it shows:
//   1. ops::* functions add nodes to a Graph; shapes are checked as each node is added.
//   2. gradients() adds the backward pass to the same graph.
//   3. A Session runs the graph; variables live in its VariableStore; an Optimizer updates them.
#include <cstdio>
#include <random>

#include "autodiff/gradients.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "models/initializers.h"
#include "train/optimizer.h"

int main() {
  using namespace sf;
  constexpr int64_t kBatch = 32, kFeatures = 8, kHidden = 16, kClasses = 2;

  // 1. The model: x -> dense(16) -> relu -> dense(2) -> softmax cross-entropy.
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {kBatch, kFeatures}, "x");
  Output labels = ops::placeholder(g, DType::i32, {kBatch}, "labels");
  Output w1 = ops::variable(g, DType::f32, {kFeatures, kHidden}, "fc1/weights");
  Output b1 = ops::variable(g, DType::f32, {kHidden}, "fc1/bias");
  Output w2 = ops::variable(g, DType::f32, {kHidden, kClasses}, "fc2/weights");
  Output b2 = ops::variable(g, DType::f32, {kClasses}, "fc2/bias");
  Output hidden = ops::relu(g, ops::bias_add(g, ops::matmul(g, x, w1), b1));
  Output logits = ops::bias_add(g, ops::matmul(g, hidden, w2), b2);
  Output loss = ops::softmax_cross_entropy(g, logits, labels, "loss");

  // 2. The backward pass, as more nodes of the same graph.
  std::vector<Output> params = {w1, b1, w2, b2};
  std::vector<Output> grads = gradients(g, loss, params);

  // 3. Initial values, then plain SGD steps.
  Session session(g);
  std::mt19937_64 rng(42);
  for (const Output& p : params) {
    const Node& node = g.node(p.node);
    Tensor value(DType::f32, node.outputs[0].shape);
    initialize(value, parse_initializer("glorot"), value.dim(0), value.dim(-1), rng);
    session.variables().set(node.name, value);
  }
  Optimizer sgd(OptimizerConfig{.kind = "sgd"});

  // The task: is the sum of the features positive?
  Tensor features(DType::f32, {kBatch, kFeatures});
  Tensor targets(DType::i32, {kBatch});
  std::normal_distribution<float> normal;
  std::vector<Output> fetches = {loss};
  fetches.insert(fetches.end(), grads.begin(), grads.end());
  for (int step = 1; step <= 200; ++step) {
    for (int64_t i = 0; i < kBatch; ++i) {
      float sum = 0;
      for (int64_t j = 0; j < kFeatures; ++j) sum += features.data<float>()[i * kFeatures + j] = normal(rng);
      targets.data<int32_t>()[i] = sum > 0;
    }
    std::vector<Tensor> out = session.run({{x, features}, {labels, targets}}, fetches, true);
    sgd.begin_step();
    for (size_t k = 0; k < params.size(); ++k)
      sgd.apply(g.node(params[k].node).name, session.variables().get(g.node(params[k].node).name),
                out[1 + k], 0.1, false);
    if (step == 1 || step % 50 == 0) std::printf("step %3d  loss %.4f\n", step, *out[0].data<float>());
  }
  return 0;
}
