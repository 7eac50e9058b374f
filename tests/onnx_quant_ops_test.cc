// The ops with ONNX's quantization semantics (ops/onnx_quant_ops.h): QuantizeLinear and
// DequantizeLinear against their scalar definitions (rounding half to even, saturation, per
// axis), DynamicQuantizeLinear, and the integer convs and matmuls against the float ops run on
// the zero-point-shifted values (exact: every sum here is far below 2^24).
#include "ops/onnx_quant_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/graph.h"
#include "ops/ops.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::random_tensor;
using testing::run_once;

template <typename T>
Tensor random_ints(const Shape& shape, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  Tensor t(dtype_of<T>(), shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<T>()[i] = static_cast<T>(dist(rng));
  return t;
}

Tensor random_8bit(DType dtype, const Shape& shape, uint32_t seed) {
  return dtype == DType::u8 ? random_ints<uint8_t>(shape, seed, 0, 255)
                            : random_ints<int8_t>(shape, seed, -128, 127);
}

std::vector<int64_t> ints_of(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype()) {
      case DType::u8:
        v[i] = t.data<uint8_t>()[i];
        break;
      case DType::i8:
        v[i] = t.data<int8_t>()[i];
        break;
      case DType::i32:
        v[i] = t.data<int32_t>()[i];
        break;
      default:
        ADD_FAILURE() << "not an integer tensor";
    }
  }
  return v;
}

// The values as f32 minus a zero point per index of the last axis (one value: per tensor).
Tensor shifted_f32(const Tensor& t, const std::vector<int64_t>& zero_point) {
  const std::vector<int64_t> v = ints_of(t);
  Tensor f(DType::f32, t.shape());
  const size_t last = static_cast<size_t>(t.dim(-1));
  for (size_t i = 0; i < v.size(); ++i)
    f.data<float>()[i] =
        static_cast<float>(v[i] - zero_point[zero_point.size() == 1 ? 0 : i % last]);
  return f;
}

Tensor scalar_like(DType dtype, int64_t value) {
  Tensor t(dtype, {});
  if (dtype == DType::u8) t.data<uint8_t>()[0] = static_cast<uint8_t>(value);
  if (dtype == DType::i8) t.data<int8_t>()[0] = static_cast<int8_t>(value);
  return t;
}

// ONNX's QuantizeLinear for one element.
int64_t quantize_reference(float x, float scale, int64_t zero_point, DType dtype) {
  const double lo = dtype == DType::u8 ? 0 : -128, hi = dtype == DType::u8 ? 255 : 127;
  return static_cast<int64_t>(
      std::clamp(static_cast<double>(std::nearbyint(x / scale)) + zero_point, lo, hi));
}

Tensor quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, int64_t axis) {
  return run_once(
      [axis](Graph& g, const std::vector<Output>& in) {
        return ops::quantize_linear(g, in[0], in[1], in[2], axis, "q");
      },
      {x, scale, zero_point});
}

Tensor dequantize(const Tensor& q, const Tensor& scale, const Tensor& zero_point, int64_t axis) {
  return run_once(
      [axis](Graph& g, const std::vector<Output>& in) {
        return ops::dequantize_linear(g, in[0], in[1], in[2], axis, "dq");
      },
      {q, scale, zero_point});
}

TEST(OnnxQuantOps, QuantizeLinearPerTensorMatchesDefinitionOnRandomShapes) {
  std::mt19937 rng(3);
  for (DType dtype : {DType::u8, DType::i8}) {
    for (uint32_t seed = 0; seed < 6; ++seed) {
      Shape shape;
      const int rank = 1 + static_cast<int>(rng() % 4);
      for (int d = 0; d < rank; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % 5));
      const Tensor x = random_tensor(shape, seed, -3.0f, 3.0f);
      const float scale = 0.01f + 0.02f * static_cast<float>(seed);
      const int64_t zero_point = (dtype == DType::u8 ? 100 : -5) + static_cast<int64_t>(seed);
      const Tensor y = quantize(x, Tensor::scalar_f32(scale), scalar_like(dtype, zero_point), 1);
      ASSERT_EQ(y.dtype(), dtype);
      ASSERT_EQ(y.shape(), shape);
      const std::vector<int64_t> got = ints_of(y);
      for (int64_t i = 0; i < x.numel(); ++i)
        ASSERT_EQ(got[static_cast<size_t>(i)],
                  quantize_reference(x.data<float>()[i], scale, zero_point, dtype))
            << "element " << i << " of " << shape_str(shape) << " (" << dtype_name(dtype) << ")";
    }
  }
}

TEST(OnnxQuantOps, QuantizeLinearRoundsHalfToEven) {
  const Tensor x =
      Tensor::from_vector<float>({8}, {0.5f, 1.5f, 2.5f, 3.5f, -0.5f, -1.5f, -2.5f, 2.4999f});
  const Tensor y = quantize(x, Tensor::scalar_f32(1.0f), scalar_like(DType::i8, 0), 1);
  EXPECT_EQ(ints_of(y), (std::vector<int64_t>{0, 2, 2, 4, 0, -2, -2, 2}));
  // Ties after the division: 5 / 2 = 2.5 -> 2, 7 / 2 = 3.5 -> 4, then the zero point.
  const Tensor x2 = Tensor::from_vector<float>({2}, {5.0f, 7.0f});
  const Tensor y2 = quantize(x2, Tensor::scalar_f32(2.0f), scalar_like(DType::u8, 10), 1);
  EXPECT_EQ(ints_of(y2), (std::vector<int64_t>{12, 14}));
}

TEST(OnnxQuantOps, QuantizeLinearSaturates) {
  const Tensor x = Tensor::from_vector<float>({4}, {1e6f, -1e6f, 300.0f, -300.0f});
  EXPECT_EQ(ints_of(quantize(x, Tensor::scalar_f32(1.0f), scalar_like(DType::u8, 128), 1)),
            (std::vector<int64_t>{255, 0, 255, 0}));
  EXPECT_EQ(ints_of(quantize(x, Tensor::scalar_f32(1.0f), scalar_like(DType::i8, 0), 1)),
            (std::vector<int64_t>{127, -128, 127, -128}));
}

TEST(OnnxQuantOps, QuantizeAndDequantizePerAxis) {
  const Shape shape{2, 3, 4, 5};
  const Tensor x = random_tensor(shape, 11, -2.0f, 2.0f);
  for (int64_t axis : {0, 1, 2, 3, -1, -3}) {
    const int64_t a = axis < 0 ? axis + 4 : axis;
    const int64_t extent = shape[static_cast<size_t>(a)];
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(a) + 1; d < 4; ++d) inner *= shape[d];
    std::vector<float> scales;
    std::vector<int8_t> zeros;
    for (int64_t c = 0; c < extent; ++c) {
      scales.push_back(0.01f * static_cast<float>(c + 1));
      zeros.push_back(static_cast<int8_t>(c * 3 - 4));
    }
    const Tensor scale = Tensor::from_vector<float>({extent}, scales);
    const Tensor zero = Tensor::from_vector<int8_t>({extent}, zeros);
    const Tensor q = quantize(x, scale, zero, axis);
    const Tensor back = dequantize(q, scale, zero, axis);
    const std::vector<int64_t> got = ints_of(q);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const size_t c = static_cast<size_t>(i / inner % extent);
      const int64_t want = quantize_reference(x.data<float>()[i], scales[c], zeros[c], DType::i8);
      ASSERT_EQ(got[static_cast<size_t>(i)], want) << "axis " << axis << " element " << i;
      ASSERT_EQ(back.data<float>()[i], static_cast<float>(want - zeros[c]) * scales[c]);
    }
  }
}

TEST(OnnxQuantOps, DequantizeLinearI32AndU8) {
  const Tensor acc = Tensor::from_vector<int32_t>({3}, {-1000000, 0, 123456});
  Tensor zero(DType::i32, {});
  zero.data<int32_t>()[0] = 0;
  const Tensor y = dequantize(acc, Tensor::scalar_f32(0.5f), zero, 1);
  EXPECT_EQ(y.data<float>()[0], -500000.0f);
  EXPECT_EQ(y.data<float>()[2], 61728.0f);
  const Tensor q = Tensor::from_vector<uint8_t>({4}, {0, 3, 128, 255});
  const Tensor f = dequantize(q, Tensor::scalar_f32(2.0f), scalar_like(DType::u8, 128), 1);
  EXPECT_EQ(std::vector<float>(f.data<float>(), f.data<float>() + 4),
            (std::vector<float>{-256.0f, -250.0f, 0.0f, 254.0f}));
}

TEST(OnnxQuantOps, DynamicQuantizeLinear) {
  auto run = [](const Tensor& x, int output) {
    return run_once(
        [output](Graph& g, const std::vector<Output>& in) {
          const Output y = ops::dynamic_quantize_linear(g, in[0], "dql");
          return Output{y.node, output};
        },
        {x});
  };
  const Tensor x = Tensor::from_vector<float>({6}, {0.0f, 2.0f, -3.0f, -2.5f, 1.34f, 0.5f});
  EXPECT_EQ(ints_of(run(x, 0)), (std::vector<int64_t>{153, 255, 0, 26, 221, 179}));
  EXPECT_FLOAT_EQ(run(x, 1).data<float>()[0], 5.0f / 255.0f);
  EXPECT_EQ(run(x, 2).data<uint8_t>()[0], 153);
  // No range at all: scale 1, zero point 0, so everything stays finite.
  const Tensor zeros = Tensor::from_vector<float>({3}, {0.0f, 0.0f, 0.0f});
  EXPECT_EQ(run(zeros, 1).data<float>()[0], 1.0f);
  EXPECT_EQ(run(zeros, 2).data<uint8_t>()[0], 0);
  EXPECT_EQ(ints_of(run(zeros, 0)), (std::vector<int64_t>{0, 0, 0}));
}

struct ConvCase {
  Shape x, w;
  ops::Conv2DOptions options;
  DType x_dtype, w_dtype;
  bool per_channel;
};

TEST(OnnxQuantOps, ConvInteger2DMatchesFloatConvOnShiftedValues) {
  ops::Conv2DOptions strided;
  strided.strides = {2, 1};
  strided.padding = "EXPLICIT";
  strided.pads = {1, 0, 2, 1};
  ops::Conv2DOptions grouped;
  grouped.groups = 2;
  grouped.padding = "SAME";
  grouped.dilations = {2, 1};
  const std::vector<ConvCase> cases{
      {{1, 5, 6, 3}, {3, 3, 3, 4}, {}, DType::u8, DType::u8, false},
      {{2, 7, 5, 2}, {2, 3, 2, 5}, strided, DType::u8, DType::i8, true},
      {{1, 6, 6, 4}, {3, 2, 2, 6}, grouped, DType::i8, DType::i8, true},
      {{3, 4, 4, 1}, {1, 1, 1, 2}, {}, DType::i8, DType::u8, false},
  };
  uint32_t seed = 20;
  for (const ConvCase& k : cases) {
    const Tensor x = random_8bit(k.x_dtype, k.x, ++seed);
    const Tensor w = random_8bit(k.w_dtype, k.w, ++seed);
    const int64_t channels = k.w.back();
    const Tensor x_zero = scalar_like(k.x_dtype, k.x_dtype == DType::u8 ? 131 : -7);
    Tensor w_zero = random_8bit(k.w_dtype, {k.per_channel ? channels : 1}, ++seed);
    const Tensor y = run_once(
        [&](Graph& g, const std::vector<Output>& in) {
          return ops::conv_integer2d(g, in[0], in[1], in[2], in[3], k.options, "conv");
        },
        {x, w, x_zero, w_zero});
    const Tensor want = run_once(
        [&](Graph& g, const std::vector<Output>& in) {
          return ops::conv2d(g, in[0], in[1], k.options, "conv");
        },
        {shifted_f32(x, ints_of(x_zero)), shifted_f32(w, ints_of(w_zero))});
    ASSERT_EQ(y.dtype(), DType::i32);
    ASSERT_EQ(y.shape(), want.shape());
    for (int64_t i = 0; i < y.numel(); ++i)
      ASSERT_EQ(y.data<int32_t>()[i], static_cast<int32_t>(want.data<float>()[i]))
          << "case x " << shape_str(k.x) << " element " << i;
  }
}

TEST(OnnxQuantOps, MatMulIntegerBroadcastsBatchesAndZeroPointsPerRowAndColumn) {
  const Tensor a = random_8bit(DType::u8, {2, 1, 3, 4}, 40);
  const Tensor b = random_8bit(DType::i8, {3, 4, 5}, 41);
  const Tensor a_zero = Tensor::from_vector<uint8_t>({3}, {10, 128, 250});
  const Tensor b_zero = Tensor::from_vector<int8_t>({5}, {0, -3, 7, 127, -128});
  const Tensor y = run_once(
      [](Graph& g, const std::vector<Output>& in) {
        return ops::matmul_integer(g, in[0], in[1], in[2], in[3], "mm");
      },
      {a, b, a_zero, b_zero});
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3, 5}));
  const std::vector<int64_t> av = ints_of(a), bv = ints_of(b), yv = ints_of(y);
  const std::vector<int64_t> az = ints_of(a_zero), bz = ints_of(b_zero);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t col = 0; col < 5; ++col) {
          int64_t acc = 0;
          for (int64_t p = 0; p < 4; ++p)
            acc += (av[static_cast<size_t>((i * 3 + r) * 4 + p)] - az[static_cast<size_t>(r)]) *
                   (bv[static_cast<size_t>((j * 4 + p) * 5 + col)] - bz[static_cast<size_t>(col)]);
          ASSERT_EQ(yv[static_cast<size_t>(((i * 3 + j) * 3 + r) * 5 + col)], acc);
        }
}

// QLinearMatMul of 1x1 matrices: acc = a * 1, multiplier 1 * 1 / 2, so odd a land on ties.
TEST(OnnxQuantOps, QLinearMatMulRoundsHalfToEvenAndSaturates) {
  const Tensor a = Tensor::from_vector<uint8_t>({6, 1}, {1, 3, 5, 7, 200, 0});
  const Tensor b = Tensor::from_vector<uint8_t>({1, 1}, {1});
  const Tensor y = run_once(
      [](Graph& g, const std::vector<Output>& in) {
        return ops::qlinear_matmul(g, {in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7]},
                                   "qmm");
      },
      {a, Tensor::scalar_f32(1.0f), scalar_like(DType::u8, 0), b, Tensor::scalar_f32(1.0f),
       scalar_like(DType::u8, 0), Tensor::scalar_f32(2.0f), scalar_like(DType::i8, 20)});
  ASSERT_EQ(y.dtype(), DType::i8);
  // 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 3.5 -> 4, then + 20; 100 + 20 saturates at 127.
  EXPECT_EQ(ints_of(y), (std::vector<int64_t>{20, 22, 22, 24, 120, 20}));
}

// QLinearConv2D = requantized ConvInteger2D plus bias, per output channel.
TEST(OnnxQuantOps, QLinearConv2DRequantizesConvIntegerPerChannel) {
  const Tensor x = random_8bit(DType::u8, {1, 5, 5, 3}, 50);
  const Tensor w = random_8bit(DType::i8, {3, 3, 3, 4}, 51);
  const Tensor x_zero = scalar_like(DType::u8, 120);
  const Tensor w_zero = Tensor::from_vector<int8_t>({4}, {0, 1, -2, 3});
  const Tensor w_scale = Tensor::from_vector<float>({4}, {0.002f, 0.004f, 0.003f, 0.001f});
  const Tensor bias = Tensor::from_vector<int32_t>({4}, {1000, -2000, 0, 5});
  const float x_scale = 0.05f, y_scale = 0.5f;
  ops::Conv2DOptions options;
  options.padding = "SAME";
  const Tensor y = run_once(
      [&](Graph& g, const std::vector<Output>& in) {
        return ops::qlinear_conv2d(g, {in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7]},
                                   in[8], options, "qc");
      },
      {x, Tensor::scalar_f32(x_scale), x_zero, w, w_scale, w_zero, Tensor::scalar_f32(y_scale),
       scalar_like(DType::u8, 128), bias});
  const Tensor acc = run_once(
      [&](Graph& g, const std::vector<Output>& in) {
        return ops::conv_integer2d(g, in[0], in[1], in[2], in[3], options, "conv");
      },
      {x, w, x_zero, w_zero});
  ASSERT_EQ(y.shape(), acc.shape());
  for (int64_t i = 0; i < y.numel(); ++i) {
    const size_t c = static_cast<size_t>(i % 4);
    const float multiplier = x_scale * w_scale.data<float>()[c] / y_scale;
    const double real =
        static_cast<double>(acc.data<int32_t>()[i] + bias.data<int32_t>()[c]) * multiplier;
    const int64_t want = static_cast<int64_t>(std::clamp(std::nearbyint(real) + 128, 0.0, 255.0));
    ASSERT_EQ(y.data<uint8_t>()[i], want) << "element " << i;
  }
}

// Shape errors are one line naming the node.
void expect_error(const std::function<void(Graph&)>& build, const std::string& part) {
  Graph g;
  try {
    build(g);
    FAIL() << "no error; expected one containing '" << part << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
    EXPECT_NE(msg.find("node 'bad'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(OnnxQuantOps, ShapeErrorsNameTheNode) {
  auto f32 = [](Graph& g, Shape s) { return ops::placeholder(g, DType::f32, std::move(s)); };
  auto u8 = [](Graph& g, Shape s) { return ops::placeholder(g, DType::u8, std::move(s)); };
  auto i8 = [](Graph& g, Shape s) { return ops::placeholder(g, DType::i8, std::move(s)); };
  expect_error(
      [&](Graph& g) {
        ops::quantize_linear(g, f32(g, {2, 3}), f32(g, {4}), u8(g, {4}), 1, "bad");
      },
      "one per index of x's axis");
  expect_error(
      [&](Graph& g) {
        ops::quantize_linear(g, f32(g, {2, 3}), f32(g, {3}), u8(g, {3}), 2, "bad");
      },
      "axis 2 is out of range");
  expect_error(
      [&](Graph& g) {
        ops::dequantize_linear(g, u8(g, {2, 3}), f32(g, {}), i8(g, {}), 1, "bad");
      },
      "same dtype");
  expect_error(
      [&](Graph& g) {
        ops::conv_integer2d(g, u8(g, {1, 4, 4, 3}), i8(g, {3, 3, 3, 2}), u8(g, {}), i8(g, {3}), {},
                            "bad");
      },
      "one per output channel");
}

}  // namespace
}  // namespace sf
