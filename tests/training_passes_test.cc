// The training rewrites keep every gradient bit for bit and remove what they promise to: the
// ReluGrad of a Relu whose output is max-pooled folds into the MaxPoolGrad (tiling windows,
// as training's 2x2 pools, and overlapping ones); a MaxPoolGrad something else reads stays.
#include "transforms/training_passes.h"

#include <gtest/gtest.h>

#include <cmath>

#include "autodiff/gradients.h"
#include "graph/graph.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf {
namespace {

struct PooledRelu {
  Graph g;
  Output a, weights, loss, pre_pool_grad;
  std::vector<Output> grads;
};

// loss = sum(max_pool(relu(a)) * weights); its gradients with respect to a and the weights.
void build(PooledRelu& m, const ops::PoolOptions& pool) {
  m.a = ops::placeholder(m.g, DType::f32, {2, 7, 9, 17}, "a");
  Output y = ops::max_pool(m.g, ops::relu(m.g, m.a, "relu"), pool, "pool");
  m.weights = ops::placeholder(m.g, DType::f32, m.g.type(y).shape, "weights");
  m.loss = ops::reduce_sum(m.g, ops::mul(m.g, y, m.weights), {0, 1, 2, 3});
  m.grads = gradients(m.g, m.loss, {m.a, m.weights});
}

int count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op ? 1 : 0;
  return n;
}

std::vector<Tensor> run(const Graph& g, Output a, Output weights,
                        const std::vector<Output>& fetches) {
  // Values on a grid of 0.25 through zero: windows hold ties and non-positive maxima.
  Tensor x = testing::random_tensor({2, 7, 9, 17}, 7);
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data<float>()[i] = std::round(x.data<float>()[i] * 4.0f) / 4.0f;
  Session session(g);
  std::vector<Tensor> got = session.run(
      {{a, x}, {weights, testing::random_tensor(g.type(weights).shape, 8)}}, fetches);
  for (Tensor& t : got) t = t.clone();
  return got;
}

void expect_folded_and_equal(const ops::PoolOptions& pool) {
  PooledRelu m;
  build(m, pool);
  std::vector<Output> outputs = {m.loss, m.grads[0], m.grads[1], m.a, m.weights};
  const Graph folded = fold_relu_grad_into_max_pool_grad(m.g, outputs);
  EXPECT_EQ(count(m.g, op_names::kReluGrad), 1);
  EXPECT_EQ(count(folded, op_names::kReluGrad), 0);
  ASSERT_EQ(count(folded, op_names::kMaxPoolGrad), 1);
  for (const Node& n : folded.nodes()) {
    if (n.op == op_names::kMaxPoolGrad) {
      EXPECT_TRUE(n.attrs.get_bool("relu"));
    }
  }
  const std::vector<Tensor> want = run(m.g, m.a, m.weights, {m.loss, m.grads[0], m.grads[1]});
  const std::vector<Tensor> got =
      run(folded, outputs[3], outputs[4], {outputs[0], outputs[1], outputs[2]});
  for (size_t i = 0; i < want.size(); ++i)
    testing::expect_close(want[i], got[i], {.rtol = 0.0, .atol = 0.0}, "output " + std::to_string(i));
}

TEST(FoldReluGradIntoMaxPoolGrad, TilingWindowsKeepEveryGradient) {
  expect_folded_and_equal({.padding = "SAME"});
}

TEST(FoldReluGradIntoMaxPoolGrad, OverlappingWindowsKeepEveryGradient) {
  expect_folded_and_equal({.ksize = {3, 3}, .strides = {2, 2}, .padding = "SAME"});
}

TEST(FoldReluGradIntoMaxPoolGrad, AMaxPoolGradReadElsewhereStays) {
  PooledRelu m;
  build(m, {});
  const Node* pool_grad = nullptr;
  for (const Node& n : m.g.nodes())
    if (n.op == op_names::kMaxPoolGrad) pool_grad = &n;
  ASSERT_NE(pool_grad, nullptr);
  std::vector<Output> outputs = {m.grads[0], Output{pool_grad->id, 0}};
  const Graph folded = fold_relu_grad_into_max_pool_grad(m.g, outputs);
  EXPECT_EQ(count(folded, op_names::kReluGrad), 1);
  EXPECT_EQ(folded.num_nodes(), m.g.num_nodes());
}

}  // namespace
}  // namespace sf
