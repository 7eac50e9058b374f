// Pow, Sqrt, Exp, Log, Erf, Clip, LeakyRelu, PRelu, HardSigmoid and HardSwish: forward values
// against their formulas, shape errors, and finite-difference gradients away from the kinks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::expect_gradients_match;
using testing::random_tensor;
using testing::run_once;

std::vector<float> values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

using testing::error_of;

// Random values in [lo, hi) kept at least 0.05 from every kink, so central differences
// (step 0.01) never straddle one.
Tensor away_from(Shape shape, uint32_t seed, float lo, float hi,
                 std::initializer_list<float> kinks) {
  Tensor t = random_tensor(std::move(shape), seed, lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float& v = t.data<float>()[i];
    for (float kink : kinks)
      if (std::abs(v - kink) < 0.05f) v = kink + (v < kink ? -0.05f : 0.05f);
  }
  return t;
}

// Runs a one-input op built by `fn` on x and compares with `want` applied elementwise.
void expect_unary(const std::function<Output(Graph&, Output)>& fn, const Tensor& x,
                  const std::function<double(double)>& want) {
  std::vector<float> y =
      values(run_once([&](Graph& g, const std::vector<Output>& in) { return fn(g, in[0]); }, {x}));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.data<float>()[i];
    EXPECT_NEAR(y[static_cast<size_t>(i)], want(v), 1e-5 * std::max(1.0, std::abs(want(v))))
        << "x = " << v;
  }
}

void expect_near(const Tensor& t, const std::vector<float>& want) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.data<float>()[i], want[i], 1e-6) << i;
}

TEST(OpsPointwiseTest, UnaryForwardValues) {
  Tensor x = Tensor::from_vector<float>({8}, {-5, -3, -2.5f, -0.5f, 0, 0.25f, 2, 4});
  Tensor pos = Tensor::from_vector<float>({4}, {0.25f, 1, 2, 9});
  expect_unary([](Graph& g, Output v) { return ops::sqrt(g, v); }, pos,
               [](double v) { return std::sqrt(v); });
  expect_unary([](Graph& g, Output v) { return ops::log(g, v); }, pos,
               [](double v) { return std::log(v); });
  expect_unary([](Graph& g, Output v) { return ops::exp(g, v); }, x,
               [](double v) { return std::exp(v); });
  expect_unary([](Graph& g, Output v) { return ops::clip(g, v, -1, 2); }, x,
               [](double v) { return std::clamp(v, -1.0, 2.0); });
  expect_unary([](Graph& g, Output v) { return ops::clip(g, v); }, x, [](double v) { return v; });
  expect_unary([](Graph& g, Output v) { return ops::leaky_relu(g, v); }, x,
               [](double v) { return v >= 0 ? v : 0.01 * v; });
  expect_unary([](Graph& g, Output v) { return ops::leaky_relu(g, v, 0.2); }, x,
               [](double v) { return v >= 0 ? v : 0.2 * v; });
  expect_near(
      run_once([](Graph& g, const std::vector<Output>& in) { return ops::hard_sigmoid(g, in[0]); },
               {x}),
      {0, 0, 0, 0.4f, 0.5f, 0.55f, 0.9f, 1});
  expect_unary([](Graph& g, Output v) { return ops::hard_sigmoid(g, v, 0.5, 0.25); }, x,
               [](double v) { return std::clamp(0.5 * v + 0.25, 0.0, 1.0); });
  // HardSwish: 0 below -3, x above 3, x * (x + 3) / 6 between.
  expect_near(
      run_once([](Graph& g, const std::vector<Output>& in) { return ops::hard_swish(g, in[0]); },
               {x}),
      {0, 0, -2.5f * 0.5f / 6, -0.5f * 2.5f / 6, 0, 0.25f * 3.25f / 6, 2 * 5.0f / 6, 4});
}

TEST(OpsPointwiseTest, PowBroadcasts) {
  Tensor a = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 9, 0.5f});
  Tensor b = Tensor::from_vector<float>({3}, {2, 0.5f, -1});
  Tensor y = run_once(
      [](Graph& g, const std::vector<Output>& in) { return ops::pow(g, in[0], in[1]); }, {a, b});
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  expect_near(y, {1, std::sqrt(2.0f), 1 / 3.0f, 16, 3, 2});
}

// ONNX Pow on an integer base: integer exponents exactly with wrap-around, float exponents
// truncated toward zero and saturated; the result keeps the base's type.
TEST(OpsPointwiseTest, IntegerPow) {
  auto pow_of = [](const Tensor& a, const Tensor& b) {
    return run_once([](Graph& g, const std::vector<Output>& in) { return ops::pow(g, in[0], in[1]); },
                    {a, b});
  };
  Tensor base = Tensor::from_vector<int64_t>({6}, {2, -3, 1, -1, 5, 3});
  Tensor y = pow_of(base, Tensor::from_vector<int64_t>({6}, {10, 3, -4, -3, -1, 40}));
  ASSERT_EQ(y.dtype(), DType::i64);
  const int64_t wrapped = static_cast<int64_t>(12157665459056928801ull);  // 3^40 mod 2^64
  EXPECT_EQ(std::vector<int64_t>(y.data<int64_t>(), y.data<int64_t>() + 6),
            (std::vector<int64_t>{1024, -27, 1, -1, 0, wrapped}));
  Tensor z = pow_of(Tensor::from_vector<int32_t>({4}, {2, 9, -8, 2}),
                    Tensor::from_vector<float>({4}, {0.5f, 0.5f, 1 / 3.0f, 40.0f}));
  ASSERT_EQ(z.dtype(), DType::i32);
  // sqrt(2) truncates to 1; (-8)^(1/3) is NaN in real arithmetic, which saturates to 0.
  EXPECT_EQ(std::vector<int32_t>(z.data<int32_t>(), z.data<int32_t>() + 4),
            (std::vector<int32_t>{1, 3, 0, 2147483647}));
}

TEST(OpsPointwiseTest, IntegerClipRoundsBoundsInward) {
  Tensor x = Tensor::from_vector<int8_t>({5}, {-128, -3, 0, 3, 127});
  Tensor y = run_once(
      [](Graph& g, const std::vector<Output>& in) { return ops::clip(g, in[0], -2.5f, 2.5f); },
      {x});
  ASSERT_EQ(y.dtype(), DType::i8);
  EXPECT_EQ(std::vector<int8_t>(y.data<int8_t>(), y.data<int8_t>() + 5),
            (std::vector<int8_t>{-2, -2, 0, 2, 2}));
}

TEST(OpsPointwiseTest, PReluBroadcastsSlope) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {-1, 2, -3, 4, -5, 0});
  Tensor slope = Tensor::from_vector<float>({3}, {0.5f, 0.25f, 2});
  Tensor y =
      run_once([](Graph& g, const std::vector<Output>& in) { return ops::prelu(g, in[0], in[1]); },
               {x, slope});
  EXPECT_EQ(values(y), (std::vector<float>{-0.5f, 2, -6, 4, -1.25f, 0}));
}

TEST(OpsPointwiseTest, ShapeErrorsNameTheNode) {
  EXPECT_EQ(error_of([](Graph& g) {
              ops::pow(g, ops::placeholder(g, DType::f32, {2, 3}),
                       ops::placeholder(g, DType::f32, {2}), "p");
            }),
            "node 'p' (Pow): shapes do not broadcast: a [2,3] vs b [2]");
  // The slope broadcasts to x, never the other way round.
  EXPECT_EQ(error_of([](Graph& g) {
              ops::prelu(g, ops::placeholder(g, DType::f32, {3}),
                         ops::placeholder(g, DType::f32, {2, 3}), "pr");
            }),
            "node 'pr' (PRelu): slope [2,3] does not broadcast to x [3]");
  EXPECT_EQ(error_of([](Graph& g) { ops::sqrt(g, ops::placeholder(g, DType::i32, {3}), "s"); }),
            "node 's' (Sqrt): input 'x' must be f32, got i32");
}

TEST(OpsPointwiseTest, SmoothGradients) {
  auto pow = [](Graph& g, const std::vector<Output>& in) { return ops::pow(g, in[0], in[1]); };
  expect_gradients_match(
      pow, {random_tensor({2, 3}, 1, 0.5f, 2), random_tensor({3}, 2, -1.5f, 1.5f)}, 3);
  expect_gradients_match(
      pow, {random_tensor({3}, 4, 0.5f, 2), random_tensor({2, 3}, 5, -1.5f, 1.5f)}, 6);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::sqrt(g, in[0]); },
      {random_tensor({2, 3}, 7, 0.5f, 2)}, 8);
  expect_gradients_match([](Graph& g, const std::vector<Output>& in) { return ops::exp(g, in[0]); },
                         {random_tensor({2, 3}, 9, -1, 1)}, 10);
  expect_gradients_match([](Graph& g, const std::vector<Output>& in) { return ops::log(g, in[0]); },
                         {random_tensor({2, 3}, 11, 0.5f, 2)}, 12);
  expect_gradients_match([](Graph& g, const std::vector<Output>& in) { return ops::erf(g, in[0]); },
                         {random_tensor({2, 3}, 13, -2, 2)}, 14);
}

TEST(OpsPointwiseTest, ErfMatchesTheErrorFunction) {
  expect_unary([](Graph& g, Output x) { return ops::erf(g, x); },
               Tensor::from_vector<float>({5}, {-3, -0.5f, 0, 0.5f, 3}),
               [](double x) { return std::erf(x); });
}

TEST(OpsPointwiseTest, PiecewiseGradients) {
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::clip(g, in[0], -0.5, 0.5); },
      {away_from({3, 4}, 13, -1, 1, {-0.5f, 0.5f})}, 14);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::leaky_relu(g, in[0], 0.1); },
      {away_from({3, 4}, 15, -1, 1, {0})}, 16);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::hard_sigmoid(g, in[0]); },
      {away_from({3, 4}, 17, -4, 4, {-2.5f, 2.5f})}, 18);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::hard_swish(g, in[0]); },
      {away_from({3, 4}, 19, -4, 4, {-3, 3})}, 20);
  auto prelu = [](Graph& g, const std::vector<Output>& in) { return ops::prelu(g, in[0], in[1]); };
  expect_gradients_match(prelu, {away_from({2, 3}, 21, -1, 1, {0}), random_tensor({3}, 22, 0, 1)},
                         23);
  expect_gradients_match(prelu,
                         {away_from({2, 3}, 24, -1, 1, {0}), random_tensor({2, 3}, 25, 0, 1)}, 26);
  expect_gradients_match(prelu, {away_from({2, 3}, 27, -1, 1, {0}), random_tensor({1}, 28, 0, 1)},
                         29);
}

}  // namespace
}  // namespace sf
