// The training rewrites keep the loss and every gradient bit for bit and remove what they
// promise to: a Relu's gradient folds into the MaxPoolGrad of its output (tiling windows, as
// training's 2x2 pools, and overlapping ones), a tiling pool and its gradient become the pair
// that passes window argmaxes, a Relu into the BiasAdd it reads (its ReluGrad, where one is
// left, reading the fused node), a Relu or Relu6 into the BatchNorm it reads, a conv's bias and
// ReLU into the conv, a single-channel conv into the pool of its output; a MaxPoolGrad,
// BiasAdd, BatchNorm or Conv2D something else reads stays.
#include "transforms/training_passes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autodiff/gradients.h"
#include "graph/graph.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// Two layers as a CNN's: h = max_pool(relu(a + b1)), then dense = relu(flatten(h) w + b2); the
// loss is sum(dense * v). Feeds a, b1, w, b2, v; gradients with respect to all of them.
struct Net {
  Graph g;
  std::vector<Output> feeds;
  Output loss, pool_grad;
  std::vector<Output> grads;
};

void build(Net& m, const ops::PoolOptions& pool) {
  auto feed = [&](Shape shape, const std::string& name) {
    m.feeds.push_back(ops::placeholder(m.g, DType::f32, std::move(shape), name));
    return m.feeds.back();
  };
  Output a = feed({2, 7, 9, 17}, "a");
  Output h = ops::relu(m.g, ops::bias_add(m.g, a, feed({17}, "b1"), "bias1"), "relu1");
  h = ops::max_pool(m.g, h, pool, "pool");
  const Shape pooled = m.g.type(h).shape;
  h = ops::reshape(m.g, h, {2, pooled[1] * pooled[2] * pooled[3]});
  Output dense = ops::relu(
      m.g, ops::bias_add(m.g, ops::matmul(m.g, h, feed({m.g.type(h).shape[1], 5}, "w")),
                         feed({5}, "b2"), "bias2"),
      "relu2");
  m.loss = ops::reduce_sum(m.g, ops::mul(m.g, dense, feed({2, 5}, "v")), {0, 1});
  m.grads = gradients(m.g, m.loss, m.feeds);
  for (const Node& n : m.g.nodes())
    if (n.op == op_names::kMaxPoolGrad) m.pool_grad = {n.id, 0};
}

int count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op ? 1 : 0;
  return n;
}

// The loss and gradients; values on a grid of 0.25 through zero, so pooling windows hold ties
// and non-positive maxima.
std::vector<Tensor> run(const Graph& g, const std::vector<Output>& feeds,
                        const std::vector<Output>& fetches, SessionOptions options = {}) {
  Feeds values;
  uint32_t seed = 7;
  for (const Output& f : feeds) {
    Tensor t = testing::random_tensor(g.type(f).shape, seed++);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = std::round(t.data<float>()[i] * 4.0f) / 4.0f;
    values.emplace_back(f, t);
  }
  Session session(g, options);
  std::vector<Tensor> got = session.run(values, fetches);
  for (Tensor& t : got) t = t.clone();
  return got;
}

void expect_rewritten_and_equal(const ops::PoolOptions& pool, bool tiles) {
  Net m;
  build(m, pool);
  std::vector<Output> outputs = m.feeds;
  outputs.push_back(m.loss);
  outputs.insert(outputs.end(), m.grads.begin(), m.grads.end());
  const Graph rewritten = rewrite_training_graph(m.g, outputs);
  EXPECT_EQ(count(m.g, op_names::kReluGrad), 2);
  // The pooled Relu's gradient is folded; the dense one's reads the BiasAddRelu.
  EXPECT_EQ(count(rewritten, op_names::kReluGrad), 1);
  EXPECT_EQ(count(rewritten, op_names::kRelu), 0);
  EXPECT_EQ(count(rewritten, op_names::kBiasAdd), 0);
  EXPECT_EQ(count(rewritten, op_names::kBiasAddRelu), 2);
  // Tiling windows pass where each maximum is from the pool to its gradient.
  EXPECT_EQ(count(rewritten, op_names::kMaxPoolGrad), tiles ? 0 : 1);
  EXPECT_EQ(count(rewritten, op_names::kMaxPool), tiles ? 0 : 1);
  EXPECT_EQ(count(rewritten, op_names::kMaxPoolWindowArgmax), tiles ? 1 : 0);
  EXPECT_EQ(count(rewritten, op_names::kMaxPoolGradWindowArgmax), tiles ? 1 : 0);
  for (const Node& n : rewritten.nodes()) {
    if (n.op == op_names::kMaxPoolGrad || n.op == op_names::kMaxPoolWindowArgmax) {
      EXPECT_TRUE(n.attrs.get_bool("relu"));
    }
    if (n.op == op_names::kMaxPoolGradWindowArgmax) {
      EXPECT_EQ(n.inputs[1], (Output{rewritten.id_of("pool"), 1}));
    }
    if (n.op == op_names::kReluGrad) {
      EXPECT_EQ(rewritten.node(n.inputs[1].node).op, op_names::kBiasAddRelu);
    }
  }
  const size_t feeds = m.feeds.size();
  std::vector<Output> fetches = {m.loss};
  fetches.insert(fetches.end(), m.grads.begin(), m.grads.end());
  const std::vector<Tensor> want = run(m.g, m.feeds, fetches);
  const std::vector<Tensor> got =
      run(rewritten, std::vector<Output>(outputs.begin(), outputs.begin() + feeds),
          std::vector<Output>(outputs.begin() + feeds, outputs.end()));
  for (size_t i = 0; i < want.size(); ++i)
    testing::expect_close(want[i], got[i], {.rtol = 0.0, .atol = 0.0},
                          "output " + std::to_string(i));
}

TEST(TrainingPasses, TilingPoolKeepsTheLossAndEveryGradient) {
  expect_rewritten_and_equal({.padding = "SAME"}, true);
}

TEST(TrainingPasses, OverlappingPoolKeepsTheLossAndEveryGradient) {
  expect_rewritten_and_equal({.ksize = {3, 3}, .strides = {2, 2}, .padding = "SAME"}, false);
}

TEST(TrainingPasses, NodesReadElsewhereStay) {
  Net m;
  build(m, {});
  // The MaxPoolGrad's output and the first BiasAdd's are fetched too.
  Output bias1{m.g.id_of("bias1"), 0};
  std::vector<Output> outputs = {m.grads[0], m.pool_grad, bias1};
  const Graph rewritten = rewrite_training_graph(m.g, outputs);
  EXPECT_EQ(count(rewritten, op_names::kReluGrad), 2);  // the pooled one is not folded
  EXPECT_EQ(count(rewritten, op_names::kBiasAdd), 1);
  EXPECT_EQ(count(rewritten, op_names::kBiasAddRelu), 1);
  EXPECT_EQ(rewritten.node(outputs[2].node).op, op_names::kBiasAdd);
}

// conv(relu(conv(a, w1) + b1), w2) + b2, strided and padded; the loss is sum(y * v).
struct ConvNet {
  Graph g;
  std::vector<Output> feeds;
  Output conv1, loss;
  std::vector<Output> grads;
};

void build(ConvNet& m, const std::string& bias1_device = "") {
  auto feed = [&](Shape shape, const std::string& name) {
    m.feeds.push_back(ops::placeholder(m.g, DType::f32, std::move(shape), name));
    return m.feeds.back();
  };
  Output a = feed({2, 9, 11, 3}, "a");
  m.conv1 = ops::conv2d(m.g, a, feed({3, 3, 3, 16}, "w1"), {.padding = "SAME"}, "conv1");
  Output h = ops::bias_add(m.g, m.conv1, feed({16}, "b1"), "bias1");
  m.g.mutable_node(h.node).requested_device = bias1_device;
  h = ops::relu(m.g, h, "relu1");
  Output y = ops::conv2d(m.g, h, feed({3, 3, 16, 8}, "w2"), {.strides = {2, 2}}, "conv2");
  y = ops::bias_add(m.g, y, feed({8}, "b2"), "bias2");
  m.loss = ops::reduce_sum(m.g, ops::mul(m.g, y, feed({2, 4, 5, 8}, "v")), {0, 1, 2, 3});
  m.grads = gradients(m.g, m.loss, m.feeds);
}

void expect_conv_folds_exactly(SessionOptions options) {
  ConvNet m;
  build(m);
  std::vector<Output> outputs = m.feeds;
  outputs.push_back(m.loss);
  outputs.insert(outputs.end(), m.grads.begin(), m.grads.end());
  const Graph rewritten = rewrite_training_graph(m.g, outputs);
  EXPECT_EQ(count(rewritten, op_names::kConv2D), 0);
  EXPECT_EQ(count(rewritten, op_names::kBiasAdd), 0);
  EXPECT_EQ(count(rewritten, op_names::kBiasAddRelu), 0);
  ASSERT_EQ(count(rewritten, op_names::kFusedConv2D), 2);
  EXPECT_EQ(rewritten.node(rewritten.id_of("conv1")).attrs.get_string("activation"), "relu");
  EXPECT_EQ(rewritten.node(rewritten.id_of("conv2")).attrs.get_string("activation"), "none");
  // The ReLU's gradient reads the fused conv's output.
  for (const Node& n : rewritten.nodes())
    if (n.op == op_names::kReluGrad) {
      EXPECT_EQ(rewritten.node(n.inputs[1].node).name, "conv1");
    }
  const size_t feeds = m.feeds.size();
  std::vector<Output> fetches = {m.loss};
  fetches.insert(fetches.end(), m.grads.begin(), m.grads.end());
  const std::vector<Tensor> want = run(m.g, m.feeds, fetches, options);
  const std::vector<Tensor> got =
      run(rewritten, std::vector<Output>(outputs.begin(), outputs.begin() + feeds),
          std::vector<Output>(outputs.begin() + feeds, outputs.end()), options);
  for (size_t i = 0; i < want.size(); ++i)
    testing::expect_close(want[i], got[i], {.rtol = 0.0, .atol = 0.0},
                          "output " + std::to_string(i));
}

TEST(TrainingPasses, ConvFoldsItsBiasAndReluAndKeepsEveryGradient) {
  expect_conv_folds_exactly({});
}

// bf16 products (fp32 where the CPU has no bf16 kernel): bias and ReLU still apply to the fp32
// accumulator, as the separate kernels did.
TEST(TrainingPasses, Bf16ConvFoldsItsBiasAndReluAndKeepsEveryGradient) {
  expect_conv_folds_exactly({.precision = Precision::bf16});
}

TEST(TrainingPasses, ConvsReadElsewhereOrPlacedApartStay) {
  ConvNet read;
  build(read);
  std::vector<Output> outputs = {read.grads[1], read.conv1};
  Graph rewritten = rewrite_training_graph(read.g, outputs);
  EXPECT_EQ(count(rewritten, op_names::kConv2D), 1);
  EXPECT_EQ(rewritten.node(outputs[1].node).op, op_names::kConv2D);
  ConvNet apart;
  build(apart, "/cpu:1");
  outputs = {apart.grads[1]};
  rewritten = rewrite_training_graph(apart.g, outputs);
  EXPECT_EQ(count(rewritten, op_names::kConv2D), 1);
  EXPECT_EQ(count(rewritten, op_names::kBiasAddRelu), 1);
}

// A first layer as Deep-MNIST's: max_pool(relu(conv(a, w1) + b1)) on a single-channel image,
// then a dense layer; the loss is sum(dense * v), the gradients those of w1, b1 and w2 (not of
// the image). With `pool_device`, the pool is asked to run elsewhere than the conv.
struct FirstLayerNet {
  Graph g;
  std::vector<Output> feeds;
  Output loss;
  std::vector<Output> grads;
};

void build(FirstLayerNet& m, const std::string& pool_device = "", bool image_gradient = false) {
  auto feed = [&](Shape shape, const std::string& name) {
    m.feeds.push_back(ops::placeholder(m.g, DType::f32, std::move(shape), name));
    return m.feeds.back();
  };
  Output a = feed({3, 12, 10, 1}, "a");
  Output h = ops::conv2d(m.g, a, feed({5, 5, 1, 17}, "w1"), {.padding = "SAME"}, "conv1");
  h = ops::relu(m.g, ops::bias_add(m.g, h, feed({17}, "b1"), "bias1"), "relu1");
  h = ops::max_pool(m.g, h, {}, "pool1");
  m.g.mutable_node(h.node).requested_device = pool_device;
  h = ops::reshape(m.g, h, {3, 6 * 5 * 17});
  Output dense = ops::matmul(m.g, h, feed({6 * 5 * 17, 4}, "w2"));
  m.loss = ops::reduce_sum(m.g, ops::mul(m.g, dense, feed({3, 4}, "v")), {0, 1});
  std::vector<Output> wrt = {m.feeds[1], m.feeds[2], m.feeds[3]};
  if (image_gradient) wrt.push_back(m.feeds[0]);
  m.grads = gradients(m.g, m.loss, wrt);
}

// The conv and its pool run as one node, named as the conv, the pool's gradient and the conv's
// filter and bias gradients as another, named as the filter gradient: bit for bit the results
// of the nodes they replace.
TEST(TrainingPasses, SingleChannelConvFusesIntoItsPoolAndKeepsEveryGradient) {
  FirstLayerNet m;
  build(m);
  std::vector<Output> outputs = m.feeds;
  outputs.push_back(m.loss);
  outputs.insert(outputs.end(), m.grads.begin(), m.grads.end());
  const Graph rewritten = rewrite_training_graph(m.g, outputs);
  ASSERT_EQ(count(rewritten, op_names::kFusedConv2DMaxPool), 1);
  EXPECT_EQ(count(rewritten, op_names::kFusedConv2D), 0);
  EXPECT_EQ(count(rewritten, op_names::kMaxPoolWindowArgmax), 0);
  const Node& fused = rewritten.node(rewritten.id_of("conv1"));
  EXPECT_EQ(fused.op, op_names::kFusedConv2DMaxPool);
  EXPECT_EQ(fused.attrs.get_string("activation"), "relu");
  EXPECT_TRUE(fused.attrs.get_bool("relu"));
  EXPECT_EQ(fused.attrs.get_ints("pool_ksize"), (std::vector<int64_t>{2, 2}));
  ASSERT_EQ(count(rewritten, op_names::kFusedConv2DMaxPoolGrad), 1);
  EXPECT_EQ(count(rewritten, op_names::kConv2DBackpropFilter), 0);
  EXPECT_EQ(count(rewritten, op_names::kBiasAddGrad), 0);
  for (const Node& n : rewritten.nodes())
    if (n.op == op_names::kFusedConv2DMaxPoolGrad) {
      EXPECT_EQ(n.inputs[2], (Output{fused.id, 1}));
      EXPECT_EQ(outputs[m.feeds.size() + 1], (Output{n.id, 0}));      // w1's gradient
      EXPECT_EQ(outputs[m.feeds.size() + 1 + 1], (Output{n.id, 1}));  // b1's gradient
    }
  // Against the graph with every rewrite but this one (the unfused conv takes the same kernel).
  std::vector<Output> unfused_outputs = m.feeds;
  unfused_outputs.push_back(m.loss);
  unfused_outputs.insert(unfused_outputs.end(), m.grads.begin(), m.grads.end());
  Graph unfused = route_max_pool_grads_by_window_argmax(
      fold_relu_grad_into_max_pool_grad(m.g, unfused_outputs), unfused_outputs);
  unfused = fold_bias_into_conv(fold_relu_into_bias_add(unfused, unfused_outputs), unfused_outputs);
  ASSERT_EQ(count(unfused, op_names::kFusedConv2D), 1);
  ASSERT_EQ(count(unfused, op_names::kMaxPoolWindowArgmax), 1);
  const size_t feeds = m.feeds.size();
  auto fetched = [&](const std::vector<Output>& o) {
    return std::vector<Output>(o.begin() + static_cast<std::ptrdiff_t>(feeds), o.end());
  };
  auto fed = [&](const std::vector<Output>& o) {
    return std::vector<Output>(o.begin(), o.begin() + static_cast<std::ptrdiff_t>(feeds));
  };
  const std::vector<Tensor> want = run(unfused, fed(unfused_outputs), fetched(unfused_outputs));
  const std::vector<Tensor> got = run(rewritten, fed(outputs), fetched(outputs));
  for (size_t i = 0; i < want.size(); ++i)
    testing::expect_close(want[i], got[i], {.rtol = 0.0, .atol = 0.0},
                          "output " + std::to_string(i));
}

TEST(TrainingPasses, PoolAskedToRunApartFromItsConvStays) {
  FirstLayerNet m;
  build(m, "/cpu:1");
  std::vector<Output> outputs = {m.grads[1]};
  const Graph rewritten = rewrite_training_graph(m.g, outputs);
  EXPECT_EQ(count(rewritten, op_names::kFusedConv2DMaxPool), 0);
  EXPECT_EQ(count(rewritten, op_names::kFusedConv2D), 1);
  EXPECT_EQ(rewritten.node(rewritten.id_of("pool1")).requested_device, "/cpu:1");
}

// The image's gradient reads the pool's gradient too, which then stays and runs; the conv still
// pools its own output.
TEST(TrainingPasses, PoolGradientTheImageGradientReadsStays) {
  FirstLayerNet m;
  build(m, "", true);
  std::vector<Output> outputs = m.grads;
  const Graph rewritten = rewrite_training_graph(m.g, outputs);
  EXPECT_EQ(count(rewritten, op_names::kFusedConv2DMaxPool), 1);
  EXPECT_EQ(count(rewritten, op_names::kFusedConv2DMaxPoolGrad), 0);
  EXPECT_EQ(count(rewritten, op_names::kMaxPoolGradWindowArgmax), 1);
  EXPECT_EQ(count(rewritten, op_names::kConv2DBackpropFilter), 1);
}

// relu(bn2(relu6(bn1(a)))), each BatchNorm with fed gamma, beta and moving statistics; the loss
// is sum(y * v), the gradients those of a and of both gammas and betas. The first BatchNorm's
// statistics are fetched too, as training fetches them for the moving averages.
struct BatchNormNet {
  Graph g;
  std::vector<Output> feeds;
  Output loss;
  std::vector<Output> grads, statistics;
};

void build(BatchNormNet& m, const std::string& act2_device = "") {
  auto feed = [&](Shape shape, const std::string& name) {
    m.feeds.push_back(ops::placeholder(m.g, DType::f32, std::move(shape), name));
    return m.feeds.back();
  };
  Output a = feed({2, 5, 6, 8}, "a");
  std::vector<Output> wrt = {a};
  Output h = a;
  for (int layer : {1, 2}) {
    const std::string n = std::to_string(layer);
    Output gamma = feed({8}, "gamma" + n), beta = feed({8}, "beta" + n);
    Output moving_mean = feed({8}, "moving_mean" + n), moving_var = feed({8}, "moving_var" + n);
    h = ops::batch_norm(m.g, h, gamma, beta, moving_mean, moving_var, 1e-3, "bn" + n);
    if (layer == 1) m.statistics = {{h.node, 1}, {h.node, 2}};
    h = layer == 1 ? ops::relu6(m.g, h, "act1") : ops::relu(m.g, h, "act2");
    if (layer == 2) m.g.mutable_node(h.node).requested_device = act2_device;
    wrt.push_back(gamma);
    wrt.push_back(beta);
  }
  m.loss = ops::reduce_sum(m.g, ops::mul(m.g, h, feed({2, 5, 6, 8}, "v")), {0, 1, 2, 3});
  m.grads = gradients(m.g, m.loss, wrt);
}

// Fed on a grid of 0.25 (ties at 0 after normalizing are possible), the first gamma large enough
// for Relu6 to clamp above, the moving variances positive.
std::vector<Tensor> run_batch_norm_net(const Graph& g, const std::vector<Output>& feeds,
                                       const std::vector<Output>& fetches, bool training) {
  Feeds values;
  uint32_t seed = 11;
  for (const Output& f : feeds) {
    const std::string& name = g.node(f.node).name;
    Tensor t = testing::random_tensor(g.type(f).shape, seed++);
    for (int64_t i = 0; i < t.numel(); ++i) {
      float& v = t.data<float>()[i];
      v = std::round(v * 4.0f) / 4.0f;
      if (name == "gamma1") v *= 8.0f;
      if (name.rfind("moving_var", 0) == 0) v = std::abs(v) + 0.5f;
    }
    values.emplace_back(f, t);
  }
  Session session(g);
  std::vector<Tensor> got = session.run(values, fetches, training);
  for (Tensor& t : got) t = t.clone();
  return got;
}

// Both activations fold into their BatchNorms, named as the BatchNorms; their gradients read
// the fused outputs; the loss, every gradient and the fetched statistics stay bit for bit, in
// training (batch statistics) and in inference (moving ones).
TEST(TrainingPasses, ActivationsFoldIntoTheirBatchNormsAndKeepEveryGradient) {
  BatchNormNet m;
  build(m);
  std::vector<Output> outputs = m.feeds;
  outputs.push_back(m.loss);
  outputs.insert(outputs.end(), m.grads.begin(), m.grads.end());
  outputs.insert(outputs.end(), m.statistics.begin(), m.statistics.end());
  const Graph rewritten = rewrite_training_graph(m.g, outputs);
  EXPECT_EQ(count(rewritten, op_names::kBatchNorm), 0);
  EXPECT_EQ(count(rewritten, op_names::kRelu), 0);
  EXPECT_EQ(count(rewritten, op_names::kRelu6), 0);
  ASSERT_EQ(count(rewritten, op_names::kFusedBatchNorm), 2);
  const Node& bn1 = rewritten.node(rewritten.id_of("bn1"));
  EXPECT_EQ(bn1.attrs.get_string("activation"), "relu6");
  EXPECT_EQ(rewritten.node(rewritten.id_of("bn2")).attrs.get_string("activation"), "relu");
  EXPECT_EQ(outputs[outputs.size() - 2], (Output{bn1.id, 1}));
  EXPECT_EQ(outputs[outputs.size() - 1], (Output{bn1.id, 2}));
  // The activations' gradients fold into the BatchNorms' gradients, gated by the fused outputs.
  EXPECT_EQ(count(rewritten, op_names::kReluGrad), 0);
  EXPECT_EQ(count(rewritten, op_names::kRelu6Grad), 0);
  EXPECT_EQ(count(rewritten, op_names::kBatchNormGrad), 0);
  std::vector<std::string> gate_activations;
  for (const Node& n : rewritten.nodes())
    if (n.op == op_names::kFusedBatchNormGrad) {
      EXPECT_EQ(rewritten.node(n.inputs[5].node).op, op_names::kFusedBatchNorm);
      gate_activations.push_back(n.attrs.get_string("activation"));
    }
  std::sort(gate_activations.begin(), gate_activations.end());
  EXPECT_EQ(gate_activations, (std::vector<std::string>{"relu", "relu6"}));
  const auto feeds = static_cast<std::ptrdiff_t>(m.feeds.size());
  std::vector<Output> fetches(outputs.begin() + feeds, outputs.end());
  std::vector<Output> want_fetches = {m.loss};
  want_fetches.insert(want_fetches.end(), m.grads.begin(), m.grads.end());
  want_fetches.insert(want_fetches.end(), m.statistics.begin(), m.statistics.end());
  for (const bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "inference");
    const std::vector<Tensor> want = run_batch_norm_net(m.g, m.feeds, want_fetches, training);
    const std::vector<Tensor> got =
        run_batch_norm_net(rewritten, std::vector<Output>(outputs.begin(), outputs.begin() + feeds),
                           fetches, training);
    for (size_t i = 0; i < want.size(); ++i)
      testing::expect_close(want[i], got[i], {.rtol = 0.0, .atol = 0.0},
                            "output " + std::to_string(i));
  }
}

TEST(TrainingPasses, BatchNormReadElsewhereOrPlacedApartStays) {
  BatchNormNet read;
  build(read);
  std::vector<Output> outputs = {read.grads[1], Output{read.g.id_of("bn1"), 0}};
  Graph rewritten = rewrite_training_graph(read.g, outputs);
  EXPECT_EQ(count(rewritten, op_names::kBatchNorm), 1);
  EXPECT_EQ(count(rewritten, op_names::kRelu6), 1);
  EXPECT_EQ(count(rewritten, op_names::kFusedBatchNorm), 1);
  EXPECT_EQ(rewritten.node(outputs[1].node).op, op_names::kBatchNorm);
  BatchNormNet apart;
  build(apart, "/cpu:1");
  outputs = {apart.grads[1]};
  rewritten = rewrite_training_graph(apart.g, outputs);
  EXPECT_EQ(count(rewritten, op_names::kBatchNorm), 1);
  EXPECT_EQ(count(rewritten, op_names::kRelu), 1);
  EXPECT_EQ(rewritten.node(rewritten.id_of("act2")).requested_device, "/cpu:1");
  // The Relu's gradient, asked to run with the Relu, stays apart from the BatchNorm's gradient.
  EXPECT_EQ(count(rewritten, op_names::kReluGrad), 1);
  EXPECT_EQ(count(rewritten, op_names::kBatchNormGrad), 1);
  EXPECT_EQ(count(rewritten, op_names::kFusedBatchNormGrad), 1);
}

// An activation's gradient that is fetched, or read by more than its BatchNorm's gradient, stays.
TEST(TrainingPasses, ActivationGradReadElsewhereStays) {
  BatchNormNet m;
  build(m);
  const Node* relu6_grad = nullptr;
  for (const Node& n : m.g.nodes())
    if (n.op == op_names::kRelu6Grad) relu6_grad = &n;
  ASSERT_NE(relu6_grad, nullptr);
  std::vector<Output> outputs = {m.grads[0], Output{relu6_grad->id, 0}};
  Graph rewritten = rewrite_training_graph(m.g, outputs);
  EXPECT_EQ(count(rewritten, op_names::kRelu6Grad), 1);
  EXPECT_EQ(count(rewritten, op_names::kBatchNormGrad), 1);
  EXPECT_EQ(count(rewritten, op_names::kFusedBatchNormGrad), 1);
  EXPECT_EQ(rewritten.node(outputs[1].node).op, op_names::kRelu6Grad);
  Output doubled = ops::add(m.g, Output{relu6_grad->id, 0}, Output{relu6_grad->id, 0});
  outputs = {m.grads[0], doubled};
  rewritten = rewrite_training_graph(m.g, outputs);
  EXPECT_EQ(count(rewritten, op_names::kRelu6Grad), 1);
  EXPECT_EQ(count(rewritten, op_names::kFusedBatchNormGrad), 1);
}

}  // namespace
}  // namespace sf
