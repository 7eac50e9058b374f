// The oneDNN int8 conv / matmul / max-pool kernels and the vectorized element-wise kernels
// against the reference kernels, over sizes 1, primes, strides, padding, dilation, groups and
// depthwise, with fed and frozen weights. The conv / matmul accumulators are exact below 2^24
// (oneDNN passes them through float) and requantize with the reference's fixed-point code, so
// u8 outputs agree within one unit (in practice identical); the "simd" kernels are exact.
#include <gtest/gtest.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "graph/graph.h"
#include "ops/ops.h"
#include "ops/quantized_ops.h"
#include "quantize/quant_params.h"
#include "runtime/session.h"

namespace sf {
namespace {

// The kernels decline without VNNI (their u8 x s8 products could saturate), leaving the
// reference to run.
bool has_vnni() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto has = [isa](dnnl_cpu_isa_t want) {
    return (isa & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
  };
  return has(dnnl_cpu_isa_avx512_core_vnni) || has(dnnl_cpu_isa_avx2_vnni);
}

Tensor random_u8(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, 255);
  Tensor t(DType::u8, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(dist(rng));
  return t;
}

Tensor random_i8(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-127, 127);
  Tensor t(DType::i8, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int8_t>()[i] = static_cast<int8_t>(dist(rng));
  return t;
}

Tensor random_f32(const Shape& shape, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

Tensor params_tensor(QuantParams p) {
  return Tensor::from_vector<float>({2}, {p.scale, static_cast<float>(p.zero_point)});
}

// x, x_params, w, w_scales, bias: random, with a zero point away from 0 so that padding
// (real zero, not code zero) matters.
std::vector<Tensor> random_inputs(const Shape& x, const Shape& w, bool per_channel,
                                  uint32_t seed) {
  const int64_t c = w.back();
  return {random_u8(x, seed), params_tensor({0.02f, 37 + static_cast<int32_t>(seed % 50)}),
          random_i8(w, seed + 1), random_f32({per_channel ? c : 1}, seed + 2, 1e-3f, 4e-3f),
          random_f32({c}, seed + 3, -2.0f, 2.0f)};
}

// Output params covering the real values of i32 accumulators, as calibration would choose.
QuantParams covering(const Tensor& acc, const std::vector<Tensor>& inputs) {
  const float xs = inputs[1].data<float>()[0];
  const Tensor& ws = inputs[3];
  const int64_t c = acc.dim(-1);
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < acc.numel(); ++i) {
    const float real =
        acc.data<int32_t>()[i] * xs * ws.data<float>()[ws.numel() == 1 ? 0 : i % c];
    lo = std::min(lo, real);
    hi = std::max(hi, real);
  }
  return choose_quant_params(lo, hi);
}

// oneDNN's int8 primitives pass the int32 accumulator through float on its way to the s32
// destination, so it is exact below 2^24 and within a few float ulps above.
int64_t accumulator_tolerance(int64_t want) {
  return std::abs(want) < (int64_t{1} << 24) ? 0 : 4 * std::abs(want) / (int64_t{1} << 23);
}

using Build = std::function<Output(Graph&, const std::vector<Output>&)>;

// Runs `build` on placeholders for `inputs` (input 2, the weights, as a Const when frozen)
// with the reference kernels and with `impl`; expects `impl` to be chosen, u8 outputs within
// u8_tolerance and i32 accumulators within accumulator_tolerance. Returns the reference output.
Tensor expect_impl_equals_reference(const Build& build, const std::vector<Tensor>& inputs,
                                    bool frozen, const std::string& impl = "onednn",
                                    int u8_tolerance = 1) {
  Graph g;
  std::vector<Output> in;
  for (size_t i = 0; i < inputs.size(); ++i)
    in.push_back(frozen && i == 2 ? ops::constant(g, inputs[i], "weights")
                                  : ops::placeholder(g, inputs[i].dtype(), inputs[i].shape(),
                                                     "input" + std::to_string(i)));
  const Output y = build(g, in);
  Feeds feeds;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!(frozen && i == 2)) feeds.emplace_back(in[i], inputs[i]);
  Session reference(g, SessionOptions{.kernel_impl = "reference"});
  Session onednn(g, SessionOptions{.kernel_impl = impl});
  const Tensor want = reference.run(feeds, {y})[0].clone();
  // Twice: frozen weights are reordered on the first call only.
  onednn.run(feeds, {y});
  const Tensor got = onednn.run(feeds, {y})[0].clone();
  EXPECT_EQ(onednn.kernel_choices()[g.node(y.node).name], impl);
  EXPECT_EQ(want.dtype(), got.dtype());
  EXPECT_EQ(want.shape(), got.shape());
  if (want.shape() != got.shape() || want.dtype() != got.dtype()) return want;
  int64_t bad = -1;
  for (int64_t i = 0; i < want.numel() && bad < 0; ++i) {
    if (want.dtype() == DType::u8) {
      if (std::abs(want.data<uint8_t>()[i] - got.data<uint8_t>()[i]) > u8_tolerance) bad = i;
    } else {
      const int64_t w = want.data<int32_t>()[i], d = std::abs(w - got.data<int32_t>()[i]);
      if (d > accumulator_tolerance(w)) bad = i;
    }
  }
  EXPECT_LT(bad, 0) << "element " << bad << " of " << shape_str(want.shape()) << " differs";
  return want;
}

struct ConvCase {
  const char* name;
  Shape x, w;
  ops::Conv2DOptions options;
};

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

class OneDnnQuantizedConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(OneDnnQuantizedConv, EqualsReference) {
  if (!has_vnni()) GTEST_SKIP() << "no VNNI: the int8 kernels decline";
  const ConvCase& c = GetParam();
  uint32_t seed = 1;
  for (bool per_channel : {true, false})
    for (bool frozen : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (per_channel ? "per channel" : "per tensor")
                                        << (frozen ? ", frozen" : ", fed"));
      std::vector<Tensor> inputs = random_inputs(c.x, c.w, per_channel, seed += 10);
      const Tensor acc = expect_impl_equals_reference(
          [&](Graph& g, const std::vector<Output>& in) {
            return ops::quantized_conv2d(g, {in[0], in[1], in[2], in[3], in[4]}, c.options);
          },
          inputs, frozen);
      inputs.push_back(params_tensor(covering(acc, inputs)));
      for (const char* activation : {"none", "relu", "relu6"}) {
        SCOPED_TRACE(activation);
        expect_impl_equals_reference(
            [&](Graph& g, const std::vector<Output>& in) {
              return ops::quantized_conv2d_requantized(g, {in[0], in[1], in[2], in[3], in[4]},
                                                       in[5], c.options, activation);
            },
            inputs, frozen);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OneDnnQuantizedConv,
    ::testing::Values(
        ConvCase{"size1", {1, 1, 1, 1}, {1, 1, 1, 1}, {}},
        ConvCase{"same3x3_odd_channels", {2, 7, 7, 3}, {3, 3, 3, 5}, {.padding = "SAME"}},
        ConvCase{"stride2_same_primes",
                 {1, 13, 11, 5},
                 {5, 5, 5, 7},
                 {.strides = {2, 2}, .padding = "SAME"}},
        ConvCase{"valid_stride21", {3, 7, 13, 16}, {3, 3, 16, 17}, {.strides = {2, 1}}},
        ConvCase{"explicit_uneven",
                 {2, 9, 8, 4},
                 {3, 2, 4, 6},
                 {.strides = {2, 2}, .padding = "EXPLICIT", .pads = {1, 2, 0, 3}}},
        ConvCase{
            "dilation2", {1, 13, 13, 8}, {3, 3, 8, 16}, {.padding = "SAME", .dilations = {2, 2}}},
        ConvCase{"groups2", {2, 7, 7, 6}, {3, 3, 3, 10}, {.padding = "SAME", .groups = 2}},
        ConvCase{"depthwise16", {2, 9, 9, 16}, {3, 3, 1, 16}, {.padding = "SAME", .groups = 16}},
        ConvCase{"depthwise_stride2",
                 {1, 11, 11, 32},
                 {3, 3, 1, 32},
                 {.strides = {2, 2}, .padding = "SAME", .groups = 32}},
        ConvCase{
            "depthwise_multiplier2", {1, 7, 7, 3}, {3, 3, 1, 6}, {.padding = "SAME", .groups = 3}},
        ConvCase{"pointwise", {2, 7, 7, 17}, {1, 1, 17, 33}, {}},
        ConvCase{"mnist_conv2", {2, 14, 14, 32}, {5, 5, 32, 64}, {.padding = "SAME"}}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// Zero point and scales are run-time inputs: a kernel made once must follow them (oneDNN's
// zero-point compensation of frozen weights included).
TEST(OneDnnQuantized, FollowsParamsThatChangeBetweenRuns) {
  if (!has_vnni()) GTEST_SKIP() << "no VNNI: the int8 kernels decline";
  const Shape xs{1, 9, 9, 8}, ws{3, 3, 8, 12};
  std::vector<Tensor> inputs = random_inputs(xs, ws, true, 5);
  inputs.push_back(params_tensor({0.3f, 20}));
  Graph g;
  std::vector<Output> in;
  for (size_t i = 0; i < inputs.size(); ++i)
    in.push_back(i == 2 ? ops::constant(g, inputs[i], "weights")
                        : ops::placeholder(g, inputs[i].dtype(), inputs[i].shape(),
                                           "input" + std::to_string(i)));
  const Output y = ops::quantized_conv2d_requantized(g, {in[0], in[1], in[2], in[3], in[4]}, in[5],
                                                     {.padding = "SAME"}, "relu");
  Session reference(g, SessionOptions{.kernel_impl = "reference"});
  Session onednn(g, SessionOptions{.kernel_impl = "onednn"});
  for (const QuantParams xp : {QuantParams{0.02f, 3}, QuantParams{0.01f, 250},
                               QuantParams{0.05f, 128}}) {
    SCOPED_TRACE(xp.zero_point);
    Feeds feeds;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (i != 2) feeds.emplace_back(in[i], i == 1 ? params_tensor(xp) : inputs[i]);
    const Tensor want = reference.run(feeds, {y})[0].clone();
    const Tensor got = onednn.run(feeds, {y})[0].clone();
    EXPECT_EQ(onednn.kernel_choices()[g.node(y.node).name], "onednn");
    ASSERT_EQ(std::memcmp(want.raw(), got.raw(), want.bytes()), 0);
  }
}

struct MatMulCase {
  const char* name;
  int64_t m, k, n;
};

void PrintTo(const MatMulCase& c, std::ostream* os) { *os << c.name; }

class OneDnnQuantizedMatMul : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(OneDnnQuantizedMatMul, EqualsReference) {
  if (!has_vnni()) GTEST_SKIP() << "no VNNI: the int8 kernels decline";
  const MatMulCase& c = GetParam();
  uint32_t seed = 1;
  for (bool per_channel : {true, false})
    for (bool frozen : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (per_channel ? "per channel" : "per tensor")
                                        << (frozen ? ", frozen" : ", fed"));
      std::vector<Tensor> inputs = random_inputs({c.m, c.k}, {c.k, c.n}, per_channel, seed += 10);
      const Tensor acc = expect_impl_equals_reference(
          [&](Graph& g, const std::vector<Output>& in) {
            return ops::quantized_matmul(g, {in[0], in[1], in[2], in[3], in[4]});
          },
          inputs, frozen);
      inputs.push_back(params_tensor(covering(acc, inputs)));
      for (const char* activation : {"none", "relu", "relu6"}) {
        SCOPED_TRACE(activation);
        expect_impl_equals_reference(
            [&](Graph& g, const std::vector<Output>& in) {
              return ops::quantized_matmul_requantized(g, {in[0], in[1], in[2], in[3], in[4]},
                                                       in[5], activation);
            },
            inputs, frozen);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OneDnnQuantizedMatMul,
    ::testing::Values(MatMulCase{"size1", 1, 1, 1}, MatMulCase{"primes", 7, 13, 5},
                      MatMulCase{"vector_width_pm1", 17, 63, 33}, MatMulCase{"outer", 13, 1, 7},
                      MatMulCase{"fc2", 64, 1024, 10}),
    [](const ::testing::TestParamInfo<MatMulCase>& info) { return info.param.name; });

// Accumulators beyond 2^24, where oneDNN's float round trip loses units.
TEST(OneDnnQuantized, LargeAccumulatorsStayExact) {
  if (!has_vnni()) GTEST_SKIP() << "no VNNI: the int8 kernels decline";
  for (bool conv : {true, false}) {
    SCOPED_TRACE(conv ? "conv" : "matmul");
    const Shape xs = conv ? Shape{1, 5, 5, 96} : Shape{3, 1531};
    const Shape ws = conv ? Shape{3, 3, 96, 7} : Shape{1531, 7};
    Tensor x(DType::u8, xs), w(DType::i8, ws);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = i % 13 == 0 ? 254 : 255;
    for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = i % 7 == 3 ? -127 : 127;
    const std::vector<Tensor> inputs = {x, params_tensor({1e-3f, 0}), w,
                                        Tensor::from_vector<float>({1}, {1e-3f}),
                                        random_f32({ws.back()}, 9, -1.0f, 1.0f)};
    const Tensor acc = expect_impl_equals_reference(
        [&](Graph& g, const std::vector<Output>& in) {
          return conv ? ops::quantized_conv2d(g, {in[0], in[1], in[2], in[3], in[4]})
                      : ops::quantized_matmul(g, {in[0], in[1], in[2], in[3], in[4]});
        },
        inputs, false);
    EXPECT_GT(*std::max_element(acc.data<int32_t>(), acc.data<int32_t>() + acc.numel()),
              1 << 24);
  }
}

TEST(OneDnnQuantized, MaxPoolEqualsReference) {
  const std::vector<std::pair<Shape, ops::PoolOptions>> cases = {
      {{1, 1, 1, 1}, {.ksize = {1, 1}, .strides = {1, 1}}},
      {{2, 7, 7, 3}, {.ksize = {3, 3}, .strides = {2, 2}, .padding = "SAME"}},
      {{1, 8, 5, 17}, {.ksize = {2, 2}, .strides = {2, 2}}},
      {{1, 9, 8, 64},
       {.ksize = {3, 2}, .strides = {2, 1}, .padding = "EXPLICIT", .pads = {1, 1, 0, 1}}}};
  for (const auto& [shape, options] : cases) {
    SCOPED_TRACE(shape_str(shape));
    expect_impl_equals_reference(
        [&](Graph& g, const std::vector<Output>& in) {
          return ops::quantized_max_pool(g, in[0], options);
        },
        {random_u8(shape, 3)}, false);
  }
}

// The vectorized element-wise kernels (impl "simd"), on lengths around the vector width.
TEST(SimdQuantized, RequantizeEqualsReference) {
  for (const Shape& shape : {Shape{1}, Shape{3, 5}, Shape{7, 16}, Shape{2, 9, 17}, Shape{64, 33}})
    for (bool per_channel : {true, false})
      for (const char* activation : {"none", "relu", "relu6"}) {
        SCOPED_TRACE(::testing::Message() << shape_str(shape) << " " << activation);
        std::mt19937 rng(static_cast<uint32_t>(shape.size() * 7 + per_channel));
        std::uniform_int_distribution<int32_t> dist(-3000000, 3000000);
        Tensor acc(DType::i32, shape);
        for (int64_t i = 0; i < acc.numel(); ++i) acc.data<int32_t>()[i] = dist(rng);
        acc.data<int32_t>()[0] = std::numeric_limits<int32_t>::min();
        const std::vector<Tensor> inputs = {
            acc, params_tensor({0.02f, 7}),
            random_f32({per_channel ? shape.back() : 1}, 3, 1e-4f, 4e-3f),
            params_tensor({3.0f, 60})};
        expect_impl_equals_reference(
            [&](Graph& g, const std::vector<Output>& in) {
              return ops::requantize(g, in[0], in[1], in[2], in[3], activation);
            },
            inputs, false, "simd", 0);
      }
}

TEST(SimdQuantized, AddEqualsReference) {
  const std::vector<std::vector<QuantParams>> param_sets = {
      {{0.02f, 128}, {0.05f, 10}, {0.06f, 90}},
      {{0.1f, 0}, {0.1f, 0}, {0.2f, 0}},
      {{0.003f, 255}, {0.5f, 3}, {0.4f, 50}},
      {{1e-10f, 255}, {0.5f, 3}, {0.4f, 50}}};  // a multiplier too small for the vector code
  for (const Shape& shape : {Shape{1}, Shape{15}, Shape{3, 16}, Shape{2, 9, 17}, Shape{64, 1031}})
    for (const auto& ps : param_sets)
      for (const char* activation : {"none", "relu", "relu6"}) {
        SCOPED_TRACE(::testing::Message() << shape_str(shape) << " " << activation);
        const std::vector<Tensor> inputs = {random_u8(shape, 1), params_tensor(ps[0]),
                                            random_u8(shape, 2), params_tensor(ps[1]),
                                            params_tensor(ps[2])};
        expect_impl_equals_reference(
            [&](Graph& g, const std::vector<Output>& in) {
              return ops::quantized_add(g, in[0], in[1], in[2], in[3], in[4], activation);
            },
            inputs, false, "simd", 0);
      }
}

}  // namespace
}  // namespace sf
