// Weights-only quantization: the codec's error bounds and bit packing, .sfm files with encoded
// weights (round trip, strict validation), and `slimflow quantize` on the command line.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "cpu/cpu_features.h"
#include "modelfile/model_file.h"
#include "ops/ops.h"
#include "codec/weight_codec.h"
#include "quantize/weight_quantizer.h"
#include "runtime/model_to_run.h"
#include "runtime/session.h"
#include "support/cli.h"
#include "support/mnist.h"
#include "support/model_bytes.h"
#include "support/testing.h"
#include "transforms/inference_passes.h"
#include "support/temp_files.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::read_file_bytes;
using testing::write_file_bytes;

using json = nlohmann::json;
using quant::Encoding;

Tensor gaussian_tensor(Shape shape, uint32_t seed, float stddev = 1.0f) {
  Tensor t(DType::f32, std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

double mean_squared_error(const Tensor& a, const Tensor& b) {
  double sum = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double e = static_cast<double>(a.data<float>()[i]) - b.data<float>()[i];
    sum += e * e;
  }
  return sum / static_cast<double>(a.numel());
}

// Every element decodes within half a step of its channel's scale (plus float rounding).
void expect_within_half_step(const Tensor& x, const quant::EncodedTensor& e) {
  const Tensor y = quant::decode(e);
  ASSERT_EQ(y.shape(), x.shape());
  const Shape& s = x.shape();
  const int axis = e.encoding.axis;
  int64_t inner = 1;
  if (axis != quant::kNoAxis)
    for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); ++i) inner *= s[i];
  for (int64_t i = 0; i < x.numel(); ++i) {
    const size_t c = axis == quant::kNoAxis
                         ? 0
                         : static_cast<size_t>((i / inner) % s[static_cast<size_t>(axis)]);
    const double scale = e.encoding.scales[c];
    const double v = x.data<float>()[i];
    const double err = std::abs(v - y.data<float>()[i]);
    ASSERT_LE(err, scale / 2 * (1 + 1e-5) + 1e-6 * std::abs(v))
        << "element " << i << " channel " << c << " bits " << e.encoding.bits;
  }
}

// --- the codec ---

TEST(WeightCodecTest, LinearPerTensorIsWithinHalfAStepForEveryBitWidth) {
  // Odd element counts leave partial bytes at the end of the packed data.
  for (const Shape& shape : {Shape{7, 13}, Shape{3, 5, 7}, Shape{257}, Shape{1}}) {
    for (int bits = quant::kMinBits; bits <= quant::kMaxBits; ++bits) {
      const Tensor x = testing::random_tensor(shape, static_cast<uint32_t>(bits), -0.7f, 1.9f);
      const quant::EncodedTensor e = quant::encode_linear(x, bits);
      EXPECT_EQ(e.data.size(), (static_cast<size_t>(x.numel()) * bits + 7) / 8);
      ASSERT_EQ(e.encoding.scales.size(), 1u);
      EXPECT_GT(e.encoding.scales[0], 0.0f);
      EXPECT_LE(e.encoding.zero_points[0], (1 << bits) - 1);
      expect_within_half_step(x, e);
    }
  }
}

TEST(WeightCodecTest, LinearPerChannelIsWithinHalfAStepOfEachChannelsScale) {
  for (int bits = quant::kMinBits; bits <= quant::kMaxBits; ++bits) {
    Tensor x = gaussian_tensor({3, 3, 5, 7}, 40 + static_cast<uint32_t>(bits));
    // Channels of very different magnitudes, one all positive and one all zero.
    for (int64_t i = 0; i < x.numel(); ++i) {
      float& v = x.data<float>()[i];
      const int64_t c = i % 7;
      v *= std::pow(4.0f, static_cast<float>(c - 3));
      if (c == 5) v = std::abs(v) + 1.0f;
      if (c == 6) v = 0.0f;
    }
    for (int axis : {0, 1, 3}) {
      const quant::EncodedTensor e = quant::encode_linear(x, bits, axis);
      ASSERT_EQ(e.encoding.scales.size(), static_cast<size_t>(x.dim(axis)));
      EXPECT_TRUE(e.encoding.per_channel());
      expect_within_half_step(x, e);
    }
    const quant::EncodedTensor last = quant::encode_linear(x, bits, 3);
    const Tensor y = quant::decode(last);
    for (int64_t i = 6; i < x.numel(); i += 7) EXPECT_EQ(y.data<float>()[i], 0.0f);
    // Per channel is never worse than per tensor on such data.
    EXPECT_LT(mean_squared_error(x, y),
              mean_squared_error(x, quant::decode(quant::encode_linear(x, bits))));
  }
}

TEST(WeightCodecTest, PackingIsLittleEndianWithoutPadding) {
  // Values 0..qmax with a zero minimum: scale 1, zero point 0, so the indices are the values.
  for (int bits = quant::kMinBits; bits <= quant::kMaxBits; ++bits) {
    const int levels = 1 << bits;
    Tensor x(DType::f32, {levels * 3 + 1});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % levels);
    const quant::EncodedTensor e = quant::encode_linear(x, bits);
    ASSERT_EQ(e.encoding.scales[0], 1.0f);
    ASSERT_EQ(e.encoding.zero_points[0], 0);
    // Element k occupies stream bits [k * bits, (k + 1) * bits).
    for (int64_t k = 0; k < x.numel(); ++k) {
      uint32_t q = 0;
      for (int b = 0; b < bits; ++b) {
        const int64_t bit = k * bits + b;
        q |= static_cast<uint32_t>((e.data[static_cast<size_t>(bit / 8)] >> (bit % 8)) & 1) << b;
      }
      ASSERT_EQ(q, static_cast<uint32_t>(k % levels)) << "bits " << bits << " element " << k;
    }
    const Tensor y = quant::decode(e);
    EXPECT_EQ(std::memcmp(x.raw(), y.raw(), x.bytes()), 0) << "bits " << bits;
  }
  // Concrete bytes: 3-bit indices 1, 2, 7 -> 0b11'010'001, then the last bit of 7.
  Tensor three = Tensor::from_vector<float>({3}, {1, 2, 7});
  EXPECT_EQ(quant::encode_linear(three, 3).data, (std::vector<uint8_t>{0xd1, 0x01}));
}

TEST(WeightCodecTest, KmeansBeatsLinearOnGaussianWeights) {
  const Tensor x = gaussian_tensor({5001}, 7, 0.05f);
  for (int bits = quant::kMinBits; bits <= quant::kMaxBits; ++bits) {
    const quant::EncodedTensor k = quant::encode_kmeans(x, bits);
    ASSERT_EQ(k.encoding.codebook.size(), size_t{1} << bits);
    EXPECT_EQ(k.data.size(), (5001u * bits + 7) / 8);
    const double kmeans_error = mean_squared_error(x, quant::decode(k));
    const double linear_error = mean_squared_error(x, quant::decode(quant::encode_linear(x, bits)));
    EXPECT_LE(kmeans_error, linear_error) << "bits " << bits;
    // Deterministic: the same tensor gives the same bytes.
    const quant::EncodedTensor again = quant::encode_kmeans(x, bits);
    EXPECT_EQ(again.data, k.data);
    EXPECT_EQ(again.encoding.codebook, k.encoding.codebook);
  }
}

TEST(WeightCodecTest, KmeansIsExactWithFewDistinctValues) {
  std::mt19937 rng(3);
  for (int bits = quant::kMinBits; bits <= quant::kMaxBits; ++bits) {
    const int distinct = (1 << bits) - (bits % 2);  // exactly 2^bits, or one fewer
    std::vector<float> values(static_cast<size_t>(distinct));
    for (float& v : values) v = std::normal_distribution<float>(0, 1)(rng);
    Tensor x(DType::f32, {1001});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = values[rng() % values.size()];
    const Tensor y = quant::decode(quant::encode_kmeans(x, bits));
    EXPECT_EQ(std::memcmp(x.raw(), y.raw(), x.bytes()), 0) << "bits " << bits;
  }
}

TEST(WeightCodecTest, KmeansHandlesClustersThatWouldBeEmpty) {
  // Most values near 0, a few far out: evenly spaced starting centroids leave most empty.
  Tensor x = gaussian_tensor({4000}, 11, 0.01f);
  x.data<float>()[0] = 100.0f;
  x.data<float>()[1] = -50.0f;
  const quant::EncodedTensor e = quant::encode_kmeans(x, 4);
  const Tensor y = quant::decode(e);
  EXPECT_EQ(y.data<float>()[0], 100.0f);
  EXPECT_EQ(y.data<float>()[1], -50.0f);
  // The 14 other centroids all serve the bulk, so it is far better than one step of 150/15.
  double worst = 0;
  for (int64_t i = 2; i < x.numel(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(x.data<float>()[i]) - y.data<float>()[i]));
  EXPECT_LT(worst, 0.02);
}

// A tensor of fc1's size (3.2 M weights) goes through each codec with the error its bits allow.
// How fast they are is bench/ material; this guards the results at a real layer's size.
TEST(WeightCodecTest, LargeTensorsRoundTripWithinTheirStep) {
  const Tensor x = gaussian_tensor({3136, 1024}, 5, 0.02f);
  const float* v = x.data<float>();
  const auto [lo, hi] = std::minmax_element(v, v + x.numel());
  const double range = static_cast<double>(*hi) - static_cast<double>(*lo);
  auto half_step_squared = [&](int bits) {
    const double step = range / ((1 << bits) - 1);
    return step * step / 4.0;
  };
  const double linear8 = mean_squared_error(x, quant::decode(quant::encode_linear(x, 8)));
  EXPECT_LE(linear8, half_step_squared(8));
  EXPECT_LE(mean_squared_error(x, quant::decode(quant::encode_linear(x, 8, 1))), linear8);
  EXPECT_LE(mean_squared_error(x, quant::decode(quant::encode_kmeans(x, 8))), linear8);
  EXPECT_LE(mean_squared_error(x, quant::decode(quant::encode_linear(x, 5))), half_step_squared(5));
}

TEST(WeightCodecTest, HalfPrecisionRoundsToNearestEven) {
  // Every finite half survives the round trip through f32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(quant::float_to_half(quant::half_to_float(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(quant::half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(quant::half_to_float(0xc000), -2.0f);
  EXPECT_EQ(quant::half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(quant::half_to_float(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(quant::half_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(quant::half_to_float(quant::float_to_half(std::nanf("")))));
  // Ties go to the even mantissa.
  EXPECT_EQ(quant::float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(quant::float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(quant::float_to_half(1.0f + std::ldexp(1.2f, -11)), 0x3c01);
  EXPECT_EQ(quant::float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(quant::float_to_half(65520.0f), 0x7c00);
  EXPECT_EQ(quant::float_to_half(-1e9f), 0xfc00);
  // Subnormals: units of 2^-24, ties to even, the smallest halfway rounding to zero.
  EXPECT_EQ(quant::float_to_half(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(quant::float_to_half(std::ldexp(1.01f, -25)), 0x0001);
  EXPECT_EQ(quant::float_to_half(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(quant::float_to_half(-std::ldexp(1.0f, -14)), 0x8400);
  EXPECT_EQ(quant::float_to_half(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);

  const Tensor x = gaussian_tensor({999}, 8, 3.0f);
  const Tensor y = quant::decode(quant::encode_f16(x));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.data<float>()[i];
    ASSERT_LE(std::abs(v - y.data<float>()[i]),
              std::abs(v) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25));
  }
}

// bf16 keeps f32's exponent and 8 bits of precision: relative error at most 2^-8 (half a step
// of 2^-7), values that are bf16 already round-trip exactly, ties go to the even neighbour.
TEST(WeightCodecTest, Bf16RoundsToNearestEvenAndKeepsF32Range) {
  EXPECT_EQ(quant::float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(quant::float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(quant::float_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, to even
  EXPECT_EQ(quant::float_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, to even
  EXPECT_EQ(quant::float_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_NE(quant::float_to_bf16(1e38f), 0x7f80);  // f32's range: no overflow
  EXPECT_EQ(quant::float_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // rounds to inf
  EXPECT_TRUE(std::isnan(quant::bf16_to_float(quant::float_to_bf16(std::nanf("")))));
  EXPECT_EQ(quant::bf16_to_float(0x3f80), 1.0f);

  const Tensor x = gaussian_tensor({999}, 8, 3.0f);
  const quant::EncodedTensor e = quant::encode_bf16(x);
  EXPECT_EQ(e.data.size(), 999u * 2);
  EXPECT_EQ(e.encoding.describe(), "bf16");
  EXPECT_EQ(quant::first_format_version(e.encoding.kind), 4u);
  const Tensor y = quant::decode(e);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.data<float>()[i];
    ASSERT_LE(std::abs(v - y.data<float>()[i]), std::abs(v) * std::ldexp(1.0, -8)) << i;
  }
  EXPECT_EQ(testing::values<float>(quant::decode(quant::encode_bf16(y))),
            testing::values<float>(y));
  Tensor huge = testing::random_tensor({4}, 1);
  huge.data<float>()[2] = std::bit_cast<float>(0x7f7fffffu);
  testing::expect_error([&] { quant::encode_bf16(huge); },
                        "cannot bf16-encode: element 2 (3.4028235e+38) is beyond its range");
}

TEST(WeightCodecTest, EncodersRejectWhatTheyCannotRepresent) {
  Tensor x = testing::random_tensor({300}, 1);
  EXPECT_THROW(quant::encode_linear(x, 1), Error);
  EXPECT_THROW(quant::encode_kmeans(x, 9), Error);
  EXPECT_THROW(quant::encode_linear(x, 8, 1), Error);
  x.data<float>()[17] = std::nanf("");
  EXPECT_THROW(quant::encode_linear(x, 8), Error);
  EXPECT_THROW(quant::encode_kmeans(x, 8), Error);
  x.data<float>()[17] = 1e6f;
  EXPECT_THROW(quant::encode_f16(x), Error);
  EXPECT_THROW(quant::encode_linear(Tensor(DType::i32, {300}), 8), Error);
}

TEST(WeightCodecTest, ValidateChecksEveryField) {
  const Tensor x = testing::random_tensor({64, 8}, 2);
  const quant::EncodedTensor e = quant::encode_linear(x, 4, 1);
  EXPECT_NO_THROW(quant::validate(e.shape, e.encoding, e.data.size()));
  auto expect_invalid = [&](const std::function<void(quant::WeightEncoding&)>& edit, uint64_t bytes,
                            const std::string& fragment) {
    quant::WeightEncoding bad = e.encoding;
    edit(bad);
    try {
      quant::validate(e.shape, bad, bytes);
      ADD_FAILURE() << "expected: " << fragment;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  };
  auto nothing = [](quant::WeightEncoding&) {};
  expect_invalid(nothing, 255, "255 bytes, but linear 4-bit [64,8] needs 256");
  expect_invalid([](quant::WeightEncoding& w) { w.bits = 9; }, 256, "bits 9 is outside [2, 8]");
  expect_invalid([](quant::WeightEncoding& w) { w.axis = 2; }, 256, "axis 2 is outside [0, 2)");
  expect_invalid([](quant::WeightEncoding& w) { w.scales[3] = std::nanf(""); }, 256,
                 "scale 3 is nan");
  expect_invalid([](quant::WeightEncoding& w) { w.scales[0] = 0; }, 256, "finite positive");
  expect_invalid([](quant::WeightEncoding& w) { w.scales.pop_back(); }, 256,
                 "7 scales, expected 8");
  expect_invalid([](quant::WeightEncoding& w) { w.zero_points[1] = 16; }, 256, "outside [0, 15]");
  expect_invalid(
      [](quant::WeightEncoding& w) {
        w.kind = Encoding::kmeans;
        w.codebook.assign(15, 0.0f);
      },
      256, "codebook has 15 centroids, but 4 bits need 16");
  EXPECT_THROW(quant::decode({-1, 8}, e.encoding, e.data.data(), e.data.size()), Error);
}

// --- models with encoded weights ---

using testing::edit_meta;
using testing::get_u64;

// conv 3x3x3x16 -> relu -> conv 3x3x16x32 -> relu -> flatten -> dense 4608x64 -> relu ->
// dense 64x3, frozen: FusedConv2D and FusedMatMul nodes with Const weights. The last weights
// (192 elements) are too small to quantize.
ModelFile frozen_cnn() {
  Graph g;
  VariableStore vars;
  auto var = [&](const std::string& name, Shape shape, uint32_t seed, float scale) {
    vars.set(name, gaussian_tensor(shape, seed, scale));
    return ops::variable(g, DType::f32, shape, name);
  };
  Output x = ops::placeholder(g, DType::f32, {2, 12, 12, 3}, "x");
  ops::Conv2DOptions same;
  same.padding = "SAME";
  Output h = ops::conv2d(g, x, var("conv1/weights", {3, 3, 3, 16}, 1, 0.3f), same, "conv1");
  h = ops::relu(g, ops::bias_add(g, h, var("conv1/bias", {16}, 2, 0.1f), "conv1/bias_add"));
  h = ops::conv2d(g, h, var("conv2/weights", {3, 3, 16, 32}, 3, 0.1f), same, "conv2");
  h = ops::relu(g, ops::bias_add(g, h, var("conv2/bias", {32}, 4, 0.1f), "conv2/bias_add"));
  h = ops::flatten(g, h);
  h = ops::matmul(g, h, var("fc1/weights", {4608, 64}, 5, 0.02f), false, false, "fc1");
  h = ops::relu(g, ops::bias_add(g, h, var("fc1/bias", {64}, 6, 0.1f), "fc1/bias_add"));
  Output y =
      ops::bias_add(g, ops::matmul(g, h, var("fc2/weights", {64, 3}, 7, 0.2f), false, false, "fc2"),
                    var("fc2/bias", {3}, 8, 0.1f), "fc2/bias_add");
  std::vector<Output> outputs = {y};
  ModelFile m;
  m.graph = optimize_for_inference(g, vars, outputs);
  m.inputs = {"x"};
  m.outputs = {m.graph.node(outputs[0].node).name};
  return m;
}

Tensor run_model(const ModelFile& m, const Tensor& input) {
  Session session(m.graph);
  return session
      .run({{Output{m.graph.id_of(m.inputs[0]), 0}, input}},
           {Output{m.graph.id_of(m.outputs[0]), 0}})[0]
      .clone();
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(double{t.data<float>()[i]}));
  return m;
}

double max_abs_difference(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::abs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
  return m;
}

class QuantizedModelTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("quantize_weights_test"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(QuantizedModelTest, EightBitModelRoundTripsCloseToFloat) {
  ModelFile model = frozen_cnn();
  ASSERT_GE(model.graph.find("conv1"), 0);
  EXPECT_EQ(model.graph.node(model.graph.id_of("conv1")).op, "FusedConv2D");
  EXPECT_EQ(model.graph.node(model.graph.id_of("fc1")).op, "FusedMatMul");
  const Tensor input = testing::random_tensor({2, 12, 12, 3}, 9);
  const Tensor want = run_model(model, input);
  save_model(dir_ + "/f32.sfm", model);

  quant::WeightQuantizeReport report = quant::quantize_model_weights(model, {});
  ASSERT_EQ(report.rows.size(), 4u);
  for (const quant::WeightRow& row : report.rows)
    EXPECT_EQ(row.encoded, row.node != "fc2/weights") << row.node;
  EXPECT_EQ(report.rows[3].kept_reason, "fewer than 256 elements");
  EXPECT_GT(report.compression_ratio(), 3.5);
  save_model(dir_ + "/w8.sfm", model);

  const ModelFile loaded = load_model(dir_ + "/w8.sfm");
  const uint64_t f32_size = std::filesystem::file_size(dir_ + "/f32.sfm");
  EXPECT_LE(loaded.file_bytes, f32_size * 3 / 10);
  ASSERT_EQ(loaded.stored_weights.size(), 3u);
  const StoredWeights& fc1 = loaded.stored_weights.at("fc1/weights");
  EXPECT_EQ(fc1.encoding.kind, Encoding::linear);
  EXPECT_EQ(fc1.encoding.bits, 8);
  EXPECT_FALSE(fc1.encoding.per_channel());
  EXPECT_EQ(fc1.data_bytes, 4608u * 64);
  EXPECT_EQ(loaded.stored_weights.count("fc1/bias"), 0u);
  // The loaded weights are exactly what the codec decodes.
  const Tensor& w = loaded.graph.node(loaded.graph.id_of("fc1/weights")).attrs.get_tensor("value");
  const Tensor decoded = quant::decode(model.encoded_weights.at("fc1/weights"));
  EXPECT_EQ(w.dtype(), DType::f32);
  EXPECT_EQ(std::memcmp(w.raw(), decoded.raw(), w.bytes()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.raw()) % kTensorAlignment, 0u);

  const Tensor got = run_model(loaded, input);
  EXPECT_LE(max_abs_difference(want, got), 0.02 * max_abs(want));
}

TEST_F(QuantizedModelTest, EverySchemeRoundTrips) {
  const Tensor input = testing::random_tensor({2, 12, 12, 3}, 9);
  const Tensor want = run_model(frozen_cnn(), input);
  struct Case {
    quant::WeightQuantizeOptions options;
    double tolerance;  // of max |output|
  };
  const std::vector<Case> cases = {
      {{.encoding = Encoding::linear, .bits = 8, .per_channel = true}, 0.02},
      {{.encoding = Encoding::linear, .bits = 5, .per_channel = true}, 0.15},
      {{.encoding = Encoding::kmeans, .bits = 8}, 0.02},
      {{.encoding = Encoding::kmeans, .bits = 3}, 0.3},
      {{.encoding = Encoding::f16}, 1e-3},
  };
  for (const Case& c : cases) {
    ModelFile model = frozen_cnn();
    quant::quantize_model_weights(model, c.options);
    const std::string path = dir_ + "/q.sfm";
    save_model(path, model);
    const ModelFile loaded = load_model(path);
    const std::string what = loaded.stored_weights.at("conv2/weights").encoding.describe();
    EXPECT_EQ(loaded.stored_weights.at("conv2/weights").encoding.per_channel(),
              c.options.per_channel);
    if (c.options.per_channel) {
      EXPECT_EQ(loaded.stored_weights.at("conv2/weights").encoding.axis, 3);
    }
    const double error = max_abs_difference(want, run_model(loaded, input)) / max_abs(want);
    EXPECT_LE(error, c.tolerance) << what;
  }
}

TEST_F(QuantizedModelTest, ExcludedWeightsStayDenseAndUnknownNamesAreErrors) {
  ModelFile model = frozen_cnn();
  quant::WeightQuantizeOptions o;
  o.exclude = {"fc1", "conv1/weights"};
  quant::quantize_model_weights(model, o);
  EXPECT_EQ(model.encoded_weights.count("fc1/weights"), 0u);
  EXPECT_EQ(model.encoded_weights.count("conv1/weights"), 0u);
  EXPECT_EQ(model.encoded_weights.count("conv2/weights"), 1u);

  ModelFile other = frozen_cnn();
  o.exclude = {"nope"};
  EXPECT_THROW(quant::quantize_model_weights(other, o), Error);
  o.exclude = {"x"};  // a node without weights
  EXPECT_THROW(quant::quantize_model_weights(other, o), Error);
  o = {.encoding = Encoding::kmeans, .per_channel = true};
  EXPECT_THROW(quant::quantize_model_weights(other, o), Error);
  o = {.bits = 9};
  EXPECT_THROW(quant::quantize_model_weights(other, o), Error);
}

TEST_F(QuantizedModelTest, PerChannelFollowsOutputChannels) {
  ModelFile m;
  Graph& g = m.graph;
  Output x = ops::placeholder(g, DType::f32, {2, 4, 4, 8}, "x");
  Output up = ops::conv_transpose2d(
      g, x, ops::constant(g, gaussian_tensor({3, 3, 16, 8}, 1), "up/weights"), {}, "up");
  Output flat = ops::flatten(g, up);
  Output w = ops::constant(g, gaussian_tensor({10, 576}, 2), "fc/weights");
  ops::matmul(g, flat, w, false, true, "fc");
  m.inputs = {"x"};
  m.outputs = {"fc"};
  quant::quantize_model_weights(m, {.per_channel = true});
  EXPECT_EQ(m.encoded_weights.at("up/weights").encoding.axis, 2);
  EXPECT_EQ(m.encoded_weights.at("fc/weights").encoding.axis, 0);
  const Tensor input = testing::random_tensor({2, 4, 4, 8}, 3);
  const Tensor want = run_model(m, input);
  save_model(dir_ + "/t.sfm", m);
  EXPECT_LE(max_abs_difference(want, run_model(load_model(dir_ + "/t.sfm"), input)),
            0.02 * max_abs(want));
}

TEST_F(QuantizedModelTest, SaveRejectsEncodedWeightsThatDoNotFit) {
  ModelFile model = frozen_cnn();
  model.encoded_weights["fc1/weights"] = quant::encode_linear(gaussian_tensor({64, 4608}, 1), 8);
  EXPECT_THROW(save_model(dir_ + "/bad.sfm", model), Error);
  model.encoded_weights.clear();
  model.encoded_weights["fc1"] = quant::encode_linear(gaussian_tensor({4608, 64}, 1), 8);
  EXPECT_THROW(save_model(dir_ + "/bad.sfm", model), Error);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/bad.sfm"));
}

// x [2,64] -> MatMul(w [64,8], stored `how`) -> y
class EncodedEntryTest : public QuantizedModelTest {
 protected:
  std::string saved(const std::function<quant::EncodedTensor(const Tensor&)>& how) {
    ModelFile m;
    Output x = ops::placeholder(m.graph, DType::f32, {2, 64}, "x");
    Tensor w = gaussian_tensor({64, 8}, 5);
    ops::matmul(m.graph, x, ops::constant(m.graph, w, "w"), false, false, "y");
    m.inputs = {"x"};
    m.outputs = {"y"};
    m.encoded_weights["w"] = how(w);
    save_model(dir_ + "/m.sfm", m);
    return read_file_bytes(dir_ + "/m.sfm");
  }
  void expect_rejected(const std::string& bytes, const std::string& fragment) {
    const std::string path = dir_ + "/bad.sfm";
    write_file_bytes(path, bytes);
    try {
      load_model(path);
      ADD_FAILURE() << "expected an error containing: " << fragment;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(fragment), std::string::npos) << message;
      EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
};

TEST_F(EncodedEntryTest, LoaderRejectsCorruptLinearEntries) {
  const std::string file = saved([](const Tensor& w) { return quant::encode_linear(w, 4, 1); });
  const json entry = json::parse(testing::metadata_text(file))["tensors"][0];
  EXPECT_EQ(entry["encoding"], "linear");
  EXPECT_EQ(entry["bits"], 4);
  EXPECT_EQ(entry["axis"], 1);
  EXPECT_EQ(entry["bytes"], 256);
  EXPECT_EQ(entry["scales"].size(), 8u);
  EXPECT_EQ(entry["zero_points"].size(), 8u);
  EXPECT_NO_THROW(load_model(dir_ + "/m.sfm"));

  auto edited = [&](const std::function<void(json&)>& edit) {
    return edit_meta(file, [&](json& j) { edit(j["tensors"][0]); });
  };
  expect_rejected(edited([](json& t) { t["bytes"] = 255; }),
                  "tensor 0 (node 'w'): 255 bytes, but linear 4-bit [64,8] needs 256");
  expect_rejected(edited([](json& t) { t["bits"] = 9; }), "tensor 0 (node 'w'): linear bits 9");
  expect_rejected(edited([](json& t) { t["bits"] = 1LL << 40; }), "tensor 0 'bits'");
  expect_rejected(edited([](json& t) { t["scales"][2] = "nan"; }),
                  "tensor 0 (node 'w'): scale 2 is nan");
  expect_rejected(edited([](json& t) { t["scales"][2] = 1e300; }), "scale 2 is inf");
  expect_rejected(edited([](json& t) { t["scales"][0] = -1; }), "not a finite positive");
  expect_rejected(edited([](json& t) { t["axis"] = 2; }), "tensor 0 (node 'w'): axis 2 is outside");
  expect_rejected(edited([](json& t) { t["axis"] = -1; }), "'axis' is -1");
  expect_rejected(edited([](json& t) { t.erase("axis"); }), "8 scales, expected 1");
  expect_rejected(edited([](json& t) { t["zero_points"][0] = 16; }), "outside [0, 15]");
  expect_rejected(edited([](json& t) { t.erase("scales"); }), "tensor 0 has no 'scales'");
  expect_rejected(edited([](json& t) { t["scales"] = "x"; }), "'scales' must be an array");
  expect_rejected(edited([](json& t) { t["dtype"] = "i8"; }), "encoded tensors are f32");
  expect_rejected(edited([](json& t) { t["offset"] = 64; }), "runs past the end");
  expect_rejected(edited([](json& t) { t["encoding"] = "bogus"; }),
                  "tensor 0 has encoding 'bogus', which this build does not read");
  // A file from a newer writer with a tensor encoding this build does not know is rejected
  // by name, so format_version 1 stays: that is how version 1 readers already behave.
}

TEST_F(EncodedEntryTest, LoaderRejectsCorruptKmeansAndHalfEntries) {
  const std::string kmeans = saved([](const Tensor& w) { return quant::encode_kmeans(w, 3); });
  auto edited = [&](const std::string& file, const std::function<void(json&)>& edit) {
    return edit_meta(file, [&](json& j) { edit(j["tensors"][0]); });
  };
  expect_rejected(edited(kmeans, [](json& t) { t["codebook"].erase(0); }),
                  "tensor 0 (node 'w'): codebook has 7 centroids, but 3 bits need 8");
  expect_rejected(edited(kmeans, [](json& t) { t["codebook"][1] = "inf"; }), "centroid 1 is inf");
  expect_rejected(edited(kmeans, [](json& t) { t["bytes"] = 193; }), "needs 192");
  const std::string half = saved([](const Tensor& w) { return quant::encode_f16(w); });
  EXPECT_EQ(load_model(dir_ + "/m.sfm").stored_weights.at("w").encoding.kind, Encoding::f16);
  expect_rejected(edited(half, [](json& t) { t["shape"] = {64, 9}; }), "needs 1152");
}

// bf16 weights need format version 4: a file holding them says so, builds that read only
// versions 1-3 reject it by that version (the check below, with this build's limit one higher),
// and a file that claims an older version yet holds them is rejected too.
TEST_F(EncodedEntryTest, Bf16WeightsMakeAVersion4File) {
  const std::string file = saved([](const Tensor& w) { return quant::encode_bf16(w); });
  EXPECT_EQ(static_cast<uint8_t>(file[8]), 4);
  const ModelFile loaded = load_model(dir_ + "/m.sfm");
  EXPECT_EQ(loaded.stored_weights.at("w").encoding.kind, Encoding::bf16);
  EXPECT_EQ(loaded.stored_weights.at("w").data_bytes, 64u * 8 * 2);
  const Tensor& w = loaded.graph.node(loaded.graph.id_of("w")).attrs.get_tensor("value");
  for (float v : testing::values<float>(w)) ASSERT_EQ(quant::bf16_to_float(quant::float_to_bf16(v)), v);

  std::string newer = file;
  testing::put_u32(newer, 8, kModelFormatVersion + 1);
  expect_rejected(newer, fmt::format("format version {} is newer than this build reads ({})",
                                     kModelFormatVersion + 1, kModelFormatVersion));
  std::string older = file;
  testing::put_u32(older, 8, 3);
  expect_rejected(older, "tensor 0 (node 'w') has encoding 'bf16', which format version 3 does "
                         "not have (from 4)");
  auto edited = [&](const std::function<void(json&)>& edit) {
    std::string bytes = edit_meta(file, [&](json& j) { edit(j["tensors"][0]); });
    testing::put_u32(bytes, 8, 4);  // edit_meta writes version 1
    return bytes;
  };
  expect_rejected(edited([](json& t) { t["bytes"] = 1023; }),
                  "tensor 0 (node 'w'): 1023 bytes, but bf16 16-bit [64,8] needs 1024");
  expect_rejected(edited([](json& t) { t["shape"] = {1 << 19, 1 << 19}; }),
                  "1024 bytes, but bf16 16-bit [524288,524288] needs 549755813888");
}

TEST_F(EncodedEntryTest, TruncatedOrFlippedFilesNeverCrash) {
  const std::string file = saved([](const Tensor& w) { return quant::encode_kmeans(w, 5); });
  for (size_t len = 0; len < file.size(); len += 7)
    EXPECT_THROW(load_model_from_memory(file.data(), len, nullptr, "cut"), Error) << len;
  std::mt19937 rng(99);
  int rejected = 0;
  for (int i = 0; i < 300; ++i) {
    std::string bad = file;
    const size_t at = std::uniform_int_distribution<size_t>(0, get_u64(file, 32) - 1)(rng);
    bad[at] = static_cast<char>(bad[at] ^ (1 << (rng() % 8)));
    try {
      load_model_from_memory(bad.data(), bad.size(), nullptr, "flip");
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

// --- the command line ---

using testing::CliResult;
using testing::non_empty_lines;
using testing::run_cli;

class QuantizeCliTest : public QuantizedModelTest {
 protected:
  void SetUp() override {
    QuantizedModelTest::SetUp();
    model_ = dir_ + "/cnn.sfm";
    save_model(model_, frozen_cnn());
  }
  // Expects a non-zero exit with exactly one line, the error, containing `fragment`.
  void expect_one_line_error(const std::string& args, const std::string& fragment) {
    CliResult r = run_cli("quantize " + args);
    EXPECT_NE(r.exit_code, 0) << args;
    const std::vector<std::string> lines = non_empty_lines(r.out);
    ASSERT_EQ(lines.size(), 1u) << args << "\n" << r.out;
    EXPECT_EQ(lines[0].rfind("slimflow: error: ", 0), 0u) << lines[0];
    EXPECT_NE(lines[0].find(fragment), std::string::npos) << lines[0];
  }
  std::string model_;
};

TEST_F(QuantizeCliTest, BadArgumentsAreOneLineErrors) {
  const std::string out = " --out " + dir_ + "/q.sfm";
  expect_one_line_error(model_ + " --mode weights --bits 9" + out, "--bits 9 is outside 2..8");
  expect_one_line_error(model_ + " --mode weights --bits 1" + out, "--bits 1");
  expect_one_line_error(model_ + " --mode weights --bits four" + out, "not a whole number");
  expect_one_line_error(model_ + " --mode weights --scheme lloyd" + out,
                        "--scheme 'lloyd' is not linear or kmeans");
  expect_one_line_error(model_ + " --mode weights --scheme kmeans --per-channel" + out,
                        "--per-channel needs --scheme linear");
  expect_one_line_error(model_ + " --mode weights --float16 --bits 4" + out, "--float16");
  expect_one_line_error(model_ + " --mode weights", "--out");
  expect_one_line_error(model_ + " --mode fast" + out, "--mode 'fast'");
  expect_one_line_error(model_ + out, "--mode");
  expect_one_line_error("--mode weights" + out, "MODEL");
  expect_one_line_error(model_ + " --mode weights --exclude fc1,nosuch" + out, "'nosuch'");
  expect_one_line_error(dir_ + "/missing.sfm --mode weights" + out, "missing.sfm");
  expect_one_line_error(model_ + " --mode eightbit --bits 4" + out, "are for --mode weights");
  expect_one_line_error(model_ + " --mode eightbit --report" + out, "--calib-data");
  expect_one_line_error(model_ + " --mode eightbit --calib-data mnist --method median" + out,
                        "median");
  expect_one_line_error(model_ + " --mode eightbit --exclude nosuch" + out, "'nosuch'");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/q.sfm"));
}

// --mode bf16: the weights stored bf16 (about half the file), the model run in bf16 unless a
// command asks otherwise, an excluded layer's weights and products kept in fp32.
TEST_F(QuantizeCliTest, Bf16HalvesTheFileAndRunsInBf16) {
  const std::string out = dir_ + "/bf16.sfm";
  CliResult r =
      run_cli("quantize " + model_ + " --mode bf16 --exclude conv1 --json --out " + out, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(json::parse(r.out)["mode"], "bf16");
  const double ratio = static_cast<double>(std::filesystem::file_size(out)) /
                       static_cast<double>(std::filesystem::file_size(model_));
  EXPECT_GT(ratio, 0.45);
  EXPECT_LT(ratio, 0.55);
  const ModelFile loaded = load_model(out);
  EXPECT_EQ(loaded.metadata.at("precision"), "bf16");
  EXPECT_EQ(loaded.metadata.at("fp32_layers"), R"(["conv1"])");
  EXPECT_EQ(loaded.stored_weights.count("conv1/weights"), 0u);
  EXPECT_EQ(loaded.stored_weights.at("fc1/weights").encoding.kind, Encoding::bf16);
  EXPECT_NE(run_cli("inspect " + out).out.find("bf16"), std::string::npos);

  auto bench = [&](const std::string& flags) {
    CliResult b = run_cli("bench --model " + out + " --batch 2 --threads 1 --runs 1 --warmup 0 "
                          "--json --profile" + flags, false);
    EXPECT_EQ(b.exit_code, 0) << b.out;
    return json::parse(non_empty_lines(b.out).back());
  };
  const json by_default = bench("");
  EXPECT_EQ(by_default["precision"], "bf16");
  EXPECT_NE(by_default["precision_reason"].get<std::string>().find("the model's"),
            std::string::npos);
  const bool native = cpu_features().avx512_bf16 || cpu_features().amx_bf16;
  for (const json& row : by_default["profile"]) {
    const std::string node = row["node"], impl = row["impl"];
    if (node == "conv1") {
      EXPECT_EQ(impl.find("bf16"), std::string::npos) << impl;
    }
    if (native && (node == "conv2" || node == "fc1")) {
      EXPECT_NE(impl.find("bf16"), std::string::npos) << node << " ran " << impl;
    }
  }
  EXPECT_EQ(bench(" --precision fp32")["precision"], "fp32");

  // Outputs within bf16's error of the fp32 model's: inputs and weights rounded to 8 bits.
  const Tensor x = gaussian_tensor({2, 12, 12, 3}, 11, 1.0f);
  const Tensor want = run_model(load_model(model_), x);
  SessionOptions options;
  choose_model_precision(loaded, out, "", options);
  Session session(loaded.graph, options);
  const Tensor got = session.run({{Output{loaded.graph.id_of("x"), 0}, x}},
                                 {Output{loaded.graph.id_of(loaded.outputs[0]), 0}})[0];
  testing::expect_close(want, got, {.rtol = 0.05, .atol = 0.05}, "bf16 vs fp32 model");

  // The integer model of a bf16 file runs as its new graph says: its float leftovers in fp32.
  const std::string int8 = dir_ + "/bf16-eightbit.sfm";
  r = run_cli("quantize " + out + " --mode eightbit --out " + int8, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const ModelFile requantized = load_model(int8);
  EXPECT_EQ(requantized.metadata.count("precision"), 0u);
  EXPECT_EQ(requantized.metadata.count("fp32_layers"), 0u);

  const std::string again = " --out " + dir_ + "/q.sfm";
  expect_one_line_error(model_ + " --mode bf16 --bits 8" + again, "are for --mode weights");
  expect_one_line_error(model_ + " --mode bf16 --float16" + again, "are for --mode weights");
  expect_one_line_error(model_ + " --mode bf16 --calib-data mnist" + again, "--mode eightbit");
  expect_one_line_error(model_ + " --mode bf16 --exclude nosuch" + again, "'nosuch'");
  expect_one_line_error(model_ + " --mode bf16 --exclude fc1,", "--out");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/q.sfm"));
}

// The eightbit path through the command: without calibration data the ranges are found at
// run time (RequantizationRange in the graph), and the integer model tracks the float one.
TEST_F(QuantizeCliTest, EightbitWithRunTimeRanges) {
  const std::string out = dir_ + "/q8.sfm";
  CliResult r =
      run_cli("quantize " + model_ + " --mode eightbit --per-channel --json --out " + out, false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json report = json::parse(r.out);
  EXPECT_FALSE(report.at("calibrated").get<bool>());
  EXPECT_EQ(report.at("layers").size(), 4u);  // conv1, conv2, fc1, fc2
  // What stays float is named with its reason (none of the four layers is among them).
  for (const json& node : report.at("float_nodes")) {
    EXPECT_FALSE(node.at("reason").get<std::string>().empty()) << node.dump();
    for (const json& layer : report.at("layers")) EXPECT_NE(node.at("name"), layer.at("name"));
  }
  const ModelFile fp32 = load_model(model_);
  const ModelFile q8 = load_model(out);
  int range_nodes = 0;
  for (int id = 0; id < q8.graph.num_nodes(); ++id)
    range_nodes += q8.graph.node(id).op == "RequantizationRange";
  EXPECT_EQ(range_nodes, 4);
  const Tensor x = gaussian_tensor({2, 12, 12, 3}, 11, 1.0f);
  auto run = [&](const ModelFile& m) {
    Session s(m.graph);
    return s.run({{Output{m.graph.id_of(m.inputs[0]), 0}, x}},
                 {Output{m.graph.id_of(m.outputs[0]), 0}})[0];
  };
  const Tensor want = run(fp32), got = run(q8);
  ASSERT_EQ(want.shape(), got.shape());
  double max_err = 0, max_abs = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    max_err = std::max(max_err,
                       static_cast<double>(std::abs(want.data<float>()[i] - got.data<float>()[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::abs(want.data<float>()[i])));
  }
  EXPECT_LT(max_err, 0.1 * max_abs);

  // inspect counts the integer model's learned values as the float model's parameters, and its
  // scales, zero points and ranges apart.
  auto inspect = [&](const std::string& model) {
    const CliResult shown = run_cli("inspect " + model + " --json", false);
    EXPECT_EQ(shown.exit_code, 0) << shown.out;
    return json::parse(shown.out);
  };
  const json float_view = inspect(model_), int8_view = inspect(out);
  EXPECT_EQ(int8_view.at("parameters"), float_view.at("parameters"));
  EXPECT_EQ(float_view.at("quantization_values").get<int64_t>(), 0);
  EXPECT_GT(int8_view.at("quantization_values").get<int64_t>(), 0);
  for (const json& node : int8_view.at("nodes")) {
    if (node.at("op") != "Const") continue;
    const std::string name = node.at("name").get<std::string>();
    const bool format_constant = name.ends_with("_params") || name.ends_with("_scales");
    EXPECT_EQ(node.contains("quantization_values"), format_constant) << name;
    if (name.ends_with("weights_quantized")) {
      EXPECT_TRUE(node.contains("sparsity")) << name;
    }
  }
}

TEST_F(QuantizeCliTest, JsonReportAndInspect) {
  const std::string out = dir_ + "/k4.sfm";
  CliResult r = run_cli("quantize " + model_ +
                            " --mode weights --bits 4 --scheme kmeans "
                            "--exclude conv1 --json --out " +
                            out,
                        false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json report = json::parse(r.out);
  for (const char* key : {"fp32_bytes", "quantized_bytes", "compression_ratio", "tensors"})
    EXPECT_TRUE(report.contains(key)) << key;
  EXPECT_GT(report["compression_ratio"].get<double>(), 5.0);
  ASSERT_EQ(report["tensors"].size(), 4u);
  EXPECT_EQ(report["tensors"][0]["node"], "conv1/weights");
  EXPECT_EQ(report["tensors"][0]["encoding"], "dense");
  EXPECT_EQ(report["tensors"][0]["kept_dense"], "excluded");
  EXPECT_EQ(report["tensors"][2]["encoding"], "kmeans");
  EXPECT_EQ(report["tensors"][2]["codebook_size"], 16);
  EXPECT_LT(report["tensors"][2]["quantized_bytes"].get<uint64_t>(),
            report["tensors"][2]["fp32_bytes"].get<uint64_t>() / 7);

  CliResult inspect = run_cli("inspect " + out + " --json", false);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.out;
  const json j = json::parse(inspect.out);
  bool found = false;
  for (const json& n : j["nodes"]) {
    if (n["name"] != "fc1/weights") continue;
    found = true;
    EXPECT_EQ(n["encoding"], "kmeans");
    EXPECT_EQ(n["bits"], 4);
    EXPECT_EQ(n["per_channel"], false);
    EXPECT_EQ(n["codebook_size"], 16);
    EXPECT_EQ(n["fp32_bytes"], 4608 * 64 * 4);
    EXPECT_EQ(n["stored_bytes"], 4608 * 64 / 2 + 16 * 4);
  }
  EXPECT_TRUE(found);
  EXPECT_LT(j["stored_weight_bytes"].get<uint64_t>(), j["weight_bytes"].get<uint64_t>() / 5);

  CliResult table = run_cli("quantize " + model_ + " --mode weights --per-channel --out " + out);
  ASSERT_EQ(table.exit_code, 0) << table.out;
  EXPECT_NE(table.out.find("linear 8-bit per-channel (axis 3)"), std::string::npos) << table.out;
  EXPECT_NE(run_cli("inspect " + out).out.find("linear8/ch"), std::string::npos);
}

TEST_F(QuantizeCliTest, MnistModelKeepsItsAccuracy) {
  REQUIRE_MNIST();
  // A model of its own (Deep-MNIST's shape, small; 86% on these 500 test images), so that the
  // test runs on a fresh clone too.
  const std::string run_dir = dir_ + "/run";
  ASSERT_EQ(run_cli("train --model " + testing::source_path("tests/data/tiny-cnn.yaml") +
                    " --data mnist --epochs 1 --train-limit 3200 --test-limit 100 --threads 1"
                    " --quiet --out " + run_dir)
                .exit_code,
            0);
  const std::string f32 = dir_ + "/mnist.sfm", w4 = dir_ + "/mnist-k4.sfm";
  ASSERT_EQ(run_cli("freeze " + run_dir + " --out " + f32).exit_code, 0);
  ASSERT_EQ(
      run_cli("quantize " + f32 + " --mode weights --bits 4 --scheme kmeans --out " + w4).exit_code,
      0);
  auto accuracy = [](const std::string& model) {
    CliResult r = run_cli("eval --model " + model + " --data mnist --limit 500 --json", false);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return json::parse(r.out)["accuracy"].get<double>();
  };
  EXPECT_GE(accuracy(w4), accuracy(f32) - 0.01);
  EXPECT_LE(std::filesystem::file_size(w4), std::filesystem::file_size(f32) / 7);
  // bf16 weights and compute: half the file, accuracy within a fraction of a point.
  const std::string bf16 = dir_ + "/mnist-bf16.sfm";
  ASSERT_EQ(run_cli("quantize " + f32 + " --mode bf16 --out " + bf16).exit_code, 0);
  EXPECT_NEAR(accuracy(bf16), accuracy(f32), 0.006);
  EXPECT_LE(std::filesystem::file_size(bf16), std::filesystem::file_size(f32) * 51 / 100);
}

}  // namespace
}  // namespace sf
