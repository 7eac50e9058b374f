// The oneDNN int8 conv / matmul / max-pool kernels and the element-wise "int8_loops" kernels
// against the reference kernels, over sizes 1, primes, strides, padding, dilation, groups and
// depthwise, with fed and frozen weights and params, source zero points 0 and not. The conv /
// matmul accumulators are exact below 2^24 (oneDNN passes them through float); u8 outputs agree
// within one unit (oneDNN requantizes in float when the params are Consts); the "int8_loops"
// kernels are exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "graph/graph.h"
#include "kernels/int8_loops.h"
#include "kernels/onednn/onednn_common.h"
#include "ops/ops.h"
#include "ops/quantized_ops.h"
#include "codec/quant_params.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

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

// x, x_params, w, w_scales, bias: random. A zero point away from 0 makes padding (real zero,
// not code zero) matter; 0 is what inputs that follow a ReLU have.
std::vector<Tensor> random_inputs(const Shape& x, const Shape& w, bool per_channel,
                                  bool x_zero_point, uint32_t seed) {
  const int64_t c = w.back();
  const int32_t zero_point = x_zero_point ? 37 + static_cast<int32_t>(seed % 50) : 0;
  return {random_u8(x, seed), params_tensor({0.02f, zero_point}), random_i8(w, seed + 1),
          random_f32({per_channel ? c : 1}, seed + 2, 1e-3f, 4e-3f),
          random_f32({c}, seed + 3, -2.0f, 2.0f)};
}

// Output params covering the real values of i32 accumulators, as calibration would choose;
// `relu`: only their positive part (zero point 0), as for a layer with a ReLU.
QuantParams covering(const Tensor& acc, const std::vector<Tensor>& inputs, bool relu = false) {
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
  return choose_quant_params(relu ? 0.0f : lo, hi);
}

// oneDNN's int8 primitives pass the int32 accumulator through float on its way to the s32
// destination, so it is exact below 2^24 and within a few float ulps above.
int64_t accumulator_tolerance(int64_t want) {
  return std::abs(want) < (int64_t{1} << 24) ? 0 : 4 * std::abs(want) / (int64_t{1} << 23);
}

using Build = std::function<Output(Graph&, const std::vector<Output>&)>;

// Which inputs of a conv / matmul are Consts: none, the weights (input 2), or all but x (a
// calibrated model, whose Requantized forms let oneDNN write the u8 output).
enum class Frozen { Nothing, Weights, AllButX };

std::ostream& operator<<(std::ostream& os, Frozen f) {
  return os << (f == Frozen::Nothing   ? "fed"
                : f == Frozen::Weights ? "frozen weights"
                                       : "frozen all but x");
}

bool is_frozen(Frozen f, size_t input) {
  return input > 0 && (f == Frozen::AllButX || (f == Frozen::Weights && input == 2));
}

// Runs `build` on placeholders for `inputs` (Consts where `frozen` says) with the reference
// kernels and with `impl`; expects `impl` to be chosen, u8 outputs within u8_tolerance and i32
// accumulators within accumulator_tolerance. Returns the reference output.
Tensor expect_impl_equals_reference(const Build& build, const std::vector<Tensor>& inputs,
                                    Frozen frozen, const std::string& impl = "onednn",
                                    int u8_tolerance = 1) {
  Graph g;
  std::vector<Output> in;
  for (size_t i = 0; i < inputs.size(); ++i)
    in.push_back(is_frozen(frozen, i) ? ops::constant(g, inputs[i], "const" + std::to_string(i))
                                      : ops::placeholder(g, inputs[i].dtype(), inputs[i].shape(),
                                                         "input" + std::to_string(i)));
  const Output y = build(g, in);
  Feeds feeds;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!is_frozen(frozen, i)) feeds.emplace_back(in[i], inputs[i]);
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

// The accumulating op and its Requantized form with each activation, per-channel and
// per-tensor scales, fed and frozen inputs, source zero points 0 and not; the output params
// cover the accumulators' whole range (zero point > 0) or, for relu and relu6, their positive
// part (zero point 0), as calibration would choose.
void expect_requantized_forms_equal_reference(
    const Shape& x, const Shape& w, const Build& accumulate,
    const std::function<Build(const char* activation)>& requantized) {
  uint32_t seed = 1;
  for (bool per_channel : {true, false})
    for (bool x_zero_point : {true, false})
      for (Frozen frozen : {Frozen::Nothing, Frozen::Weights, Frozen::AllButX}) {
        SCOPED_TRACE(::testing::Message() << (per_channel ? "per channel" : "per tensor")
                                          << ", x zero point " << x_zero_point << ", " << frozen);
        std::vector<Tensor> inputs = random_inputs(x, w, per_channel, x_zero_point, seed += 10);
        const Tensor acc = expect_impl_equals_reference(accumulate, inputs, frozen);
        inputs.push_back(Tensor());
        for (const char* activation : {"none", "relu", "relu6"})
          for (bool relu_range : {false, true}) {
            if (relu_range && std::string(activation) == "none") continue;
            SCOPED_TRACE(::testing::Message()
                         << activation << (relu_range ? ", positive range" : ""));
            inputs.back() = params_tensor(covering(acc, inputs, relu_range));
            expect_impl_equals_reference(requantized(activation), inputs, frozen);
          }
      }
}

struct ConvCase {
  const char* name;
  Shape x, w;
  ops::Conv2DOptions options;
};

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

class OneDnnQuantizedConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(OneDnnQuantizedConv, EqualsReference) {
  if (!onednn::exact_int8_products()) GTEST_SKIP() << "no VNNI: the int8 kernels decline";
  const ConvCase& c = GetParam();
  expect_requantized_forms_equal_reference(
      c.x, c.w,
      [&](Graph& g, const std::vector<Output>& in) {
        return ops::quantized_conv2d(g, {in[0], in[1], in[2], in[3], in[4]}, c.options);
      },
      [&](const char* activation) -> Build {
        return [&c, activation](Graph& g, const std::vector<Output>& in) {
          return ops::quantized_conv2d_requantized(g, {in[0], in[1], in[2], in[3], in[4]}, in[5],
                                                   c.options, *parse_activation(activation));
        };
      });
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
  if (!onednn::exact_int8_products()) GTEST_SKIP() << "no VNNI: the int8 kernels decline";
  const Shape xs{1, 9, 9, 8}, ws{3, 3, 8, 12};
  std::vector<Tensor> inputs = random_inputs(xs, ws, true, true, 5);
  inputs.push_back(params_tensor({0.3f, 20}));
  Graph g;
  std::vector<Output> in;
  for (size_t i = 0; i < inputs.size(); ++i)
    in.push_back(i == 2 ? ops::constant(g, inputs[i], "weights")
                        : ops::placeholder(g, inputs[i].dtype(), inputs[i].shape(),
                                           "input" + std::to_string(i)));
  const Output y = ops::quantized_conv2d_requantized(g, {in[0], in[1], in[2], in[3], in[4]}, in[5],
                                                     {.padding = "SAME"}, Activation::Relu);
  Session reference(g, SessionOptions{.kernel_impl = "reference"});
  Session onednn(g, SessionOptions{.kernel_impl = "onednn"});
  for (const QuantParams xp :
       {QuantParams{0.02f, 3}, QuantParams{0.01f, 250}, QuantParams{0.05f, 128}}) {
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

// A calibrated conv times oneDNN's implementations on its first run, once per problem: the fire
// modules of SqueezeNet, each with the same shapes, must not land on different implementations
// by measurement noise; the profile names the one that ran.
TEST(OneDnnQuantized, IdenticalConvsRunTheSameImplementation) {
  if (!onednn::exact_int8_products()) GTEST_SKIP() << "no VNNI: the int8 kernels decline";
  const Shape xs{2, 14, 14, 16}, ws{3, 3, 16, 32};
  Graph g;
  const Output x = ops::placeholder(g, DType::u8, xs, "x");
  const Output x_params = ops::constant(g, params_tensor({0.02f, 0}), "x_params");
  std::vector<Output> ys;
  for (int i = 0; i < 4; ++i) {
    const std::string n = std::to_string(i);
    const std::vector<Tensor> in = random_inputs(xs, ws, true, false, 10 * (i + 1));
    ys.push_back(ops::quantized_conv2d_requantized(
        g,
        {x, x_params, ops::constant(g, in[2], "w" + n), ops::constant(g, in[3], "w_scales" + n),
         ops::constant(g, in[4], "bias" + n)},
        ops::constant(g, params_tensor({0.5f, 0}), "out_params" + n), {.padding = "SAME"},
        Activation::Relu));
  }
  Session session(g, SessionOptions{.threads = 2, .kernel_impl = "onednn"});
  session.set_profiling(true);
  session.run({{x, random_u8(xs, 3)}}, ys);
  std::vector<std::string> impls;
  for (const NodeProfile& p : session.profile())
    if (p.op == "QuantizedConv2DRequantized") impls.push_back(p.impl);
  ASSERT_EQ(impls.size(), 4u);
  for (const std::string& impl : impls) EXPECT_EQ(impl, impls[0]);
  EXPECT_TRUE(impls[0].starts_with("onednn:")) << impls[0];  // names oneDNN's implementation
}

struct MatMulCase {
  const char* name;
  int64_t m, k, n;
};

void PrintTo(const MatMulCase& c, std::ostream* os) { *os << c.name; }

class OneDnnQuantizedMatMul : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(OneDnnQuantizedMatMul, EqualsReference) {
  if (!onednn::exact_int8_products()) GTEST_SKIP() << "no VNNI: the int8 kernels decline";
  const MatMulCase& c = GetParam();
  expect_requantized_forms_equal_reference(
      {c.m, c.k}, {c.k, c.n},
      [](Graph& g, const std::vector<Output>& in) {
        return ops::quantized_matmul(g, {in[0], in[1], in[2], in[3], in[4]});
      },
      [](const char* activation) -> Build {
        return [activation](Graph& g, const std::vector<Output>& in) {
          return ops::quantized_matmul_requantized(g, {in[0], in[1], in[2], in[3], in[4]}, in[5],
                                                   *parse_activation(activation));
        };
      });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OneDnnQuantizedMatMul,
    ::testing::Values(MatMulCase{"size1", 1, 1, 1}, MatMulCase{"primes", 7, 13, 5},
                      MatMulCase{"vector_width_pm1", 17, 63, 33}, MatMulCase{"outer", 13, 1, 7},
                      MatMulCase{"fc2", 64, 1024, 10}),
    [](const ::testing::TestParamInfo<MatMulCase>& info) { return info.param.name; });

// Accumulators beyond 2^24, where oneDNN's float round trip loses units.
TEST(OneDnnQuantized, LargeAccumulatorsStayExact) {
  if (!onednn::exact_int8_products()) GTEST_SKIP() << "no VNNI: the int8 kernels decline";
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
        inputs, Frozen::Nothing);
    EXPECT_GT(*std::max_element(acc.data<int32_t>(), acc.data<int32_t>() + acc.numel()), 1 << 24);
  }
}

TEST(OneDnnQuantized, MaxPoolEqualsReference) {
  if (!testing::onednn_jit_covers_all()) GTEST_SKIP() << "oneDNN may decline outside x86-64";
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
        {random_u8(shape, 3)}, Frozen::Nothing);
  }
}

// The element-wise kernels of impl "int8_loops" (AVX-512 where the CPU has it, portable loops
// elsewhere), on lengths around the vector width.
TEST(Int8LoopsKernels, RequantizeEqualsReference) {
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
              return ops::requantize(g, in[0], in[1], in[2], in[3], *parse_activation(activation));
            },
            inputs, Frozen::Nothing, "int8_loops", 0);
      }
}

TEST(Int8LoopsKernels, AddEqualsReference) {
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
              return ops::quantized_add(g, in[0], in[1], in[2], in[3], in[4],
                                        *parse_activation(activation));
            },
            inputs, Frozen::Nothing, "int8_loops", 0);
      }
}

// Every pair of codes, for params whose multipliers span the shifts the vector code takes.
TEST(Int8LoopsKernels, AddOfEveryPairOfCodesEqualsReference) {
  std::vector<uint8_t> a, b;
  for (int i = 0; i < 256; ++i)
    for (int j = 0; j < 256; ++j) {
      a.push_back(static_cast<uint8_t>(i));
      b.push_back(static_cast<uint8_t>(j));
    }
  for (const auto& [ap, bp, out] : std::vector<std::tuple<QuantParams, QuantParams, QuantParams>>{
           {{0.02f, 128}, {0.05f, 10}, {0.06f, 90}},
           {{0.1f, 0}, {0.1f, 0}, {0.2f, 0}},
           {{0.003f, 255}, {0.5f, 3}, {0.4f, 50}},
           {{1.0f, 0}, {1e-6f, 200}, {1e-3f, 7}},
           {{0.5f, 255}, {0.5f, 0}, {200.0f, 128}},
           {{1e-4f, 17}, {3e-4f, 240}, {1e-6f, 128}}})
    for (Activation activation : {Activation::None, Activation::Relu6}) {
      const QuantizedAddParams p =
          quantized_add_params(ap, bp, out, activation_clamp(activation, out));
      std::vector<uint8_t> got(a.size());
      quantized_add_elements(a.data(), b.data(), static_cast<int64_t>(a.size()), p, got.data());
      for (size_t k = 0; k < a.size(); ++k)
        ASSERT_EQ(got[k], quantized_add_value(a[k], b[k], p))
            << int{a[k]} << " + " << int{b[k]} << ", shifts " << p.a.shift << " " << p.b.shift
            << " " << p.out.shift;
    }
}

TEST(Int8LoopsKernels, AvgPoolEqualsReference) {
  const std::vector<std::pair<Shape, ops::PoolOptions>> cases = {
      {{1, 1, 1, 1}, {.ksize = {1, 1}, .strides = {1, 1}}},
      {{2, 7, 7, 3}, {.ksize = {3, 3}, .strides = {2, 2}, .padding = "SAME"}},
      {{1, 8, 5, 17}, {.ksize = {2, 2}, .strides = {2, 2}}},
      {{1, 9, 8, 33},
       {.ksize = {3, 2}, .strides = {2, 1}, .padding = "EXPLICIT", .pads = {1, 1, 0, 1}}},
      {{1, 7, 7, 1280}, {.ksize = {7, 7}, .strides = {1, 1}}},        // a global pool
      {{1, 130, 130, 5}, {.ksize = {130, 130}, .strides = {1, 1}}}};  // divided in integers
  for (const auto& [shape, options] : cases) {
    SCOPED_TRACE(shape_str(shape));
    // All 255 makes sums whose averages are exact integers, where float division must not fall
    // short; random values test the rounding of the rest.
    Tensor full(DType::u8, shape);
    std::fill(full.data<uint8_t>(), full.data<uint8_t>() + full.numel(), uint8_t{255});
    for (const Tensor& x : {random_u8(shape, 3), full})
      expect_impl_equals_reference(
          [&](Graph& g, const std::vector<Output>& in) {
            return ops::quantized_avg_pool(g, in[0], options);
          },
          {x}, Frozen::Nothing, "int8_loops", 0);
  }
}

// Floats around the vector width with the values that test the rounding: exact ties k + 0.5
// and their float neighbours, NaN, infinities, huge values, values beyond the u8 range.
Tensor quantize_inputs(const Shape& shape, QuantParams p, uint32_t seed) {
  Tensor x = random_f32(shape, seed, -3.0f, 3.0f);
  float* v = x.data<float>();
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            3e38f,
                            -3e38f,
                            -0.0f,
                            1e-30f};
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t k = i % 41 - 20;
    if (i % 3 == 0) v[i] = (static_cast<float>(k) + 0.5f) * p.scale;  // a tie (up to rounding)
    if (i % 5 == 1) v[i] = std::nextafter(v[i], 1e30f);
    if (i % 7 == 2) v[i] = std::nextafter((static_cast<float>(k) + 0.5f) * p.scale, -1e30f);
    if (i % 11 == 4) v[i] = specials[(i / 11) % 7];
  }
  return x;
}

TEST(Int8LoopsKernels, QuantizeEqualsReference) {
  for (const Shape& shape :
       {Shape{1}, Shape{15}, Shape{3, 16}, Shape{2, 9, 17}, Shape{1, 224, 224, 3}})
    for (const QuantParams p : {QuantParams{0.02f, 128}, QuantParams{0.1f, 0},
                                QuantParams{1.0f / 255.0f, 255}, QuantParams{3.0f, 7}}) {
      SCOPED_TRACE(::testing::Message() << shape_str(shape) << " scale " << p.scale);
      expect_impl_equals_reference(
          [](Graph& g, const std::vector<Output>& in) { return ops::quantize(g, in[0], in[1]); },
          {quantize_inputs(shape, p, 4), params_tensor(p)}, Frozen::Nothing, "int8_loops", 0);
    }
}

TEST(Int8LoopsKernels, DequantizeEqualsReference) {
  for (const Shape& shape : {Shape{1}, Shape{15}, Shape{3, 16}, Shape{2, 9, 17}, Shape{64, 10}})
    for (const QuantParams p : {QuantParams{0.02f, 128}, QuantParams{0.3f, 0}}) {
      SCOPED_TRACE(::testing::Message() << shape_str(shape) << " scale " << p.scale);
      // Compared as bytes: the f32 outputs must be identical.
      Graph g;
      const Output q = ops::placeholder(g, DType::u8, shape, "q");
      const Output params = ops::placeholder(g, DType::f32, {2}, "params");
      const Output y = ops::dequantize(g, q, params);
      const Feeds feeds = {{q, random_u8(shape, 8)}, {params, params_tensor(p)}};
      Session reference(g, SessionOptions{.kernel_impl = "reference"});
      Session loops(g, SessionOptions{.kernel_impl = "int8_loops"});
      const Tensor want = reference.run(feeds, {y})[0].clone();
      const Tensor got = loops.run(feeds, {y})[0].clone();
      EXPECT_EQ(loops.kernel_choices()[g.node(y.node).name], "int8_loops");
      EXPECT_EQ(std::memcmp(want.raw(), got.raw(), want.bytes()), 0);
    }
}

// Params are f32 outputs, compared exactly.
void expect_params_equal(const Build& build, const std::vector<Tensor>& inputs) {
  Graph g;
  std::vector<Output> in;
  Feeds feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in.push_back(
        ops::placeholder(g, inputs[i].dtype(), inputs[i].shape(), "input" + std::to_string(i)));
    feeds.emplace_back(in.back(), inputs[i]);
  }
  const Output y = build(g, in);
  Session reference(g, SessionOptions{.kernel_impl = "reference"});
  Session loops(g, SessionOptions{.kernel_impl = "int8_loops"});
  const Tensor want = reference.run(feeds, {y})[0].clone();
  const Tensor got = loops.run(feeds, {y})[0].clone();
  EXPECT_EQ(loops.kernel_choices()[g.node(y.node).name], "int8_loops");
  EXPECT_EQ(want.data<float>()[0], got.data<float>()[0]);
  EXPECT_EQ(want.data<float>()[1], got.data<float>()[1]);
}

TEST(Int8LoopsKernels, ChooseQParamsEqualsReference) {
  for (const Shape& shape : {Shape{1}, Shape{15}, Shape{3, 16}, Shape{2, 9, 17}, Shape{0, 3}})
    for (const auto& [lo, hi] :
         {std::pair{-3.0f, 5.0f}, std::pair{0.5f, 2.0f}, std::pair{-4.0f, -1.0f}}) {
      SCOPED_TRACE(::testing::Message() << shape_str(shape) << " " << lo << ".." << hi);
      Tensor x = random_f32(shape, 6, lo, hi);
      if (x.numel() > 4) {  // left out of the range
        x.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
        x.data<float>()[3] = -std::numeric_limits<float>::infinity();
      }
      expect_params_equal(
          [](Graph& g, const std::vector<Output>& in) { return ops::choose_qparams(g, in[0]); },
          {x});
    }
}

TEST(Int8LoopsKernels, RequantizationRangeEqualsReference) {
  for (const Shape& shape : {Shape{1}, Shape{3, 5}, Shape{7, 16}, Shape{2, 9, 17}, Shape{0, 4}})
    for (bool per_channel : {true, false})
      for (const char* activation : {"none", "relu", "relu6"}) {
        SCOPED_TRACE(::testing::Message() << shape_str(shape) << " " << activation);
        std::mt19937 rng(static_cast<uint32_t>(shape.size() * 3 + per_channel));
        std::uniform_int_distribution<int32_t> dist(-3000000, 3000000);
        Tensor acc(DType::i32, shape);
        for (int64_t i = 0; i < acc.numel(); ++i) acc.data<int32_t>()[i] = dist(rng);
        expect_params_equal(
            [&](Graph& g, const std::vector<Output>& in) {
              return ops::requantization_range(g, in[0], in[1], in[2],
                                               *parse_activation(activation));
            },
            {acc, params_tensor({0.02f, 7}),
             random_f32({per_channel ? shape.back() : 1}, 3, 1e-5f, 4e-4f)});
      }
}

}  // namespace
}  // namespace sf
