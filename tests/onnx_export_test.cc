// ONNX export (onnx/exporter.h): structure of the written models, a round trip through our
// importer, and agreement with ONNX Runtime (node + onnxruntime-node, installed by
// scripts/setup.sh; missing ones fail the test, since CI installs them).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "io/npy.h"
#include "modelfile/model_file.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "ops/ops.h"
#include "quantize/calibration.h"
#include "quantize/eightbit_rewrite.h"
#include "runtime/session.h"
#include "support/cli.h"
#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/testing.h"
#include "transforms/inference_passes.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// x [1,8,8,3] -> conv_a (3x3 SAME, relu) -> pool_a (max 2x2) -> conv_b (1x1, relu6);
// add (conv_b + pool_a, relu); concat (add, pool_a) on channels -> pool_b (avg 2x2) -> flatten
// -> fc (dense + bias) = the logits, through the freeze passes (fused conv / matmul).
ModelFile float_model() {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {1, 8, 8, 3}, "x");
  ops::Conv2DOptions same;
  same.padding = "SAME";
  Output a = ops::conv2d(
      g, x, ops::constant(g, testing::random_tensor({3, 3, 3, 8}, 1, -0.5f, 0.5f), "conv_a/w"),
      same, "conv_a");
  a = ops::relu(g, ops::bias_add(g, a, ops::constant(g, testing::random_tensor({8}, 2), "conv_a/b")),
                "conv_a/relu");
  Output pool_a = ops::max_pool(g, a, {}, "pool_a");
  Output b = ops::conv2d(
      g, pool_a,
      ops::constant(g, testing::random_tensor({1, 1, 8, 8}, 3, -0.5f, 0.5f), "conv_b/w"), {},
      "conv_b");
  b = ops::relu6(
      g, ops::bias_add(g, b, ops::constant(g, testing::random_tensor({8}, 4), "conv_b/b")),
      "conv_b/relu6");
  Output sum = ops::relu(g, ops::add(g, b, pool_a, "add"), "add/relu");
  Output both = ops::concat(g, {sum, pool_a}, 3, "concat");
  Output pool_b = ops::avg_pool(g, both, {}, "pool_b");
  Output flat = ops::flatten(g, pool_b, 1, "flatten");
  Output fc = ops::matmul(
      g, flat, ops::constant(g, testing::random_tensor({64, 10}, 5, -0.3f, 0.3f), "fc/w"), false,
      false, "fc");
  Output logits =
      ops::bias_add(g, fc, ops::constant(g, testing::random_tensor({10}, 6), "fc/b"), "logits");
  std::vector<Output> outs = {logits};
  ModelFile model;
  model.graph = fuse_bias_activation(g, outs);
  model.inputs = {"x"};
  model.outputs = {model.graph.node(outs[0].node).name};
  return model;
}

// The calibrated, per-channel eightbit form of float_model(); its output is the Dequantize of
// the logits, named as the float output.
ModelFile eightbit_model(bool calibrated = true) {
  ModelFile f = float_model();
  EightbitOptions options;
  options.outputs = f.outputs;
  options.per_channel = true;
  if (calibrated) {
    TensorSource source({testing::random_tensor({32, 8, 8, 3}, 7)});
    CalibrationOptions calibration;
    calibration.threads = 1;
    options.ranges = calibrate(f.graph, f.inputs, eightbit_range_tensors(f.graph, options),
                               source, calibration);
  }
  EightbitGraph q = rewrite_eightbit(f.graph, options);
  ModelFile model;
  model.graph = std::move(q.graph);
  model.inputs = f.inputs;
  model.outputs = q.outputs;
  return model;
}

Tensor run_model(const ModelFile& model, const Tensor& x) {
  Session session(model.graph, SessionOptions{.threads = 1});
  const Output in{model.graph.id_of(model.inputs[0]), 0};
  const Output out{model.graph.id_of(model.outputs[0]), 0};
  return session.run({{in, x}}, {out})[0].clone();
}

onnx::ModelProto parse(const std::string& bytes) {
  onnx::ModelProto proto;
  EXPECT_TRUE(proto.ParseFromString(bytes));
  return proto;
}

int count_nodes(const onnx::GraphProto& g, const std::string& op) {
  int n = 0;
  for (const onnx::NodeProto& node : g.node()) n += node.op_type() == op;
  return n;
}

const onnx::TensorProto* find_initializer(const onnx::GraphProto& g, const std::string& name) {
  for (const onnx::TensorProto& t : g.initializer())
    if (t.name() == name) return &t;
  return nullptr;
}

int64_t int_attr(const onnx::NodeProto& n, const std::string& name, int64_t fallback) {
  for (const onnx::AttributeProto& a : n.attribute())
    if (a.name() == name) return a.i();
  return fallback;
}

std::vector<int64_t> dims(const onnx::TensorProto& t) {
  return std::vector<int64_t>(t.dims().begin(), t.dims().end());
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  float worst = 0.0f;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i)
    worst = std::max(worst, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  return worst;
}

// The scale of the params read by the model's output Dequantize: one quantization step.
float output_step(const ModelFile& q) {
  const Node& dequantize = q.graph.node(q.graph.id_of(q.outputs[0]));
  EXPECT_EQ(dequantize.op, "Dequantize");
  const Node& params = q.graph.node(dequantize.inputs[1].node);
  return params.attrs.get_tensor("value").data<float>()[0];
}

TEST(OnnxExportTest, FloatGraphRoundTripsThroughTheImporter) {
  const ModelFile model = float_model();
  const std::string bytes = export_onnx_bytes(model, "float");
  const onnx::ModelProto proto = parse(bytes);
  const onnx::GraphProto& g = proto.graph();
  // NHWC in, NCHW for every image op, back to NHWC once, before the Flatten.
  EXPECT_EQ(count_nodes(g, "Transpose"), 2);
  EXPECT_EQ(count_nodes(g, "Conv"), 2);
  EXPECT_EQ(count_nodes(g, "Gemm"), 1);
  EXPECT_EQ(count_nodes(g, "Concat"), 1);
  EXPECT_EQ(count_nodes(g, "AveragePool"), 1);
  ASSERT_EQ(g.input_size(), 1);
  EXPECT_EQ(g.input(0).name(), "x");
  const onnx::TensorShapeProto& in_shape = g.input(0).type().tensor_type().shape();
  ASSERT_EQ(in_shape.dim_size(), 4);
  EXPECT_EQ(in_shape.dim(0).dim_param(), "batch");
  EXPECT_EQ(in_shape.dim(3).dim_value(), 3);  // channels last, as the .sfm takes them
  ASSERT_EQ(g.output_size(), 1);
  EXPECT_EQ(g.output(0).name(), model.outputs[0]);
  const onnx::TensorProto* filter = find_initializer(g, "conv_a/w/permuted");
  ASSERT_NE(filter, nullptr);
  EXPECT_EQ(dims(*filter), (std::vector<int64_t>{8, 3, 3, 3}));  // OIHW

  ImportOptions options;
  options.input_shapes["x"] = {4, 8, 8, 3};
  const ModelFile imported = import_onnx_bytes(bytes, "exported", options);
  const Tensor x = testing::random_tensor({4, 8, 8, 3}, 11);
  EXPECT_LE(max_abs_diff(run_model(model, x), run_model(imported, x)), 1e-5f);
}

// A transformer block's float ops (imported from ONNX, written back): BatchMatMul with each
// operand transposed, ReduceMean over the last axis, Erf, Gather of the last step.
TEST(OnnxExportTest, SequenceOpsRoundTripThroughTheImporter) {
  ModelFile model;
  Graph& g = model.graph;
  Output x = ops::placeholder(g, DType::f32, {2, 5, 4}, "x");
  Output w = ops::constant(g, testing::random_tensor({3, 4}, 21), "w");
  Output dense = ops::batch_matmul(g, x, w, false, true, "dense");            // [2,5,3]
  Output scores = ops::batch_matmul(g, dense, dense, false, true, "scores");  // [2,5,5]
  Output mixed = ops::batch_matmul(g, scores, x, true, false, "mixed");       // [2,5,4]
  Output mean = ops::reduce_mean(g, mixed, {-1}, true, "mean");
  Output centered = ops::erf(g, ops::sub(g, mixed, mean, "centered"), "erf");
  Tensor last(DType::i64, {});
  last.data<int64_t>()[0] = -1;
  g.add("Gather", {centered, ops::constant(g, last, "last")}, {{"axis", int64_t{1}}}, "y");
  model.inputs = {"x"};
  model.outputs = {"y"};
  const std::string bytes = export_onnx_bytes(model, "seq");
  const onnx::ModelProto proto = parse(bytes);
  const onnx::GraphProto& exported = proto.graph();
  EXPECT_EQ(count_nodes(exported, "MatMul"), 3);
  EXPECT_EQ(count_nodes(exported, "ReduceMean"), 1);
  EXPECT_EQ(count_nodes(exported, "Erf"), 1);
  EXPECT_EQ(count_nodes(exported, "Gather"), 1);
  ImportOptions options;
  options.input_shapes["x"] = {2, 5, 4};
  const ModelFile imported = import_onnx_bytes(bytes, "exported", options);
  const Tensor xv = testing::random_tensor({2, 5, 4}, 22);
  EXPECT_LE(max_abs_diff(run_model(model, xv), run_model(imported, xv)), 1e-5f);
}

TEST(OnnxExportTest, EightbitGraphBecomesQdq) {
  const ModelFile q = eightbit_model();
  const std::string bytes = export_onnx_bytes(q, "eightbit");
  const onnx::ModelProto proto = parse(bytes);
  const onnx::GraphProto& g = proto.graph();
  for (const char* op : {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm", "MaxPool",
                         "AveragePool", "Add", "Concat"})
    EXPECT_GE(count_nodes(g, op), 1) << op;
  // conv_a's ReLU output has zero point 0: QuantizeLinear clamps there, so no Relu is written.
  EXPECT_EQ(count_nodes(g, "Relu"), 0);
  EXPECT_EQ(count_nodes(g, "Transpose"), 2);  // on u8 data

  // Weights: i8 with a scale per output channel on axis 0 (OIHW, and [N,K] for the Gemm);
  // biases: i32 with scale x_scale * w_scale per channel.
  std::set<std::vector<int64_t>> weight_shapes;
  int biases = 0;
  for (const onnx::NodeProto& n : g.node()) {
    if (n.op_type() != "DequantizeLinear") continue;
    const onnx::TensorProto* values = find_initializer(g, n.input(0));
    if (!values) continue;  // an activation
    const onnx::TensorProto* scale = find_initializer(g, n.input(1));
    const onnx::TensorProto* zero_point = find_initializer(g, n.input(2));
    ASSERT_TRUE(scale && zero_point) << n.name();
    EXPECT_EQ(int_attr(n, "axis", 1), 0) << n.name();
    EXPECT_EQ(dims(*scale), (std::vector<int64_t>{values->dims(0)})) << n.name();
    EXPECT_EQ(zero_point->data_type(), values->data_type()) << n.name();
    if (values->data_type() == onnx::TensorProto::INT8) weight_shapes.insert(dims(*values));
    if (values->data_type() == onnx::TensorProto::INT32) ++biases;
  }
  EXPECT_EQ(weight_shapes, (std::set<std::vector<int64_t>>{
                               {8, 3, 3, 3}, {8, 8, 1, 1}, {10, 64}}));
  EXPECT_EQ(biases, 3);

  ImportOptions options;
  options.input_shapes["x"] = {4, 8, 8, 3};
  // The importer reads the QDQ form back onto our integer ops (qdq_fusion).
  const ModelFile imported = import_onnx_bytes(bytes, "exported", options);
  std::multiset<std::string> imported_ops;
  for (int i = 0; i < imported.graph.num_nodes(); ++i)
    imported_ops.insert(imported.graph.node(i).op);
  EXPECT_EQ(imported_ops.count("QuantizedConv2DRequantized"), 2u);
  EXPECT_EQ(imported_ops.count("QuantizedMatMulRequantized"), 1u);
  const Tensor x = testing::random_tensor({4, 8, 8, 3}, 12);
  EXPECT_LE(max_abs_diff(run_model(q, x), run_model(imported, x)), output_step(q) * 1.001f);
}

TEST(OnnxExportTest, RunTimeRangesAndUnknownOpsAreOneLineErrors) {
  try {
    export_onnx_bytes(eightbit_model(false), "q.sfm");
    FAIL() << "an uncalibrated eightbit graph was exported";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("q.sfm: node 'x/quantize_params' (ChooseQParams)"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("--calib-data"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  ModelFile model;
  Output x = ops::placeholder(model.graph, DType::f32, {1, 4, 4, 2}, "x");
  ops::resize(model.graph, x, {8, 8}, {}, "up");
  model.inputs = {"x"};
  model.outputs = {"up"};
  try {
    export_onnx_bytes(model, "m.sfm");
    FAIL() << "Resize has no exporter";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "m.sfm: node 'up' (Resize): cannot be exported to ONNX");
  }
  ExportOptions old;
  old.opset = 11;
  EXPECT_THROW(export_onnx_bytes(float_model(), "m.sfm", old), Error);
}

// Both models through `slimflow export` and ONNX Runtime at batch 4 (the batch dimension is
// symbolic): float outputs within 1e-5, int8 logits within one quantization step.
TEST(OnnxExportTest, OnnxRuntimeAgreesWithOurOutputs) {
  ASSERT_EQ(testing::run_shell("node --version").exit_code, 0)
      << "node is not installed; scripts/setup.sh installs it and onnxruntime-node";
  const std::string dir = testing::make_temp_dir("sf-onnx-export");
  const Tensor x = testing::random_tensor({4, 8, 8, 3}, 13);
  write_npy(dir + "/x.npy", x);
  const std::string runner = testing::source_path("bench/ort_runner.js");
  for (const bool quantized : {false, true}) {
    const ModelFile model = quantized ? eightbit_model() : float_model();
    const std::string stem = dir + (quantized ? "/q" : "/f");
    save_model(stem + ".sfm", model);
    const testing::CliResult exported =
        testing::run_cli("export " + stem + ".sfm --out " + stem + ".onnx");
    ASSERT_EQ(exported.exit_code, 0) << exported.out;
    const testing::CliResult ort = testing::run_shell(
        "node " + runner + " " + stem + ".onnx " + dir + "/x.npy " + stem +
        "-ort.npy --runs 1 --threads 1");
    ASSERT_EQ(ort.exit_code, 0) << "ONNX Runtime (node_modules/onnxruntime-node, installed by "
                                   "scripts/setup.sh) failed:\n"
                                << ort.out;
    const Tensor theirs = read_npy(stem + "-ort.npy");
    const Tensor ours = run_model(model, x);
    if (quantized) {
      EXPECT_LE(max_abs_diff(ours, theirs), output_step(model) * 1.001f);
    } else {
      EXPECT_LE(max_abs_diff(ours, theirs), 1e-5f);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sf
