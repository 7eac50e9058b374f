// The AMX kernels (impl "amx", bf16 sessions on CPUs with amx_bf16) against the fp32 reference
// kernels. The filter gradient on random shapes: strides, dilations, explicit and SAME
// padding, channel and output counts off the tile sizes, pixel counts off the chunk and
// tile-step sizes, batches large enough to split between threads. The weight-gradient MatMul
// (transpose_a) on sizes on and off the tile sizes. Inputs are rounded to bf16 to nearest
// even, so each equals the reference run on inputs rounded that way, to fp32 summation
// tolerance; against the unrounded reference a sum of K products of values in [-1, 1) is off by
// at most K * 2^-7.
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <string>

#include "cpu/cpu_features.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::random_tensor;
using testing::rounded_to_bf16;

struct FilterGradCase {
  Shape x, w;
  ops::Conv2DOptions options;
};

// The filter gradient of `c` for x and dy, and the impl that computed it.
std::pair<Tensor, std::string> filter_grad(const FilterGradCase& c, const Tensor& x,
                                           const Tensor& dy, SessionOptions options) {
  Graph g;
  Output xi = ops::placeholder(g, DType::f32, c.x);
  Output dyi = ops::placeholder(g, DType::f32, dy.shape());
  Attrs a{{"strides", c.options.strides}, {"padding", c.options.padding},
          {"pads", c.options.pads},       {"dilations", c.options.dilations},
          {"groups", c.options.groups},   {"filter_shape", c.w}};
  Output dw = g.add("Conv2DBackpropFilter", {xi, dyi}, a);
  Session session(g, options);
  session.set_profiling(true);
  Tensor out = session.run({{xi, x}, {dyi, dy}}, {dw})[0].clone();
  std::string impl;
  for (const NodeProfile& p : session.profile())
    if (p.op == "Conv2DBackpropFilter") impl = p.impl;
  return {out, impl};
}

Shape output_shape(const FilterGradCase& c) {
  Graph g;
  return g
      .type(ops::conv2d(g, ops::placeholder(g, DType::f32, c.x),
                        ops::placeholder(g, DType::f32, c.w), c.options))
      .shape;
}

TEST(AmxFilterGrad, EqualsTheReferenceOnBf16RoundedInputs) {
  if (!cpu_features().amx_bf16) GTEST_SKIP() << "no AMX on this CPU";
  const uint32_t seed = 23;
  std::mt19937 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<FilterGradCase> cases;
  // Deep-MNIST's conv2 at a batch of 6 (1,176 pixels: three chunks, two threads).
  ops::Conv2DOptions same;
  same.padding = "SAME";
  cases.push_back({{6, 14, 14, 32}, {5, 5, 32, 64}, same});
  // 1,200 taps x channels: chunks of 416 pixels, the last one ragged.
  cases.push_back({{8, 12, 12, 48}, {5, 5, 48, 20}, same});
  ops::Conv2DOptions strided;
  strided.strides = {2, 3};
  strided.padding = "EXPLICIT";
  strided.pads = {1, 0, 2, 1};
  cases.push_back({{3, 11, 13, 16}, {3, 3, 16, 24}, strided});
  for (int round = 0; round < 6; ++round) {
    ops::Conv2DOptions o;
    const int64_t k = pick(1, 4), stride = pick(1, 2), dilation = round % 3 == 2 ? 2 : 1;
    o.strides = {stride, stride};
    o.dilations = {dilation, dilation};
    if (round % 2 == 0) {
      o.padding = "SAME";
    } else {
      o.padding = "EXPLICIT";
      o.pads = {pick(0, 2), pick(0, 2), pick(0, 2), pick(0, 2)};
    }
    const int64_t h = pick((k - 1) * dilation + 1, 13), w = pick((k - 1) * dilation + 1, 13);
    cases.push_back({{pick(1, 9), h, w, pick(16, 40)}, {k, k, 0, pick(1, 70)}, o});
    cases.back().w[2] = cases.back().x[3];
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const FilterGradCase& c = cases[i];
    SCOPED_TRACE(fmt::format("seed {} case {}: x {} w {} strides {}x{} dilations {} padding {}",
                             seed, i, shape_str(c.x), shape_str(c.w), c.options.strides[0],
                             c.options.strides[1], c.options.dilations[0], c.options.padding));
    const Tensor x = random_tensor(c.x, 2 * static_cast<uint32_t>(i) + 1);
    const Tensor dy = random_tensor(output_shape(c), 2 * static_cast<uint32_t>(i) + 2);
    const auto [got, impl] = filter_grad(c, x, dy, SessionOptions{.precision = Precision::bf16});
    EXPECT_EQ(impl, "amx:bf16");
    const Tensor want = filter_grad(c, rounded_to_bf16(x), rounded_to_bf16(dy),
                                    SessionOptions{.kernel_impl = "reference"})
                            .first;
    const double pixels = static_cast<double>(num_elements(dy.shape()) / dy.shape().back());
    testing::expect_close(want, got, {.rtol = 1e-4, .atol = pixels * 1e-6},
                          "amx vs rounded reference");
    const Tensor exact = filter_grad(c, x, dy, SessionOptions{.kernel_impl = "reference"}).first;
    testing::expect_close(exact, got, {.rtol = 0.0, .atol = pixels / 128.0},
                          "amx vs fp32 reference");
  }
}

// fp32 sessions, and single-channel inputs (float_loops' kernel), do not take it.
TEST(AmxFilterGrad, OnlyBf16SessionsWithChannelsTakeIt) {
  ops::Conv2DOptions same;
  same.padding = "SAME";
  const FilterGradCase wide{{2, 8, 8, 32}, {3, 3, 32, 16}, same};
  const FilterGradCase single{{2, 8, 8, 1}, {3, 3, 1, 16}, same};
  auto impl_of = [](const FilterGradCase& c, Precision precision) {
    return filter_grad(c, random_tensor(c.x, 1), random_tensor(output_shape(c), 2),
                       SessionOptions{.precision = precision})
        .second;
  };
  EXPECT_EQ(impl_of(wide, Precision::fp32).find("amx"), std::string::npos);
  EXPECT_EQ(impl_of(single, Precision::bf16).find("amx"), std::string::npos);
  EXPECT_EQ(impl_of(wide, Precision::bf16) == "amx:bf16", cpu_features().amx_bf16);
}

// a^T b for a [k][m] and b [k][n], and the impl that computed it.
std::pair<Tensor, std::string> weight_grad(const Tensor& a, const Tensor& b,
                                           SessionOptions options) {
  Graph g;
  Output ai = ops::placeholder(g, DType::f32, a.shape());
  Output bi = ops::placeholder(g, DType::f32, b.shape());
  Output product = ops::matmul(g, ai, bi, /*transpose_a=*/true);
  Session session(g, options);
  session.set_profiling(true);
  Tensor out = session.run({{ai, a}, {bi, b}}, {product})[0].clone();
  std::string impl;
  for (const NodeProfile& p : session.profile())
    if (p.op == "MatMul") impl = p.impl;
  return {out, impl};
}

TEST(AmxWeightGrad, EqualsTheReferenceOnBf16RoundedInputs) {
  if (!cpu_features().amx_bf16) GTEST_SKIP() << "no AMX on this CPU";
  const uint32_t seed = 29;
  std::mt19937 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  // {k, m, n}: whole tiles and strips for two threads; a single value; k off the tile step and
  // m, n off the 32 x 32 blocks (edge blocks); one strip (one thread); then random sizes.
  std::vector<std::array<int64_t, 3>> cases = {
      {64, 256, 128}, {1, 1, 1}, {37, 75, 50}, {100, 20, 33}, {5, 31, 16}};
  for (int round = 0; round < 6; ++round)
    cases.push_back({pick(1, 130), pick(1, 200), pick(1, 90)});
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto [k, m, n] = cases[i];
    SCOPED_TRACE(fmt::format("seed {} case {}: k {} m {} n {}", seed, i, k, m, n));
    const Tensor a = random_tensor({k, m}, 2 * static_cast<uint32_t>(i) + 1);
    const Tensor b = random_tensor({k, n}, 2 * static_cast<uint32_t>(i) + 2);
    const auto [got, impl] = weight_grad(a, b, SessionOptions{.precision = Precision::bf16});
    EXPECT_EQ(impl, "amx:bf16");
    const Tensor want =
        weight_grad(rounded_to_bf16(a), rounded_to_bf16(b), {.kernel_impl = "reference"}).first;
    const double terms = static_cast<double>(k);
    testing::expect_close(want, got, {.rtol = 1e-4, .atol = terms * 1e-6},
                          "amx vs rounded reference");
    const Tensor exact = weight_grad(a, b, {.kernel_impl = "reference"}).first;
    testing::expect_close(exact, got, {.rtol = 0.0, .atol = terms / 128.0},
                          "amx vs fp32 reference");
  }
}

// Only bf16 sessions take it, and only for transpose_a: a layer's forward product and its input
// gradient stay with oneDNN.
TEST(AmxWeightGrad, OnlyBf16WeightGradientsTakeIt) {
  const Tensor a = random_tensor({8, 40}, 1), b = random_tensor({8, 24}, 2);
  EXPECT_EQ(weight_grad(a, b, {.precision = Precision::fp32}).second.find("amx"),
            std::string::npos);
  EXPECT_EQ(weight_grad(a, b, {.precision = Precision::bf16}).second == "amx:bf16",
            cpu_features().amx_bf16);
  Graph g;
  Output ai = ops::placeholder(g, DType::f32, {40, 8});
  Output bi = ops::placeholder(g, DType::f32, {8, 24});
  Output forward = ops::matmul(g, ai, bi);
  Session session(g, {.precision = Precision::bf16});
  session.set_profiling(true);
  session.run({{ai, random_tensor({40, 8}, 3)}, {bi, b}}, {forward});
  for (const NodeProfile& p : session.profile())
    EXPECT_EQ(p.impl.find("amx"), std::string::npos) << p.op << " " << p.impl;
}

}  // namespace
}  // namespace sf::SLIMFLOW_TEST_FILE_ID
