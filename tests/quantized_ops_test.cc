// The integer ops' reference kernels against float computations on the dequantized values:
// conv/matmul accumulators must equal the float result up to the bias rounding, requantized
// outputs must be within one unit of round(real / scale) + zero_point, and shape errors must be
// one line naming the node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/graph.h"
#include "ops/ops.h"
#include "ops/quantized_ops.h"
#include "codec/quant_params.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::random_tensor;
using testing::run_once;

Tensor params_tensor(QuantParams p) {
  return Tensor::from_vector<float>({2}, {p.scale, static_cast<float>(p.zero_point)});
}

QuantParams params_of(const Tensor& t) {
  return {t.data<float>()[0], static_cast<int32_t>(t.data<float>()[1])};
}

QuantParams params_covering(const Tensor& x) {
  const float* p = x.data<float>();
  const auto [lo, hi] = std::minmax_element(p, p + x.numel());
  return choose_quant_params(*lo, *hi);
}

Tensor quantize_tensor(const Tensor& x, QuantParams p) {
  Tensor q(DType::u8, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) q.data<uint8_t>()[i] = quantize_value(x.data<float>()[i], p);
  return q;
}

Tensor dequantize_tensor(const Tensor& q, QuantParams p) {
  Tensor x(DType::f32, q.shape());
  for (int64_t i = 0; i < q.numel(); ++i)
    x.data<float>()[i] = dequantize_value(q.data<uint8_t>()[i], p);
  return x;
}

Tensor random_u8(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, 255);
  Tensor t(DType::u8, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(dist(rng));
  return t;
}

// Symmetric i8 weights, one scale per output channel (the last axis) or one for all.
struct QuantizedWeights {
  Tensor q;       // i8
  Tensor scales;  // f32[C] or f32[1]
  Tensor dequantized;
};

QuantizedWeights quantize_weights(const Tensor& w, bool per_channel) {
  const int64_t c = w.dim(-1);
  const float* wp = w.data<float>();
  std::vector<float> max_abs(static_cast<size_t>(per_channel ? c : 1), 0.0f);
  for (int64_t i = 0; i < w.numel(); ++i) {
    float& m = max_abs[per_channel ? static_cast<size_t>(i % c) : 0];
    m = std::max(m, std::abs(wp[i]));
  }
  QuantizedWeights out{Tensor(DType::i8, w.shape()),
                       Tensor(DType::f32, {static_cast<int64_t>(max_abs.size())}),
                       Tensor(DType::f32, w.shape())};
  for (size_t k = 0; k < max_abs.size(); ++k)
    out.scales.data<float>()[k] = max_abs[k] > 0 ? max_abs[k] / 127.0f : 1.0f;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float s = out.scales.data<float>()[per_channel ? i % c : 0];
    const float q = std::clamp(std::round(wp[i] / s), -127.0f, 127.0f);
    out.q.data<int8_t>()[i] = static_cast<int8_t>(q);
    out.dequantized.data<float>()[i] = q * s;
  }
  return out;
}

float channel_scale(const Tensor& scales, int64_t c) {
  return scales.data<float>()[scales.numel() == 1 ? 0 : c];
}

// want = clamp(round(real / scale) + zp) after the activation.
int expected_u8(double real, QuantParams out, const std::string& activation) {
  if (activation != "none") real = std::max(real, 0.0);
  if (activation == "relu6") real = std::min(real, 6.0);
  return static_cast<int>(std::clamp(std::round(real / out.scale) + out.zero_point, 0.0, 255.0));
}

// Runs op `name` with u8 inputs fed from placeholders and returns output 0.
Tensor run_op(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {}) {
  return run_once(
      [&](Graph& g, const std::vector<Output>& in) { return g.add(op, in, attrs); }, inputs,
      "reference");
}

// The one-line message of the error adding `op` throws.
std::string add_error(const std::string& op, const std::vector<TensorType>& inputs,
                      const Attrs& attrs = {}) {
  Graph g;
  std::vector<Output> in;
  for (const TensorType& t : inputs) in.push_back(ops::placeholder(g, t.dtype, t.shape));
  try {
    g.add(op, in, attrs, "q1");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_one_line_naming_node(const std::string& message, const std::string& op,
                                 const std::string& fragment) {
  EXPECT_NE(message.find("node 'q1' (" + op + ")"), std::string::npos) << message;
  EXPECT_NE(message.find(fragment), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// --- ChooseQParams, Quantize, Dequantize ---

TEST(QuantizedOps, ChooseQParamsCoversTheRangeAndZero) {
  Tensor x = Tensor::from_vector<float>({4}, {-1.0f, 0.5f, 2.0f, 3.1f});
  QuantParams p = params_of(run_op("ChooseQParams", {x}));
  EXPECT_FLOAT_EQ(p.scale, 4.1f / 255.0f);
  EXPECT_EQ(p.zero_point, static_cast<int>(std::round(1.0 / (4.1 / 255.0))));

  p = params_of(run_op("ChooseQParams", {Tensor::from_vector<float>({2}, {2.0f, 5.0f})}));
  EXPECT_FLOAT_EQ(p.scale, 5.0f / 255.0f);
  EXPECT_EQ(p.zero_point, 0);

  p = params_of(run_op("ChooseQParams", {Tensor::from_vector<float>({2}, {-2.0f, -5.0f})}));
  EXPECT_EQ(p.zero_point, 255);

  p = params_of(run_op("ChooseQParams", {Tensor(DType::f32, {3, 0})}));
  EXPECT_EQ(p.scale, 1.0f);
  EXPECT_EQ(p.zero_point, 0);
}

TEST(QuantizedOps, QuantizeDequantizeRoundTripWithinHalfAStep) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    Tensor x = random_tensor({7, 13}, seed, -3.0f, 5.0f);
    Tensor params = run_op("ChooseQParams", {x});
    const QuantParams p = params_of(params);
    Tensor q = run_op("Quantize", {x, params});
    ASSERT_EQ(q.dtype(), DType::u8);
    Tensor back = run_op("Dequantize", {q, params});
    for (int64_t i = 0; i < x.numel(); ++i) {
      EXPECT_EQ(q.data<uint8_t>()[i], quantize_value(x.data<float>()[i], p));
      EXPECT_LE(std::abs(back.data<float>()[i] - x.data<float>()[i]), p.scale * 0.5f * 1.0001f)
          << "element " << i << " seed " << seed;
    }
  }
}

TEST(QuantizedOps, QuantizeRoundsHalfAwayFromZeroAndClamps) {
  Tensor params = params_tensor({0.5f, 10});
  Tensor x = Tensor::from_vector<float>({6}, {0.25f, -0.25f, -0.75f, 1000.0f, -1000.0f, 0.0f});
  Tensor q = run_op("Quantize", {x, params});
  const std::vector<int> want = {11, 9, 8, 255, 0, 10};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(q.data<uint8_t>()[i], want[static_cast<size_t>(i)]) << i;
}

TEST(QuantizedOps, BadParamsAreUserErrors) {
  Tensor x = random_tensor({3}, 1);
  for (const Tensor& bad : {params_tensor({0.0f, 0}), Tensor::from_vector<float>({2}, {1.0f, 2.5f}),
                            Tensor::from_vector<float>({2}, {1.0f, 300.0f})}) {
    try {
      run_op("Quantize", {x, bad});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("(Quantize): input 1 ('params')"), std::string::npos)
          << e.what();
    }
  }
}

// --- conv and matmul ---

struct ConvCase {
  const char* name;
  Shape x, w;
  ops::Conv2DOptions options;
};

// gtest prints a failing parameter by name rather than as bytes.
void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

Attrs conv_attrs(const ops::Conv2DOptions& o) {
  return {{"strides", o.strides},
          {"padding", o.padding},
          {"pads", o.pads},
          {"dilations", o.dilations},
          {"groups", o.groups}};
}

// Everything a conv/matmul test compares: float inputs, their quantized forms, and the float
// result on the dequantized inputs (the integer kernel's exact target, up to bias rounding).
struct QuantizedCase {
  Tensor x_params, xq, bias;
  QuantizedWeights w;
  Tensor dequantized_result;  // f32, bias included
  QuantParams xp;
};

QuantizedCase make_case(const Tensor& x, const Tensor& w, const Tensor& bias, bool per_channel,
                        const std::function<Output(Graph&, Output, Output)>& float_op) {
  QuantizedCase c;
  c.xp = params_covering(x);
  c.x_params = params_tensor(c.xp);
  c.xq = quantize_tensor(x, c.xp);
  c.w = quantize_weights(w, per_channel);
  c.bias = bias;
  c.dequantized_result = run_once(
      [&](Graph& g, const std::vector<Output>& in) {
        return ops::bias_add(g, float_op(g, in[0], in[1]), in[2]);
      },
      {dequantize_tensor(c.xq, c.xp), c.w.dequantized, bias}, "reference");
  return c;
}

// The i32 accumulator times scale_x * scale_w equals the float result on dequantized inputs,
// up to the bias rounding (half a unit) and float rounding.
void expect_accumulator_matches(const QuantizedCase& c, const Tensor& acc) {
  ASSERT_EQ(acc.dtype(), DType::i32);
  ASSERT_EQ(acc.shape(), c.dequantized_result.shape());
  const int64_t channels = acc.dim(-1);
  int bad = 0;
  for (int64_t i = 0; i < acc.numel() && bad < 5; ++i) {
    const double unit = static_cast<double>(c.xp.scale) * channel_scale(c.w.scales, i % channels);
    const double real = acc.data<int32_t>()[i] * unit;
    const double want = c.dequantized_result.data<float>()[i];
    if (std::abs(real - want) > 0.5 * unit + 1e-4 * (1 + std::abs(want))) {
      ADD_FAILURE() << "element " << i << ": integer " << real << " vs float " << want;
      ++bad;
    }
  }
}

// A requantized u8 output is within one unit of rounding the float result.
void expect_requantized_matches(const QuantizedCase& c, const Tensor& y, QuantParams out,
                                const std::string& activation) {
  ASSERT_EQ(y.dtype(), DType::u8);
  ASSERT_EQ(y.shape(), c.dequantized_result.shape());
  int bad = 0, off_by_one = 0;
  for (int64_t i = 0; i < y.numel() && bad < 5; ++i) {
    const int want = expected_u8(c.dequantized_result.data<float>()[i], out, activation);
    const int got = y.data<uint8_t>()[i];
    if (std::abs(got - want) > 1) {
      ADD_FAILURE() << activation << " element " << i << ": got " << got << ", want " << want;
      ++bad;
    }
    off_by_one += got != want;
  }
  // Off-by-one comes only from the bias rounding and near-ties: rare.
  EXPECT_LE(off_by_one, y.numel() / 10 + 1);
}

class QuantizedConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(QuantizedConv, MatchesFloatConvOnDequantizedInputs) {
  const ConvCase& cc = GetParam();
  for (bool per_channel : {true, false}) {
    SCOPED_TRACE(per_channel ? "per channel" : "per tensor");
    const QuantizedCase c = make_case(
        random_tensor(cc.x, 1, -1.0f, 2.0f), random_tensor(cc.w, 2),
        random_tensor({cc.w[3]}, 3),
        per_channel, [&](Graph& g, Output x, Output w) { return ops::conv2d(g, x, w, cc.options); });
    const std::vector<Tensor> inputs = {c.xq, c.x_params, c.w.q, c.w.scales, c.bias};
    const Tensor acc = run_op("QuantizedConv2D", inputs, conv_attrs(cc.options));
    expect_accumulator_matches(c, acc);

    // The output range of the float result, as calibration would pick it.
    const QuantParams out = params_covering(c.dequantized_result);
    for (const char* activation : {"none", "relu", "relu6"}) {
      Attrs a = conv_attrs(cc.options);
      a.set("activation", std::string(activation));
      std::vector<Tensor> with_out = inputs;
      with_out.push_back(params_tensor(out));
      const Tensor fused = run_op("QuantizedConv2DRequantized", with_out, a);
      expect_requantized_matches(c, fused, out, activation);
      // The fused op is exactly Requantize of the accumulator.
      const Tensor split = run_op("Requantize", {acc, c.x_params, c.w.scales, params_tensor(out)},
                                  {{"activation", std::string(activation)}});
      ASSERT_EQ(fused.numel(), split.numel());
      for (int64_t i = 0; i < fused.numel(); ++i)
        ASSERT_EQ(fused.data<uint8_t>()[i], split.data<uint8_t>()[i]) << activation << " " << i;
    }
  }
}

// Against the float conv on the original (unquantized) inputs: the error is what quantizing
// x by scale_x / 2 and w by scale_w / 2 can cause over the taps of one output.
TEST_P(QuantizedConv, CloseToFloatConvOnOriginalInputs) {
  const ConvCase& cc = GetParam();
  const Tensor x = random_tensor(cc.x, 4, -1.0f, 2.0f);
  const Tensor w = random_tensor(cc.w, 5);
  const Tensor bias = random_tensor({cc.w[3]}, 6);
  const QuantizedCase c = make_case(x, w, bias, true, [&](Graph& g, Output xo, Output wo) {
    return ops::conv2d(g, xo, wo, cc.options);
  });
  const Tensor exact = run_once(
      [&](Graph& g, const std::vector<Output>& in) {
        return ops::bias_add(g, ops::conv2d(g, in[0], in[1], cc.options), in[2]);
      },
      {x, w, bias}, "reference");
  const Tensor acc = run_op("QuantizedConv2D", {c.xq, c.x_params, c.w.q, c.w.scales, bias},
                            conv_attrs(cc.options));
  const int64_t taps = cc.w[0] * cc.w[1] * cc.w[2];
  const int64_t channels = acc.dim(-1);
  for (int64_t i = 0; i < acc.numel(); ++i) {
    const double sw = channel_scale(c.w.scales, i % channels);
    const double unit = c.xp.scale * sw;
    const double bound = taps * (2.0 * sw * 127 * c.xp.scale / 2 + 2.0 * sw / 2 +
                                 c.xp.scale * sw / 4) + unit;
    ASSERT_NEAR(acc.data<int32_t>()[i] * unit, exact.data<float>()[i], bound) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QuantizedConv,
    ::testing::Values(
        ConvCase{"size1", {1, 1, 1, 1}, {1, 1, 1, 1}, {}},
        ConvCase{"same3x3_odd_channels", {2, 7, 7, 3}, {3, 3, 3, 5}, {.padding = "SAME"}},
        ConvCase{"stride2_same_primes",
                 {1, 13, 11, 5},
                 {5, 5, 5, 7},
                 {.strides = {2, 2}, .padding = "SAME"}},
        ConvCase{"explicit_uneven",
                 {2, 9, 8, 4},
                 {3, 2, 4, 6},
                 {.strides = {2, 2}, .padding = "EXPLICIT", .pads = {1, 2, 0, 3}}},
        ConvCase{
            "dilation2", {1, 11, 11, 8}, {3, 3, 8, 16}, {.padding = "SAME", .dilations = {2, 2}}},
        ConvCase{"groups2", {2, 7, 7, 6}, {3, 3, 3, 10}, {.padding = "SAME", .groups = 2}},
        ConvCase{"depthwise16", {2, 9, 9, 16}, {3, 3, 1, 16}, {.padding = "SAME", .groups = 16}},
        ConvCase{"depthwise_multiplier2_stride2",
                 {1, 7, 7, 3},
                 {3, 3, 1, 6},
                 {.strides = {2, 2}, .padding = "SAME", .groups = 3}},
        ConvCase{"pointwise", {2, 5, 5, 17}, {1, 1, 17, 33}, {}}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

struct MatMulCase {
  const char* name;
  int64_t m, k, n;
};

void PrintTo(const MatMulCase& c, std::ostream* os) { *os << c.name; }

class QuantizedMatMul : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(QuantizedMatMul, MatchesFloatMatMulOnDequantizedInputs) {
  const MatMulCase& mc = GetParam();
  for (bool per_channel : {true, false}) {
    SCOPED_TRACE(per_channel ? "per channel" : "per tensor");
    const QuantizedCase c =
        make_case(random_tensor({mc.m, mc.k}, 1, -2.0f, 1.0f), random_tensor({mc.k, mc.n}, 2),
                  random_tensor({mc.n}, 3), per_channel,
                  [](Graph& g, Output a, Output b) { return ops::matmul(g, a, b); });
    const std::vector<Tensor> inputs = {c.xq, c.x_params, c.w.q, c.w.scales, c.bias};
    expect_accumulator_matches(c, run_op("QuantizedMatMul", inputs));
    const QuantParams out = params_covering(c.dequantized_result);
    for (const char* activation : {"none", "relu", "relu6"}) {
      std::vector<Tensor> with_out = inputs;
      with_out.push_back(params_tensor(out));
      expect_requantized_matches(
          c,
          run_op("QuantizedMatMulRequantized", with_out, {{"activation", std::string(activation)}}),
          out, activation);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QuantizedMatMul,
    ::testing::Values(MatMulCase{"size1", 1, 1, 1}, MatMulCase{"primes", 7, 13, 5},
                      MatMulCase{"vector_width_pm1", 17, 65, 33}, MatMulCase{"fc", 8, 256, 10}),
    [](const ::testing::TestParamInfo<MatMulCase>& info) { return info.param.name; });

// --- requantization ---

Tensor random_accumulators(const Shape& shape, uint32_t seed, int32_t limit) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(-limit, limit);
  Tensor t(DType::i32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = dist(rng);
  return t;
}

TEST(QuantizedOps, RequantizeWithinOneOfRoundedReal) {
  const Tensor acc = random_accumulators({5, 3, 7}, 1, 200000);
  const QuantParams xp{0.02f, 128};
  const Tensor w_scales = Tensor::from_vector<float>({7}, {1e-3f, 2e-3f, 5e-4f, 3e-3f, 1e-4f,
                                                           7e-3f, 2.5e-3f});
  for (QuantParams out : {QuantParams{0.03f, 100}, QuantParams{0.01f, 0}, QuantParams{1e-4f, 7}})
    for (const char* activation : {"none", "relu", "relu6"}) {
      SCOPED_TRACE(std::string(activation) + " out scale " + std::to_string(out.scale));
      const Tensor y = run_op("Requantize", {acc, params_tensor(xp), w_scales, params_tensor(out)},
                              {{"activation", std::string(activation)}});
      ASSERT_EQ(y.dtype(), DType::u8);
      for (int64_t i = 0; i < acc.numel(); ++i) {
        const double real = acc.data<int32_t>()[i] * double{xp.scale} *
                            w_scales.data<float>()[i % 7];
        ASSERT_LE(std::abs(y.data<uint8_t>()[i] - expected_u8(real, out, activation)), 1)
            << "element " << i << " real " << real;
      }
    }
}

TEST(QuantizedOps, Relu6ClampsAtSix) {
  const QuantParams out{0.05f, 20};
  const Tensor acc = Tensor::from_vector<int32_t>({3}, {1000000, -1000000, 0});
  const Tensor y = run_op("Requantize",
                          {acc, params_tensor({1.0f, 0}), Tensor::from_vector<float>({1}, {1.0f}),
                           params_tensor(out)},
                          {{"activation", std::string("relu6")}});
  EXPECT_EQ(y.data<uint8_t>()[0], 20 + 120);
  EXPECT_EQ(y.data<uint8_t>()[1], 20);
  EXPECT_EQ(y.data<uint8_t>()[2], 20);
}

TEST(QuantizedOps, RequantizationRangeIsTheRealRangeWithZero) {
  const Tensor acc = random_accumulators({4, 6}, 2, 50000);
  const QuantParams xp{0.01f, 3};
  const Tensor w_scales = Tensor::from_vector<float>({6}, {1e-3f, 2e-3f, 5e-4f, 3e-3f, 1e-2f, 4e-3f});
  for (const char* activation : {"none", "relu", "relu6"}) {
    double lo = 0, hi = 0;
    for (int64_t i = 0; i < acc.numel(); ++i) {
      double real = acc.data<int32_t>()[i] * double{xp.scale} * w_scales.data<float>()[i % 6];
      if (std::string(activation) != "none") real = std::max(real, 0.0);
      if (std::string(activation) == "relu6") real = std::min(real, 6.0);
      lo = std::min(lo, real);
      hi = std::max(hi, real);
    }
    const QuantParams want = choose_quant_params(static_cast<float>(lo), static_cast<float>(hi));
    const QuantParams got = params_of(run_op("RequantizationRange",
                                             {acc, params_tensor(xp), w_scales},
                                             {{"activation", std::string(activation)}}));
    EXPECT_FLOAT_EQ(got.scale, want.scale) << activation;
    EXPECT_EQ(got.zero_point, want.zero_point) << activation;
  }
}

// --- pooling, add, concat ---

Attrs pool_attrs(const ops::PoolOptions& o) {
  return {{"ksize", o.ksize}, {"strides", o.strides}, {"padding", o.padding}, {"pads", o.pads}};
}

TEST(QuantizedOps, PoolsMatchFloatPoolsOnTheCodes) {
  const std::vector<std::pair<Shape, ops::PoolOptions>> cases = {
      {{1, 1, 1, 1}, {.ksize = {1, 1}, .strides = {1, 1}}},
      {{2, 7, 7, 3}, {.ksize = {3, 3}, .strides = {2, 2}, .padding = "SAME"}},
      {{1, 8, 5, 5}, {.ksize = {2, 2}, .strides = {2, 2}}},
      {{1, 9, 8, 4},
       {.ksize = {3, 2}, .strides = {2, 1}, .padding = "EXPLICIT", .pads = {1, 1, 0, 1}}}};
  for (const auto& [shape, options] : cases) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor q = random_u8(shape, 7);
    Tensor codes(DType::f32, shape);
    for (int64_t i = 0; i < q.numel(); ++i) codes.data<float>()[i] = q.data<uint8_t>()[i];
    const Tensor max_q = run_op("QuantizedMaxPool", {q}, pool_attrs(options));
    const Tensor avg_q = run_op("QuantizedAvgPool", {q}, pool_attrs(options));
    const Tensor max_f = run_once(
        [&](Graph& g, const std::vector<Output>& in) { return ops::max_pool(g, in[0], options); },
        {codes}, "reference");
    const Tensor avg_f = run_once(
        [&](Graph& g, const std::vector<Output>& in) { return ops::avg_pool(g, in[0], options); },
        {codes}, "reference");
    ASSERT_EQ(max_q.shape(), max_f.shape());
    ASSERT_EQ(avg_q.dtype(), DType::u8);
    for (int64_t i = 0; i < max_q.numel(); ++i) {
      EXPECT_EQ(max_q.data<uint8_t>()[i], max_f.data<float>()[i]) << i;
      // Codes average like reals (same params); ties round away from zero.
      EXPECT_EQ(avg_q.data<uint8_t>()[i], std::round(avg_f.data<float>()[i])) << i;
    }
  }
}

TEST(QuantizedOps, AddWithinOneOfRoundedRealSum) {
  const Shape shape{3, 5, 7};
  const Tensor a = random_u8(shape, 1);
  const Tensor b = random_u8(shape, 2);
  const std::vector<std::vector<QuantParams>> param_sets = {
      {{0.02f, 128}, {0.05f, 10}, {0.06f, 90}},
      {{0.1f, 0}, {0.1f, 0}, {0.2f, 0}},
      {{0.003f, 255}, {0.5f, 3}, {0.4f, 50}}};
  for (const auto& ps : param_sets)
    for (const char* activation : {"none", "relu", "relu6"}) {
      SCOPED_TRACE(activation);
      const Tensor y = run_op(
          "QuantizedAdd",
          {a, params_tensor(ps[0]), b, params_tensor(ps[1]), params_tensor(ps[2])},
          {{"activation", std::string(activation)}});
      for (int64_t i = 0; i < y.numel(); ++i) {
        const double real = dequantize_value(a.data<uint8_t>()[i], ps[0]) +
                            double{dequantize_value(b.data<uint8_t>()[i], ps[1])};
        ASSERT_LE(std::abs(y.data<uint8_t>()[i] - expected_u8(real, ps[2], activation)), 1)
            << "element " << i << " real " << real;
      }
    }
}

TEST(QuantizedOps, ConcatRequantizesEachInput) {
  const QuantParams out{0.05f, 40};
  const std::vector<QuantParams> ps = {out, {0.02f, 128}, {0.11f, 3}};
  const std::vector<Shape> shapes = {{2, 3, 4}, {2, 1, 4}, {2, 5, 4}};
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < ps.size(); ++i) {
    inputs.push_back(random_u8(shapes[i], static_cast<uint32_t>(i + 1)));
    inputs.push_back(params_tensor(ps[i]));
  }
  inputs.push_back(params_tensor(out));
  const Tensor y = run_op("QuantizedConcat", inputs, {{"axis", int64_t{-2}}});
  ASSERT_EQ(y.shape(), (Shape{2, 9, 4}));
  for (int64_t b = 0; b < 2; ++b) {
    int64_t row = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      const Tensor& x = inputs[2 * i];
      for (int64_t r = 0; r < x.dim(1); ++r, ++row)
        for (int64_t c = 0; c < 4; ++c) {
          const uint8_t xq = x.data<uint8_t>()[(b * x.dim(1) + r) * 4 + c];
          const int got = y.data<uint8_t>()[(b * 9 + row) * 4 + c];
          if (i == 0) {
            ASSERT_EQ(got, xq);  // same params: copied
          } else {
            const int want = expected_u8(dequantize_value(xq, ps[i]), out, "none");
            ASSERT_LE(std::abs(got - want), 1) << "input " << i;
          }
        }
    }
  }
}

// --- shape errors ---

TEST(QuantizedOps, ShapeErrorsAreOneLineNamingTheNode) {
  const TensorType params{DType::f32, {2}};
  const TensorType x{DType::u8, {1, 8, 8, 4}};
  const TensorType w{DType::i8, {3, 3, 4, 6}};
  const TensorType scales{DType::f32, {6}};
  const TensorType bias{DType::f32, {6}};
  expect_one_line_naming_node(add_error("QuantizedConv2D", {{DType::f32, {1, 8, 8, 4}}, params, w,
                                                            scales, bias}),
                              "QuantizedConv2D", "input 'x' must be u8");
  expect_one_line_naming_node(
      add_error("QuantizedConv2D", {x, params, {DType::i8, {3, 3, 5, 6}}, scales, bias}),
      "QuantizedConv2D", "expects 5 input channels");
  expect_one_line_naming_node(
      add_error("QuantizedConv2D", {x, params, w, {DType::f32, {4}}, bias}), "QuantizedConv2D",
      "w_scales");
  expect_one_line_naming_node(
      add_error("QuantizedConv2D", {x, {DType::f32, {3}}, w, scales, bias}), "QuantizedConv2D",
      "x_params");
  expect_one_line_naming_node(
      add_error("QuantizedConv2DRequantized", {x, params, w, scales, {DType::f32, {5}}, params},
                {{"activation", std::string("none")}}),
      "QuantizedConv2DRequantized", "bias");
  expect_one_line_naming_node(
      add_error("QuantizedConv2DRequantized", {x, params, w, scales, bias, params},
                {{"activation", std::string("gelu")}}),
      "QuantizedConv2DRequantized", "activation 'gelu'");
  expect_one_line_naming_node(
      add_error("QuantizedMatMul", {{DType::u8, {4, 7}}, params, {DType::i8, {6, 3}},
                                    {DType::f32, {3}}, {DType::f32, {3}}}),
      "QuantizedMatMul", "inner dimensions differ");
  expect_one_line_naming_node(
      add_error("Requantize", {{DType::i32, {4, 6}}, params, {DType::f32, {5}}, params}),
      "Requantize", "w_scales");
  expect_one_line_naming_node(
      add_error("QuantizedAdd", {x, params, {DType::u8, {1, 8, 8, 3}}, params, params}),
      "QuantizedAdd", "same shape");
  expect_one_line_naming_node(add_error("QuantizedConcat", {x, params, x, params}, {{"axis", int64_t{3}}}),
                              "QuantizedConcat", "odd number");
  expect_one_line_naming_node(
      add_error("QuantizedConcat", {x, params, {DType::u8, {1, 7, 8, 4}}, params, params},
                {{"axis", int64_t{3}}}),
      "QuantizedConcat", "shapes must match except on axis 3");
  Attrs avg = pool_attrs({});
  avg.set("count_include_pad", true);
  expect_one_line_naming_node(add_error("QuantizedAvgPool", {x}, avg), "QuantizedAvgPool",
                              "count_include_pad");
  expect_one_line_naming_node(add_error("Dequantize", {{DType::i8, {3}}, params}), "Dequantize",
                              "input 'q' must be u8");
}

TEST(QuantizedOps, BuildersMakeTheDeclaredOps) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {1, 6, 6, 3});
  Output params = ops::choose_qparams(g, x);
  Output q = ops::quantize(g, x, params);
  Output w = ops::placeholder(g, DType::i8, {3, 3, 3, 4});
  Output ws = ops::placeholder(g, DType::f32, {4});
  Output bias = ops::placeholder(g, DType::f32, {4});
  Output acc = ops::quantized_conv2d(g, {q, params, w, ws, bias}, {.padding = "SAME"});
  EXPECT_EQ(g.type(acc), (TensorType{DType::i32, {1, 6, 6, 4}}));
  Output out_params = ops::requantization_range(g, acc, params, ws, Activation::Relu);
  Output y = ops::requantize(g, acc, params, ws, out_params, Activation::Relu);
  Output pooled = ops::quantized_max_pool(g, y);
  EXPECT_EQ(g.type(pooled), (TensorType{DType::u8, {1, 3, 3, 4}}));
  Output sum = ops::quantized_add(g, y, out_params, y, out_params, out_params);
  Output cat = ops::quantized_concat(g, {{y, out_params}, {sum, out_params}}, out_params, 3);
  EXPECT_EQ(g.type(cat), (TensorType{DType::u8, {1, 6, 6, 8}}));
  EXPECT_EQ(g.type(ops::dequantize(g, cat, out_params)).dtype, DType::f32);
}

}  // namespace
}  // namespace sf
