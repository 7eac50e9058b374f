#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::expect_gradients_match;
using testing::GradCheckOptions;
using testing::random_tensor;

// All outputs of the built node, run once.
std::vector<Tensor> run_all(const testing::BuildFn& build, const std::vector<Tensor>& inputs,
                            bool training, uint64_t seed = 7, const std::string& impl = "") {
  Graph g;
  std::vector<Output> in;
  for (size_t i = 0; i < inputs.size(); ++i)
    in.push_back(
        ops::placeholder(g, inputs[i].dtype(), inputs[i].shape(), "input" + std::to_string(i)));
  Output y = build(g, in);
  std::vector<Output> fetches;
  for (int i = 0; i < static_cast<int>(g.node(y.node).outputs.size()); ++i)
    fetches.push_back({y.node, i});
  Feeds feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds.emplace_back(in[i], inputs[i]);
  Session session(g, SessionOptions{.kernel_impl = impl, .seed = seed});
  std::vector<Tensor> out;
  for (const Tensor& t : session.run(feeds, fetches, training)) out.push_back(t.clone());
  return out;
}

std::vector<float> values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

Output bn(Graph& g, const std::vector<Output>& in) {
  return ops::batch_norm(g, in[0], in[1], in[2], in[3], in[4], 1e-3, "bn");
}

TEST(OpsNormTest, BatchNormTrainingUsesBatchStatistics) {
  Tensor x = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 6});
  Tensor gamma = Tensor::from_vector<float>({2}, {1, 2});
  Tensor beta = Tensor::from_vector<float>({2}, {0, 1});
  Tensor moving_mean = Tensor::from_vector<float>({2}, {0, 0});
  Tensor moving_var = Tensor::from_vector<float>({2}, {1, 1});
  std::vector<Tensor> out = run_all(bn, {x, gamma, beta, moving_mean, moving_var}, true);
  EXPECT_EQ(values(out[1]), (std::vector<float>{2, 4}));
  EXPECT_EQ(values(out[2]), (std::vector<float>{1, 4}));  // biased: divided by N
  const double a = 1 / std::sqrt(1 + 1e-3), b = 2 / std::sqrt(4 + 1e-3);
  std::vector<float> y = values(out[0]);
  EXPECT_NEAR(y[0], -a, 1e-6);
  EXPECT_NEAR(y[1], -2 * b + 1, 1e-6);
  EXPECT_NEAR(y[2], a, 1e-6);
  EXPECT_NEAR(y[3], 2 * b + 1, 1e-6);

  // Not training: the moving statistics are used and passed through.
  std::vector<Tensor> infer = run_all(bn, {x, gamma, beta, moving_mean, moving_var}, false);
  EXPECT_EQ(values(infer[1]), (std::vector<float>{0, 0}));
  EXPECT_EQ(values(infer[2]), (std::vector<float>{1, 1}));
  EXPECT_NEAR(infer[0].data<float>()[3], 2 * 6 / std::sqrt(1 + 1e-3) + 1, 1e-5);
}

TEST(OpsNormTest, BatchNormNormalisesTheLastAxisOfNhwc) {
  Tensor x = random_tensor({2, 3, 3, 4}, 1, -3, 5);
  Tensor ones = Tensor::from_vector<float>({4}, {1, 1, 1, 1});
  Tensor zeros(DType::f32, {4});
  std::vector<Tensor> out = run_all(bn, {x, ones, zeros, zeros, ones}, true);
  for (int c = 0; c < 4; ++c) {
    double sum = 0, sq = 0;
    for (int i = 0; i < 18; ++i) {
      double v = out[0].data<float>()[i * 4 + c];
      sum += v;
      sq += v * v;
    }
    EXPECT_NEAR(sum / 18, 0, 1e-5);
    EXPECT_NEAR(sq / 18, 1, 1e-2);  // var / (var + eps)
  }
}

TEST(OpsNormTest, BatchNormShapeErrors) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2, 4}, "x");
  Output c3 = ops::placeholder(g, DType::f32, {3}, "c3");
  Output c4 = ops::placeholder(g, DType::f32, {4}, "c4");
  Output v = ops::placeholder(g, DType::f32, {4}, "v");
  try {
    ops::batch_norm(g, x, c3, c4, c4, c4, 1e-3, "bn1");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "node 'bn1' (BatchNorm): gamma [3] vs x [2,4]: must be [4] (the last axis)");
  }
  try {
    ops::batch_norm(g, v, c4, c4, c4, c4, 1e-3, "bn2");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(
        e.what(),
        "node 'bn2' (BatchNorm): x must have rank 2 or more ([N,C] or [N,H,W,C]), got [4]");
  }
}

// Gradients flow to x, gamma and beta; the moving statistics enter as constants.
testing::BuildFn bn_with_moving_stats(int64_t channels) {
  Tensor mean = random_tensor({channels}, 50);
  Tensor var = random_tensor({channels}, 51, 0.5f, 2.0f);
  return [mean, var](Graph& g, const std::vector<Output>& in) {
    return ops::batch_norm(g, in[0], in[1], in[2], ops::constant(g, mean), ops::constant(g, var));
  };
}

TEST(OpsNormTest, BatchNormGradients) {
  GradCheckOptions training{.training = true};
  expect_gradients_match(bn_with_moving_stats(3),
                         {random_tensor({4, 3}, 60, -2, 2), random_tensor({3}, 61, 0.5f, 1.5f),
                          random_tensor({3}, 62)},
                         63, training);
  expect_gradients_match(bn_with_moving_stats(3),
                         {random_tensor({2, 2, 2, 3}, 64, -2, 2),
                          random_tensor({3}, 65, 0.5f, 1.5f), random_tensor({3}, 66)},
                         67, training);
  // Inference mode: the moving statistics are constants.
  expect_gradients_match(
      bn_with_moving_stats(2),
      {random_tensor({3, 2}, 68), random_tensor({2}, 69), random_tensor({2}, 70)}, 71);
}

// The float_loops BatchNorm and BatchNormGrad (float sums over blocks of rows, totals in double)
// against the reference's double sums, in training and inference, on shapes around a vector of
// 16 channels, a block of 256 rows and the size that splits over threads, with x off zero so
// that the mean matters.
TEST(OpsNormTest, BatchNormKernelsMatchTheReference) {
  const std::vector<Shape> shapes = {{1, 1}, {5, 3}, {300, 17}, {2, 13, 11, 35}, {8, 28, 28, 64}};
  uint32_t seed = 80;
  for (const Shape& shape : shapes)
    for (const bool training : {true, false}) {
      SCOPED_TRACE(shape_str(shape) + (training ? " training" : " inference"));
      const Shape channels = {shape.back()};
      const Tensor x = random_tensor(shape, ++seed, 3, 7);
      const Tensor dy = random_tensor(shape, ++seed, -1, 1);
      const Tensor gamma = random_tensor(channels, ++seed, 0.5f, 1.5f);
      const Tensor beta = random_tensor(channels, ++seed);
      const Tensor mean = random_tensor(channels, ++seed, 3, 7);
      const Tensor var = random_tensor(channels, ++seed, 0.5f, 2.0f);
      auto grad = [](Graph& g, const std::vector<Output>& in) {
        return Output{g.add_node("BatchNormGrad", in, {{"epsilon", 1e-3}}, "bn_grad"), 0};
      };
      const std::vector<std::pair<testing::BuildFn, std::vector<Tensor>>> nodes = {
          {bn, {x, gamma, beta, mean, var}}, {grad, {dy, x, gamma, mean, var}}};
      for (const auto& [build, inputs] : nodes) {
        const std::vector<Tensor> want = run_all(build, inputs, training, 7, "reference");
        const std::vector<Tensor> got = run_all(build, inputs, training, 7, "float_loops");
        for (size_t k = 0; k < want.size(); ++k)
          testing::expect_close(want[k], got[k], {.rtol = 1e-4, .atol = 1e-4},
                                "output " + std::to_string(k));
      }
    }
}

// The fused BatchNorm ops' tests: shapes, per-channel inputs (gamma large enough for Relu6 to
// clamp above too), and every activation, kernel and mode.
const Shape kFusedShape = {2, 13, 11, 35};

struct ChannelInputs {
  Tensor gamma, beta, mean, var;
};

ChannelInputs channel_inputs() {
  const Shape channels = {kFusedShape.back()};
  return {random_tensor(channels, 91, 2.0f, 4.0f), random_tensor(channels, 92),
          random_tensor(channels, 93, 3, 7), random_tensor(channels, 94, 0.5f, 2.0f)};
}

void for_each_fused_case(const std::function<void(const std::string& activation,
                                                  const std::string& impl, bool training)>& check) {
  for (const char* activation : {"relu", "relu6"})
    for (const char* impl : {"reference", "float_loops"})
      for (const bool training : {true, false}) {
        SCOPED_TRACE(std::string(activation) + " " + impl + (training ? " training" : ""));
        check(activation, impl, training);
      }
}

// Output 0 of a node of `op` with epsilon 1e-3 and `activation`.
testing::BuildFn fused_node(const std::string& op, const std::string& activation) {
  return [op, activation](Graph& g, const std::vector<Output>& in) {
    return Output{g.add_node(op, in, {{"epsilon", 1e-3}, {"activation", activation}}, "fused"), 0};
  };
}

// FusedBatchNorm (made by the training passes) gives what BatchNorm and then its Relu or Relu6
// op give, bit for bit, on each BatchNorm kernel: the same statistics, and the activation as the
// op applies it (NaN included).
TEST(OpsNormTest, FusedBatchNormIsBatchNormAndThenItsActivation) {
  Tensor x = random_tensor(kFusedShape, 90, 3, 7);
  x.data<float>()[5] = std::nanf("");
  const ChannelInputs c = channel_inputs();
  for_each_fused_case([&](const std::string& activation, const std::string& impl, bool training) {
    const std::vector<Tensor> inputs = {x, c.gamma, c.beta, c.mean, c.var};
    const std::vector<Tensor> got =
        run_all(fused_node("FusedBatchNorm", activation), inputs, training, 7, impl);
    const std::vector<Tensor> normalized = run_all(bn, inputs, training, 7, impl);
    auto act = [activation](Graph& g, const std::vector<Output>& in) {
      return activation == "relu" ? ops::relu(g, in[0]) : ops::relu6(g, in[0]);
    };
    const std::vector<Tensor> want = run_all(act, {normalized[0]}, false);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_TRUE(std::isnan(got[0].data<float>()[5]) == (activation == "relu6"));
    testing::expect_close(want[0], got[0], {.rtol = 0.0, .atol = 0.0}, "y");
    testing::expect_close(normalized[1], got[1], {.rtol = 0.0, .atol = 0.0}, "mean");
    testing::expect_close(normalized[2], got[2], {.rtol = 0.0, .atol = 0.0}, "var");
    int clamped_above = 0;
    for (float v : values(got[0])) clamped_above += v == 6.0f;
    if (activation == "relu6") {
      EXPECT_GT(clamped_above, 0);
    }
  });
}

// FusedBatchNormGrad (made by the training passes) gives what the ReluGrad or Relu6Grad of dz
// and then BatchNormGrad give, bit for bit, on each kernel: activated values below 0, at 0 and
// -0, inside (0, 6), at 6, above it and NaN, with a NaN in dz where the gradient passes.
TEST(OpsNormTest, FusedBatchNormGradIsTheActivationGradAndThenBatchNormGrad) {
  Tensor dz = random_tensor(kFusedShape, 95);
  Tensor activated = random_tensor(kFusedShape, 96, -2.0f, 8.0f);
  const std::vector<float> specials = {0.0f, -0.0f, 6.0f, std::nanf(""), 6.5f, -1.0f, 1.0f};
  for (size_t i = 0; i < specials.size(); ++i) activated.data<float>()[i * 37] = specials[i];
  dz.data<float>()[6 * 37] = std::nanf("");  // where activated is 1: the NaN passes
  const Tensor x = random_tensor(kFusedShape, 90, 3, 7);
  const ChannelInputs c = channel_inputs();
  for_each_fused_case([&](const std::string& activation, const std::string& impl, bool training) {
    const std::vector<Tensor> got =
        run_all(fused_node("FusedBatchNormGrad", activation),
                {dz, x, c.gamma, c.mean, c.var, activated}, training, 7, impl);
    auto activation_grad = [activation](Graph& g, const std::vector<Output>& in) {
      return Output{g.add_node(activation == "relu" ? "ReluGrad" : "Relu6Grad", in, {}, "grad"), 0};
    };
    const std::vector<Tensor> dy = run_all(activation_grad, {dz, activated}, false);
    auto bn_grad = [](Graph& g, const std::vector<Output>& in) {
      return Output{g.add_node("BatchNormGrad", in, {{"epsilon", 1e-3}}, "bn_grad"), 0};
    };
    const std::vector<Tensor> want =
        run_all(bn_grad, {dy[0], x, c.gamma, c.mean, c.var}, training, 7, impl);
    ASSERT_EQ(got.size(), 3u);
    for (size_t k = 0; k < want.size(); ++k)
      testing::expect_close(want[k], got[k], {.rtol = 0.0, .atol = 0.0},
                            "output " + std::to_string(k));
    // The NaN passed into dx (in training through the sums, so every row of its channel).
    EXPECT_TRUE(std::isnan(got[0].data<float>()[6 * 37]));
  });
}

TEST(OpsNormTest, DropoutMasksOnlyWhenTraining) {
  auto drop = [](Graph& g, const std::vector<Output>& in) { return ops::dropout(g, in[0], 0.5); };
  Tensor x = random_tensor({1000}, 1, 1, 2);
  std::vector<Tensor> off = run_all(drop, {x}, false);
  EXPECT_EQ(values(off[0]), values(x));
  for (float m : values(off[1])) EXPECT_EQ(m, 1.0f);

  std::vector<Tensor> on = run_all(drop, {x}, true);
  int dropped = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    float m = on[1].data<float>()[i];
    ASSERT_TRUE(m == 0.0f || m == 2.0f) << m;
    dropped += m == 0.0f;
    EXPECT_EQ(on[0].data<float>()[i], x.data<float>()[i] * m);
  }
  EXPECT_GT(dropped, 400);
  EXPECT_LT(dropped, 600);
  // A fixed session seed gives the same mask; another seed a different one.
  EXPECT_EQ(values(run_all(drop, {x}, true)[1]), values(on[1]));
  EXPECT_NE(values(run_all(drop, {x}, true, 8)[1]), values(on[1]));
}

// The vectorized and threaded kernel draws the reference kernel's masks bit for bit: lengths
// around a vector of 16 and past the size that splits over threads.
TEST(OpsNormTest, DropoutKernelsDrawTheReferenceMasks) {
  for (double rate : {0.1, 0.5, 0.9}) {
    auto drop = [rate](Graph& g, const std::vector<Output>& in) {
      return ops::dropout(g, in[0], rate);
    };
    for (int64_t n : {1, 15, 16, 17, 1000, 300001}) {
      const Tensor x = random_tensor({n}, static_cast<uint32_t>(n), -2, 2);
      const std::vector<Tensor> reference = run_all(drop, {x}, true, 5, "reference");
      const std::vector<Tensor> loops = run_all(drop, {x}, true, 5, "float_loops");
      for (size_t k = 0; k < 2; ++k)
        ASSERT_EQ(std::memcmp(reference[k].raw(), loops[k].raw(), reference[k].bytes()), 0)
            << "rate " << rate << ", " << n << " elements, output " << k;
    }
  }
}

// The hashed draws behave as independent coin flips: the rate holds overall, at each position
// of a vector of 16, and for neighbours, and two steps' masks are independent of each other.
TEST(OpsNormTest, DropoutMasksAreIndependentDraws) {
  const int64_t n = 1 << 20;
  const double rate = 0.3;
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {n}, "x");
  Output y = ops::dropout(g, x, rate, "drop");
  Session session(g, SessionOptions{.seed = 11});
  const Tensor ones = random_tensor({n}, 1, 1, 1);
  const Tensor first = session.run({{x, ones}}, {{y.node, 1}}, true)[0].clone();
  const Tensor second = session.run({{x, ones}}, {{y.node, 1}}, true)[0].clone();
  const float* a = first.data<float>();
  const float* b = second.data<float>();
  int64_t dropped = 0, both_neighbours = 0, both_steps = 0;
  std::vector<int64_t> by_lane(16, 0);
  for (int64_t i = 0; i < n; ++i) {
    dropped += a[i] == 0.0f;
    by_lane[static_cast<size_t>(i % 16)] += a[i] == 0.0f;
    both_neighbours += i + 1 < n && a[i] == 0.0f && a[i + 1] == 0.0f;
    both_steps += a[i] == 0.0f && b[i] == 0.0f;
  }
  // Standard deviations: 0.00045 overall, 0.0018 per lane, 0.0003 for pairs.
  EXPECT_NEAR(static_cast<double>(dropped) / n, rate, 0.003);
  for (int64_t lane = 0; lane < 16; ++lane)
    EXPECT_NEAR(static_cast<double>(by_lane[static_cast<size_t>(lane)]) / (n / 16), rate, 0.01)
        << "lane " << lane;
  EXPECT_NEAR(static_cast<double>(both_neighbours) / n, rate * rate, 0.002);
  EXPECT_NEAR(static_cast<double>(both_steps) / n, rate * rate, 0.002);
}

TEST(OpsNormTest, DropoutRateErrors) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {4}, "x");
  try {
    ops::dropout(g, x, 1.0, "drop");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "node 'drop' (Dropout): rate must be in [0, 1), got 1");
  }
}

TEST(OpsNormTest, DropoutGradient) {
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::dropout(g, in[0], 0.3); },
      {random_tensor({3, 4}, 80)}, 81, GradCheckOptions{.training = true});
}

}  // namespace
}  // namespace sf
