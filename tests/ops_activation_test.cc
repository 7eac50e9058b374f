#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "ops/ops.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::expect_gradients_match;
using testing::random_tensor;
using testing::run_once;

using UnaryFn = Output (*)(Graph&, Output, const std::string&);

testing::BuildFn unary(UnaryFn fn) {
  return [fn](Graph& g, const std::vector<Output>& in) { return fn(g, in[0], ""); };
}

std::vector<float> values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Values in [lo, hi) that stay at least 0.1 away from the kinks at 0 and 6, so central
// differences never straddle one.
Tensor away_from_kinks(Shape shape, uint32_t seed, float lo, float hi) {
  Tensor t = random_tensor(std::move(shape), seed, lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float& v = t.data<float>()[i];
    for (float kink : {0.0f, 6.0f})
      if (std::abs(v - kink) < 0.1f) v = kink + (v < kink ? -0.1f : 0.1f);
  }
  return t;
}

TEST(OpsActivationTest, ForwardValues) {
  Tensor x = Tensor::from_vector<float>({5}, {-2, -0.5f, 0, 3, 8});
  EXPECT_EQ(values(run_once(unary(ops::relu), {x})), (std::vector<float>{0, 0, 0, 3, 8}));
  EXPECT_EQ(values(run_once(unary(ops::relu6), {x})), (std::vector<float>{0, 0, 0, 3, 6}));
  std::vector<float> s = values(run_once(unary(ops::sigmoid), {x}));
  std::vector<float> t = values(run_once(unary(ops::tanh), {x}));
  for (int i = 0; i < 5; ++i) {
    double v = x.data<float>()[i];
    EXPECT_NEAR(s[static_cast<size_t>(i)], 1 / (1 + std::exp(-v)), 1e-6);
    EXPECT_NEAR(t[static_cast<size_t>(i)], std::tanh(v), 1e-6);
  }
}

TEST(OpsActivationTest, SoftmaxIsStableAndNormalisedPerRow) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {1000, 1001, 1002, 0, std::log(2.0f), 0});
  std::vector<float> y = values(run_once(unary(ops::softmax), {x}));
  double e = std::exp(1.0);
  double z = 1 + e + e * e;
  EXPECT_NEAR(y[0], 1 / z, 1e-6);
  EXPECT_NEAR(y[1], e / z, 1e-6);
  EXPECT_NEAR(y[2], e * e / z, 1e-6);
  EXPECT_NEAR(y[3], 0.25, 1e-6);
  EXPECT_NEAR(y[4], 0.5, 1e-6);
  EXPECT_NEAR(y[5], 0.25, 1e-6);
}

TEST(OpsActivationTest, ShapeErrorsNameTheNode) {
  Graph g;
  Output i = ops::placeholder(g, DType::i32, {3}, "i");
  Output s = ops::placeholder(g, DType::f32, {}, "s");
  try {
    ops::relu(g, i, "act");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "node 'act' (Relu): input 'x' must be f32, got i32");
  }
  try {
    ops::softmax(g, s, "sm");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "node 'sm' (Softmax): x must have rank 1 or more, got a scalar");
  }
}

TEST(OpsActivationTest, Gradients) {
  expect_gradients_match(unary(ops::relu), {away_from_kinks({2, 3, 2}, 1, -2, 2)}, 2);
  expect_gradients_match(unary(ops::relu6), {away_from_kinks({2, 3, 2}, 3, -2, 8)}, 4);
  expect_gradients_match(unary(ops::sigmoid), {random_tensor({2, 3, 2}, 5, -3, 3)}, 6);
  expect_gradients_match(unary(ops::tanh), {random_tensor({2, 3, 2}, 7, -2, 2)}, 8);
  expect_gradients_match(unary(ops::softmax), {random_tensor({3, 4}, 9, -2, 2)}, 10);
  expect_gradients_match(unary(ops::softmax), {random_tensor({2, 2, 3}, 11, -2, 2)}, 12);
}

}  // namespace
}  // namespace sf
