// Importing quantized ONNX models: QDQ models (ONNX Runtime's format) built here with the
// protobuf API must run on the integer ops (qdq_fusion.cc) and agree within one output
// quantization step with the same model imported without fusion (its float ops between exact
// QuantizeLinear / DequantizeLinear); weights our kernels cannot take stay float; malformed
// quantization parameters fail in one line naming the node.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <random>
#include <set>

#include "onnx/importer.h"
#include "runtime/session.h"
#include "support/onnx_models.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using namespace testing;

onnx::ModelProto new_model(int opset = 13) { return new_onnx_model(opset); }
Tensor run(const ModelFile& model, const Tensor& x) { return run_model(model, x); }

// A node named after its one output.
onnx::NodeProto* add_op(onnx::ModelProto& m, const std::string& op,
                        const std::vector<std::string>& inputs, const std::string& output) {
  return add_node(m, op, inputs, {output}, output);
}

// A per-tensor u8 scale and zero point, as initializers "<name>_scale" and "<name>_zp".
void add_u8_params(onnx::ModelProto& m, const std::string& name, float scale, uint8_t zp) {
  add_init(m, name + "_scale", {}, {scale});
  add_raw_init<uint8_t>(m, name + "_zp", {}, {zp}, onnx::TensorProto::UINT8);
}

// Q -> DQ of `x` with the params "<params>_scale" / "<params>_zp": the QDQ pair of ONNX
// Runtime's format. Returns the dequantized value's name.
std::string qdq(onnx::ModelProto& m, const std::string& x, const std::string& params,
                const std::string& name) {
  add_op(m, "QuantizeLinear", {x, params + "_scale", params + "_zp"}, name + "_q");
  add_op(m, "DequantizeLinear", {name + "_q", params + "_scale", params + "_zp"}, name + "_dq");
  return name + "_dq";
}

std::vector<int8_t> random_i8(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-127, 127);
  std::vector<int8_t> v(n);
  for (int8_t& x : v) x = static_cast<int8_t>(dist(rng));
  return v;
}

std::vector<int32_t> random_i32(size_t n, uint32_t seed, int range) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-range, range);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

// Dequantized constant i8 weights (zero points `zero`) and, when bias_scales are given, an i32
// bias dequantized with them: ONNX Runtime's QDQ weights. Scales: one (per tensor) or one per
// index of `axis`.
std::string dq_weights(onnx::ModelProto& m, const std::string& name, const Shape& dims,
                       const std::vector<float>& scales, int64_t axis, uint32_t seed,
                       int8_t zero = 0) {
  const Shape scale_dims =
      scales.size() == 1 ? Shape{} : Shape{static_cast<int64_t>(scales.size())};
  add_raw_init(m, name, dims, random_i8(static_cast<size_t>(num_elements(dims)), seed),
           onnx::TensorProto::INT8);
  add_init(m, name + "_scale", scale_dims, scales);
  add_raw_init(m, name + "_zp", scale_dims, std::vector<int8_t>(scales.size(), zero),
           onnx::TensorProto::INT8);
  onnx::NodeProto* n =
      add_op(m, "DequantizeLinear", {name, name + "_scale", name + "_zp"}, name + "_dq");
  if (scales.size() > 1) set_int(n, "axis", axis);
  return name + "_dq";
}

std::string dq_bias(onnx::ModelProto& m, const std::string& name, int64_t channels,
                    const std::vector<float>& scales, uint32_t seed) {
  const Shape scale_dims =
      scales.size() == 1 ? Shape{} : Shape{static_cast<int64_t>(scales.size())};
  add_raw_init(m, name, {channels}, random_i32(static_cast<size_t>(channels), seed, 400),
           onnx::TensorProto::INT32);
  add_init(m, name + "_scale", scale_dims, scales);
  add_raw_init(m, name + "_zp", scale_dims, std::vector<int32_t>(scales.size(), 0),
           onnx::TensorProto::INT32);
  onnx::NodeProto* n =
      add_op(m, "DequantizeLinear", {name, name + "_scale", name + "_zp"}, name + "_dq");
  if (scales.size() > 1) set_int(n, "axis", 0);
  return name + "_dq";
}

std::vector<float> times(const std::vector<float>& v, float s) {
  std::vector<float> out;
  for (float x : v) out.push_back(x * s);
  return out;
}

constexpr float kInputScale = 2.0f / 255.0f, kConvScale = 0.05f, kOutScale = 0.1f;

// x [1,3,8,8] -> Q/DQ -> Conv 3x3 (pads 1, 4 channels, bias) -> Relu -> Q/DQ -> MaxPool 2x2 ->
// Q/DQ -> Flatten -> Q/DQ -> Gemm (transB, 10 outputs, bias) -> Q/DQ -> y.
onnx::ModelProto conv_pool_gemm(bool per_channel, int8_t conv_weight_zero = 0) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {1, 3, 8, 8});
  add_output(m, "y");
  add_u8_params(m, "in", kInputScale, 128);
  add_u8_params(m, "act", kConvScale, 0);
  add_u8_params(m, "out", kOutScale, 128);
  const std::string x = qdq(m, "x", "in", "x");
  const std::vector<float> conv_scales =
      per_channel ? std::vector<float>{0.004f, 0.006f, 0.008f, 0.01f} : std::vector<float>{0.006f};
  const std::string w = dq_weights(m, "conv_w", {4, 3, 3, 3}, conv_scales, 0, 1, conv_weight_zero);
  const std::string b = dq_bias(m, "conv_b", 4, times(conv_scales, kInputScale), 2);
  set_ints(add_op(m, "Conv", {x, w, b}, "conv"), "pads", {1, 1, 1, 1});
  add_op(m, "Relu", {"conv"}, "relu");
  const std::string r = qdq(m, "relu", "act", "relu");
  onnx::NodeProto* pool = add_op(m, "MaxPool", {r}, "pool");
  set_ints(pool, "kernel_shape", {2, 2});
  set_ints(pool, "strides", {2, 2});
  const std::string p = qdq(m, "pool", "act", "pool");
  add_op(m, "Flatten", {p}, "flat");
  const std::string f = qdq(m, "flat", "act", "flat");
  std::vector<float> fc_scales(per_channel ? 10 : 1, 0.004f);
  if (per_channel)
    for (size_t i = 0; i < fc_scales.size(); ++i) fc_scales[i] += 0.0005f * static_cast<float>(i);
  const std::string fw = dq_weights(m, "fc_w", {10, 64}, fc_scales, 0, 3);
  const std::string fb = dq_bias(m, "fc_b", 10, times(fc_scales, kConvScale), 4);
  set_int(add_op(m, "Gemm", {f, fw, fb}, "fc"), "transB", 1);
  add_op(m, "QuantizeLinear", {"fc", "out_scale", "out_zp"}, "fc_q");
  add_op(m, "DequantizeLinear", {"fc_q", "out_scale", "out_zp"}, "y");
  return m;
}

ModelFile import(const onnx::ModelProto& m, bool fuse) {
  ImportOptions options;
  options.fuse_qdq = fuse;
  return import_onnx_bytes(m.SerializeAsString(), "qdq.onnx", options);
}

Tensor random_input(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

// Both outputs are dequantized u8 values of step `scale`: they may differ by one step, where
// the integer ops' fixed-point rounding and the float path's round-half-even part ways.
void expect_within_one_step(const Tensor& got, const Tensor& want, float scale) {
  ASSERT_EQ(got.shape(), want.shape());
  // A meaningful comparison: the outputs are not all saturated to one value.
  std::set<float> distinct(want.data<float>(), want.data<float>() + want.numel());
  EXPECT_GE(distinct.size(), std::min<size_t>(4, static_cast<size_t>(want.numel())));
  int differing = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float steps = std::fabs(got.data<float>()[i] - want.data<float>()[i]) / scale;
    ASSERT_LE(steps, 1.001f) << "element " << i << ": " << got.data<float>()[i] << " vs "
                             << want.data<float>()[i];
    differing += steps > 0.5f;
  }
  // Ties are rare: most elements must agree exactly.
  EXPECT_LE(differing, got.numel() / 4 + 1);
}

class QdqConvPoolGemm : public ::testing::TestWithParam<bool> {};

TEST_P(QdqConvPoolGemm, RunsOnIntegerOpsAndMatchesTheFloatEvaluation) {
  const onnx::ModelProto m = conv_pool_gemm(/*per_channel=*/GetParam());
  const ModelFile fused = import(m, true);
  const ModelFile plain = import(m, false);
  EXPECT_EQ(count_ops(fused, "QuantizedConv2DRequantized"), 1);
  EXPECT_EQ(count_ops(fused, "QuantizedMatMulRequantized"), 1);
  EXPECT_EQ(count_ops(fused, "QuantizedMaxPool"), 1);
  for (const char* op : {"Conv2D", "MatMul", "MaxPool", "BiasAdd", "Relu"})
    EXPECT_EQ(count_ops(fused, op), 0) << op;
  // The input is quantized once and only the output is dequantized.
  EXPECT_EQ(count_ops(fused, "QuantizeLinear"), 1);
  EXPECT_EQ(count_ops(fused, "DequantizeLinear"), 1);
  EXPECT_EQ(count_ops(plain, "Conv2D"), 1);
  EXPECT_EQ(count_ops(plain, "QuantizedConv2DRequantized"), 0);
  for (uint32_t seed = 0; seed < 3; ++seed) {
    const Tensor x = random_input({1, 3, 8, 8}, seed);
    expect_within_one_step(run(fused, x), run(plain, x), kOutScale);
  }
}

INSTANTIATE_TEST_SUITE_P(PerTensorAndPerChannel, QdqConvPoolGemm, ::testing::Bool());

// Weights with a nonzero zero point do not fit our symmetric i8 kernels: the conv stays float
// (DQ -> Conv), while the rest of the model is still fused.
TEST(QdqFusion, WeightsWithZeroPointsStayFloat) {
  const onnx::ModelProto m = conv_pool_gemm(true, /*conv_weight_zero=*/3);
  const ModelFile fused = import(m, true);
  EXPECT_EQ(count_ops(fused, "QuantizedConv2DRequantized"), 0);
  EXPECT_EQ(count_ops(fused, "Conv2D"), 1);
  EXPECT_EQ(count_ops(fused, "QuantizedMatMulRequantized"), 1);
  const Tensor x = random_input({1, 3, 8, 8}, 9);
  expect_within_one_step(run(fused, x), run(import(m, false), x), kOutScale);
}

// x [1,4,4,4] quantized twice (two scales) -> Add -> Relu -> Q/DQ -> Concat with the first ->
// Q/DQ -> AveragePool 2x2 (same params) -> Q/DQ -> y.
TEST(QdqFusion, AddConcatAndAveragePool) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {1, 4, 4, 4});
  add_output(m, "y");
  add_u8_params(m, "a", 2.0f / 255.0f, 128);
  add_u8_params(m, "b", 1.0f / 255.0f, 100);
  add_u8_params(m, "sum", 0.02f, 0);
  const std::string a = qdq(m, "x", "a", "xa");
  const std::string b = qdq(m, "x", "b", "xb");
  add_op(m, "Add", {a, b}, "add");
  add_op(m, "Relu", {"add"}, "relu");
  const std::string s = qdq(m, "relu", "sum", "sum");
  set_int(add_op(m, "Concat", {s, a}, "cat"), "axis", 1);
  const std::string c = qdq(m, "cat", "sum", "cat");
  onnx::NodeProto* pool = add_op(m, "AveragePool", {c}, "pool");
  set_ints(pool, "kernel_shape", {2, 2});
  set_ints(pool, "strides", {2, 2});
  add_op(m, "QuantizeLinear", {"pool", "sum_scale", "sum_zp"}, "pool_q");
  add_op(m, "DequantizeLinear", {"pool_q", "sum_scale", "sum_zp"}, "y");
  const ModelFile fused = import(m, true);
  EXPECT_EQ(count_ops(fused, "QuantizedAdd"), 1);
  EXPECT_EQ(count_ops(fused, "QuantizedConcat"), 1);
  EXPECT_EQ(count_ops(fused, "QuantizedAvgPool"), 1);
  for (const char* op : {"Add", "Relu", "Concat", "AvgPool"}) EXPECT_EQ(count_ops(fused, op), 0);
  const Tensor x = random_input({1, 4, 4, 4}, 5);
  expect_within_one_step(run(fused, x), run(import(m, false), x), 0.02f);
}

// A pool whose Q changes the scale has no integer form: it stays DQ -> MaxPool -> Q.
TEST(QdqFusion, PoolChangingScaleStaysFloat) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {1, 2, 4, 4});
  add_output(m, "y");
  add_u8_params(m, "in", 2.0f / 255.0f, 128);
  add_u8_params(m, "out", 1.0f / 255.0f, 128);
  const std::string x = qdq(m, "x", "in", "x");
  onnx::NodeProto* pool = add_op(m, "MaxPool", {x}, "pool");
  set_ints(pool, "kernel_shape", {2, 2});
  add_op(m, "QuantizeLinear", {"pool", "out_scale", "out_zp"}, "pool_q");
  add_op(m, "DequantizeLinear", {"pool_q", "out_scale", "out_zp"}, "y");
  const ModelFile fused = import(m, true);
  EXPECT_EQ(count_ops(fused, "QuantizedMaxPool"), 0);
  EXPECT_EQ(count_ops(fused, "MaxPool"), 1);
  const Tensor x_in = random_input({1, 2, 4, 4}, 6);
  const Tensor got = run(fused, x_in), want = run(import(m, false), x_in);
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_EQ(got.data<float>()[i], want.data<float>()[i]);
}

// --- malformed quantization parameters ---

void expect_import_error(const onnx::ModelProto& m, const std::string& node,
                         const std::string& part) {
  try {
    import(m, true);
    FAIL() << "no error; expected one containing '" << part << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("qdq.onnx: node '" + node + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(QdqImportErrors, ScaleOfTheWrongSize) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {1, 3, 2, 2});
  add_output(m, "q");
  add_init(m, "s", {4}, {1.0f, 1.0f, 1.0f, 1.0f});
  add_op(m, "QuantizeLinear", {"x", "s"}, "q");
  expect_import_error(m, "q", "y_scale has shape [4]; expected one value or [3]");
}

TEST(QdqImportErrors, ZeroPointTypeMismatch) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {4}, onnx::TensorProto::UINT8);
  add_output(m, "y");
  add_init(m, "s", {}, {0.5f});
  add_raw_init<int8_t>(m, "z", {}, {0}, onnx::TensorProto::INT8);
  add_op(m, "DequantizeLinear", {"x", "s", "z"}, "y");
  expect_import_error(m, "y", "x_zero_point is i8 but x is u8");
}

TEST(QdqImportErrors, AxisOutOfRange) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {1, 3, 2, 2});
  add_output(m, "q");
  add_init(m, "s", {3}, {1.0f, 2.0f, 3.0f});
  add_raw_init<uint8_t>(m, "z", {3}, {0, 0, 0}, onnx::TensorProto::UINT8);
  set_int(add_op(m, "QuantizeLinear", {"x", "s", "z"}, "q"), "axis", 4);
  expect_import_error(m, "q", "axis 4 is out of range");
}

TEST(QdqImportErrors, PerAxisScaleBeforeOpset13) {
  onnx::ModelProto m = new_model(10);
  add_input(m, "x", {1, 3, 2, 2});
  add_output(m, "q");
  add_init(m, "s", {3}, {1.0f, 2.0f, 3.0f});
  add_op(m, "QuantizeLinear", {"x", "s"}, "q");
  expect_import_error(m, "q", "per-axis scales need opset 13");
}

TEST(QdqImportErrors, ConvIntegerWeightZeroPointsPerChannel) {
  onnx::ModelProto m = new_model(10);
  add_input(m, "x", {1, 2, 4, 4}, onnx::TensorProto::UINT8);
  add_output(m, "y");
  add_raw_init<uint8_t>(m, "w", {3, 2, 1, 1}, std::vector<uint8_t>(6, 1), onnx::TensorProto::UINT8);
  add_raw_init<uint8_t>(m, "xz", {}, {0}, onnx::TensorProto::UINT8);
  add_raw_init<uint8_t>(m, "wz", {2}, {0, 0}, onnx::TensorProto::UINT8);
  add_op(m, "ConvInteger", {"x", "w", "xz", "wz"}, "y");
  expect_import_error(m, "y", "w_zero_point has shape [2]; expected one value or [3]");
}

}  // namespace
}  // namespace sf
