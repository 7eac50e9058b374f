#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "io/dataset.h"
#include "modelfile/model_file.h"
#include "ops/ops.h"
#include "quantize/calibration.h"
#include "quantize/eightbit_report.h"
#include "quantize/eightbit_rewrite.h"
#include "runtime/session.h"
#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/testing.h"
#include "train/freeze_run.h"
#include "train/trainer.h"
#include "transforms/graph_uses.h"
#include "transforms/inference_passes.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// Data must stay 8-bit between integer layers: no Quantize may read a Dequantize.
void expect_no_dequantize_quantize_pairs(const Graph& g) {
  for (const Node& node : g.nodes())
    if (node.op == "Quantize") {
      const Node& producer = g.node(node.inputs[0].node);
      EXPECT_NE(producer.op, "Dequantize")
          << "'" << node.name << "' reads '" << producer.name << "'";
    }
}

Tensor run_graph(const Graph& g, const std::string& input, const Tensor& x,
                 const std::string& fetch) {
  Session session(g, SessionOptions{.threads = 1});
  return session.run({{Output{g.id_of(input), 0}, x}}, {Output{g.id_of(fetch), 0}})[0].clone();
}

double relative_error(const Tensor& want, const Tensor& got) {
  double diff = 0.0, norm = 0.0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = want.data<float>()[i] - got.data<float>()[i];
    diff += d * d;
    norm += static_cast<double>(want.data<float>()[i]) * want.data<float>()[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

double argmax_agreement(const Tensor& a, const Tensor& b) {
  const int64_t rows = a.dim(0), cols = a.numel() / a.dim(0);
  int64_t same = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = a.data<float>() + r * cols;
    const float* y = b.data<float>() + r * cols;
    same += std::max_element(x, x + cols) - x == std::max_element(y, y + cols) - y;
  }
  return static_cast<double>(same) / static_cast<double>(rows);
}

// conv (3x3, SAME) + bias + relu -> max pool -> flatten -> dense + bias ("fc") -> softmax,
// through the freeze passes: FusedConv2D, MaxPool, Flatten, FusedMatMul, Softmax.
struct ConvNet {
  Graph graph;
  std::vector<std::string> outputs;
  ConvNet() {
    Graph g;
    Output x = ops::placeholder(g, DType::f32, {1, 8, 8, 3}, "x");
    ops::Conv2DOptions same;
    same.padding = "SAME";
    Output c = ops::conv2d(
        g, x, ops::constant(g, testing::random_tensor({3, 3, 3, 6}, 1, -0.5f, 0.5f), "conv/w"),
        same, "conv");
    Output r = ops::relu(
        g, ops::bias_add(g, c, ops::constant(g, testing::random_tensor({6}, 2), "conv/b")), "relu");
    Output p = ops::max_pool(g, r, {}, "pool");
    Output f = ops::flatten(g, p, 1, "flatten");
    Output m = ops::matmul(
        g, f, ops::constant(g, testing::random_tensor({96, 10}, 3, -0.3f, 0.3f), "fc/w"), false,
        false, "fc");
    Output logits =
        ops::bias_add(g, m, ops::constant(g, testing::random_tensor({10}, 4), "fc/b"), "fc/bias");
    Output probs = ops::softmax(g, logits, "probabilities");
    std::vector<Output> outs = {probs};
    graph = fuse_bias_activation(g, outs);
    outputs = {graph.node(outs[0].node).name};
  }
};

TEST(QuantizeEightbitTest, SymmetricWeightsPerChannelAndPerTensor) {
  Tensor w = Tensor::from_vector<float>({2, 3}, {1.0f, -0.5f, 0.0f, -2.0f, 0.25f, 0.0f});
  SymmetricWeights pc = quantize_weights_symmetric(w, true);
  EXPECT_EQ(pc.scales.shape(), (Shape{3}));
  EXPECT_FLOAT_EQ(pc.scales.data<float>()[0], 2.0f / 127.0f);
  EXPECT_FLOAT_EQ(pc.scales.data<float>()[1], 0.5f / 127.0f);
  EXPECT_FLOAT_EQ(pc.scales.data<float>()[2], 1.0f);  // an all-zero channel
  const int8_t* q = pc.values.data<int8_t>();
  EXPECT_EQ(q[0], 64);  // 1 / (2 / 127) = 63.5, rounded away from zero
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[3], -127);
  EXPECT_EQ(q[4], 64);
  SymmetricWeights pt = quantize_weights_symmetric(w, false);
  EXPECT_EQ(pt.scales.shape(), (Shape{1}));
  EXPECT_EQ(pt.values.data<int8_t>()[4], 16);  // 0.25 / (2 / 127) = 15.875
  Tensor params = params_for_range({-1.0f, 3.0f});
  EXPECT_FLOAT_EQ(params.data<float>()[0], 4.0f / 255.0f);
  EXPECT_FLOAT_EQ(params.data<float>()[1], 64.0f);
}

TEST(QuantizeEightbitTest, WithoutCalibrationRangesAreMeasuredAtRunTime) {
  ConvNet net;
  EightbitOptions options;
  options.outputs = net.outputs;
  EightbitGraph q = rewrite_eightbit(net.graph, options);
  const Graph& g = q.graph;
  EXPECT_EQ(testing::count_ops(g, "FusedConv2D") + testing::count_ops(g, "FusedMatMul") + testing::count_ops(g, "MaxPool"), 0);
  EXPECT_EQ(testing::count_ops(g, "QuantizedConv2D"), 1);
  EXPECT_EQ(testing::count_ops(g, "QuantizedMatMul"), 1);
  EXPECT_EQ(testing::count_ops(g, "RequantizationRange"), 2);
  EXPECT_EQ(testing::count_ops(g, "Requantize"), 2);
  EXPECT_EQ(testing::count_ops(g, "QuantizedConv2DRequantized") + testing::count_ops(g, "QuantizedMatMulRequantized"),
            0);
  EXPECT_EQ(testing::count_ops(g, "QuantizedMaxPool"), 1);
  EXPECT_EQ(testing::count_ops(g, "Quantize"), 1);       // the input only
  EXPECT_EQ(testing::count_ops(g, "ChooseQParams"), 1);  // its params, at run time
  EXPECT_EQ(testing::count_ops(g, "Dequantize"), 1);     // before the softmax
  expect_no_dequantize_quantize_pairs(g);
  // Readable names that map back to the float layers.
  EXPECT_EQ(g.node(g.id_of("conv/quantized")).op, "Requantize");
  EXPECT_EQ(g.node(g.id_of("conv/accumulator")).op, "QuantizedConv2D");
  EXPECT_EQ(g.node(g.id_of("conv/weights_quantized")).outputs[0].dtype, DType::i8);
  EXPECT_EQ(g.node(g.id_of("flatten/quantized")).outputs[0].dtype, DType::u8);
  EXPECT_EQ(g.node(g.id_of("probabilities")).op, "Softmax");
  EXPECT_EQ(q.outputs, net.outputs);
  ASSERT_EQ(q.layers.size(), 3u);
  EXPECT_EQ(q.layers[0].name, "conv");
  EXPECT_EQ(q.layers[1].name, "pool");
  EXPECT_EQ(q.layers[2].name, "fc");

  Tensor x = testing::random_tensor({32, 8, 8, 3}, 5);
  Tensor want = run_graph(net.graph, "x", x, "fc");
  Tensor got = run_graph(g, "x", x, "fc/dequantize");
  EXPECT_LT(relative_error(want, got), 0.05);
  EXPECT_GE(argmax_agreement(want, got), 0.9);
  Tensor probs = run_graph(g, "x", x, "probabilities");
  EXPECT_EQ(probs.shape(), (Shape{32, 10}));
}

TEST(QuantizeEightbitTest, CalibratedRangesBecomeConstantParams) {
  ConvNet net;
  EightbitOptions options;
  options.outputs = net.outputs;
  std::vector<std::string> wanted = eightbit_range_tensors(net.graph, options);
  EXPECT_EQ(wanted, (std::vector<std::string>{"x", "conv", "fc"}));
  TensorSource source({testing::random_tensor({64, 8, 8, 3}, 6)});
  CalibrationOptions calibration;
  calibration.threads = 1;
  options.ranges = calibrate(net.graph, {"x"}, wanted, source, calibration);
  EightbitGraph q = rewrite_eightbit(net.graph, options);
  const Graph& g = q.graph;
  EXPECT_EQ(testing::count_ops(g, "QuantizedConv2DRequantized"), 1);
  EXPECT_EQ(testing::count_ops(g, "QuantizedMatMulRequantized"), 1);
  EXPECT_EQ(testing::count_ops(g, "RequantizationRange") + testing::count_ops(g, "ChooseQParams"), 0);
  EXPECT_EQ(testing::count_ops(g, "Requantize") + testing::count_ops(g, "QuantizedConv2D"), 0);
  EXPECT_EQ(g.node(g.id_of("conv/out_params")).op, "Const");
  EXPECT_EQ(g.node(g.id_of("x/quantize_params")).op, "Const");
  expect_no_dequantize_quantize_pairs(g);

  Tensor x = testing::random_tensor({32, 8, 8, 3}, 7);
  Tensor want = run_graph(net.graph, "x", x, "fc");
  Tensor got = run_graph(g, "x", x, "fc/dequantize");
  EXPECT_LT(relative_error(want, got), 0.05);
  EXPECT_GE(argmax_agreement(want, got), 0.9);

  // u8 and i8 constants survive a model file.
  const std::string dir = testing::make_temp_dir("sf-eightbit-file");
  ModelFile file;
  file.graph = g;
  file.inputs = {"x"};
  file.outputs = q.outputs;
  save_model(dir + "/q.sfm", file);
  ModelFile loaded = load_model(dir + "/q.sfm");
  Tensor reloaded = run_graph(loaded.graph, "x", x, "fc/dequantize");
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_EQ(got.data<float>()[i], reloaded.data<float>()[i]);
  std::filesystem::remove_all(dir);

  // The report covers each rewritten layer, worst first.
  TensorSource check({x});
  EightbitReport report = compare_layers(net.graph, q, {"x"}, check, calibration);
  ASSERT_EQ(report.layers.size(), 3u);
  for (size_t i = 0; i < report.layers.size(); ++i) {
    const LayerError& e = report.layers[i];
    EXPECT_GT(e.sqnr_db, 20.0) << e.name;
    EXPECT_GT(e.max_abs_error, 0.0) << e.name;
    EXPECT_LT(e.max_abs_error, 0.2 * e.max_abs_value) << e.name;
    if (i > 0) {
      EXPECT_LE(report.layers[i - 1].sqnr_db, e.sqnr_db);
    }
  }
}

TEST(QuantizeEightbitTest, ExcludedNodesStayFloat) {
  ConvNet net;
  EightbitOptions options;
  options.outputs = net.outputs;
  options.exclude = {"fc"};
  Graph g = quantize_eightbit(net.graph, options);
  EXPECT_EQ(g.node(g.id_of("fc")).op, "FusedMatMul");
  EXPECT_EQ(g.node(g.id_of("fc")).outputs[0].dtype, DType::f32);
  EXPECT_EQ(testing::count_ops(g, "QuantizedConv2D"), 1);
  EXPECT_EQ(testing::count_ops(g, "QuantizedMatMul"), 0);
  // The float layer reads the dequantized result of the last 8-bit one.
  EXPECT_EQ(g.node(g.node(g.id_of("fc")).inputs[0].node).op, "Dequantize");
  expect_no_dequantize_quantize_pairs(g);
  Tensor x = testing::random_tensor({16, 8, 8, 3}, 8);
  EXPECT_LT(relative_error(run_graph(net.graph, "x", x, "fc"), run_graph(g, "x", x, "fc")), 0.05);

  // Excluded layers need no calibration.
  EXPECT_EQ(eightbit_range_tensors(net.graph, options), (std::vector<std::string>{"x", "conv"}));

  // Pooling follows its input: after a float conv it stays float, and the 8-bit dense layer
  // quantizes the (smaller) flattened result instead.
  options.exclude = {"conv"};
  Graph float_conv = quantize_eightbit(net.graph, options);
  EXPECT_EQ(float_conv.node(float_conv.id_of("pool")).op, "MaxPool");
  EXPECT_EQ(float_conv.node(float_conv.id_of("flatten/quantize")).op, "Quantize");
  EXPECT_EQ(testing::count_ops(float_conv, "QuantizedMatMul"), 1);
  EXPECT_EQ(eightbit_range_tensors(net.graph, options),
            (std::vector<std::string>{"flatten", "fc"}));

  options.exclude = {"conv", "pool", "fc"};
  Graph all_float = quantize_eightbit(net.graph, options);
  EXPECT_EQ(testing::count_ops(all_float, "Quantize") + testing::count_ops(all_float, "Dequantize"), 0);

  options.exclude = {"no_such_node"};
  try {
    quantize_eightbit(net.graph, options);
    FAIL() << "expected sf::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'no_such_node'"), std::string::npos) << e.what();
  }
}

// Two conv branches -> Add -> Relu, a Concat of both, a transposed-weight MatMul head after a
// global average pool; the logits are the output.
struct BranchNet {
  Graph graph;
  BranchNet() {
    Graph g;
    Output x = ops::placeholder(g, DType::f32, {1, 6, 6, 2}, "x");
    ops::Conv2DOptions same;
    same.padding = "SAME";
    auto conv = [&](Output in, int64_t cin, const std::string& name, uint32_t seed) {
      Output c = ops::conv2d(
          g, in,
          ops::constant(g, testing::random_tensor({3, 3, cin, 4}, seed, -0.5f, 0.5f), name + "/w"),
          same, name);
      return ops::bias_add(g, c,
                           ops::constant(g, testing::random_tensor({4}, seed + 1), name + "/b"),
                           name + "/bias");
    };
    Output a = conv(x, 2, "a", 10);
    Output b = conv(x, 2, "b", 20);
    Output sum = ops::relu(g, ops::add(g, a, b, "sum"), "sum_relu");
    Output cat = ops::concat(g, {sum, a}, 3, "cat");
    Output c = conv(cat, 8, "c", 30);
    Output pooled = ops::global_avg_pool(g, c, "gap");
    Output logits =
        ops::matmul(g, pooled, ops::constant(g, testing::random_tensor({5, 4}, 40), "head/w"),
                    false, true, "logits");
    std::vector<Output> outs = {logits};
    graph = fuse_bias_activation(g, outs);
  }
};

TEST(QuantizeEightbitTest, AddConcatAndGlobalPoolStayEightBitWhenCalibrated) {
  BranchNet net;
  EightbitOptions options;
  std::vector<std::string> wanted = eightbit_range_tensors(net.graph, options);
  EXPECT_NE(std::find(wanted.begin(), wanted.end(), "sum_relu"), wanted.end());
  EXPECT_EQ(std::find(wanted.begin(), wanted.end(), "sum"), wanted.end());  // fused away
  TensorSource source({testing::random_tensor({32, 6, 6, 2}, 50)});
  CalibrationOptions calibration;
  calibration.threads = 1;
  calibration.range.method = RangeMethod::percentile;
  options.ranges = calibrate(net.graph, {"x"}, wanted, source, calibration);
  EightbitGraph q = rewrite_eightbit(net.graph, options);
  const Graph& g = q.graph;
  EXPECT_EQ(testing::count_ops(g, "QuantizedAdd"), 1);
  EXPECT_EQ(g.node(g.id_of("sum/quantized")).attrs.get_string("activation"), "relu");
  EXPECT_EQ(testing::count_ops(g, "Relu"), 0);
  EXPECT_EQ(testing::count_ops(g, "QuantizedConcat"), 1);
  EXPECT_EQ(testing::count_ops(g, "QuantizedAvgPool"), 1);
  EXPECT_EQ(testing::count_ops(g, "QuantizedMatMulRequantized"), 1);
  EXPECT_EQ(testing::count_ops(g, "Dequantize"), 1);
  // The output is 8-bit inside; its Dequantize carries the output's name.
  EXPECT_EQ(g.node(g.id_of("logits")).op, "Dequantize");
  EXPECT_EQ(q.outputs, (std::vector<std::string>{"logits"}));
  expect_no_dequantize_quantize_pairs(g);

  Tensor x = testing::random_tensor({16, 6, 6, 2}, 60);
  Tensor want = run_graph(net.graph, "x", x, "logits");
  EXPECT_LT(relative_error(want, run_graph(g, "x", x, "logits")), 0.1);

  // Without calibration, Add and Concat have no out_params and run in float.
  Graph dynamic = quantize_eightbit(net.graph, EightbitOptions{});
  EXPECT_EQ(testing::count_ops(dynamic, "QuantizedAdd") + testing::count_ops(dynamic, "QuantizedConcat"), 0);
  EXPECT_EQ(testing::count_ops(dynamic, "RequantizationRange"), 4);
  expect_no_dequantize_quantize_pairs(dynamic);
  EXPECT_LT(relative_error(want, run_graph(dynamic, "x", x, "logits")), 0.1);
}

// A spec's residual `add` freezes to an AddN of two: it runs as a QuantizedAdd with the ReLU
// after it inside; an AddN of three stays float.
TEST(QuantizeEightbitTest, TwoOperandAddNIsAQuantizedAdd) {
  for (const size_t operands : {2, 3}) {
    Graph g;
    Output x = ops::placeholder(g, DType::f32, {1, 5, 5, 3}, "x");
    std::vector<Output> branches;
    for (size_t i = 0; i < operands; ++i)
      branches.push_back(ops::conv2d(
          g, x,
          ops::constant(g, testing::random_tensor({1, 1, 3, 3}, 90 + static_cast<uint32_t>(i)),
                        "w" + std::to_string(i)),
          {}, "conv" + std::to_string(i)));
    ops::relu(g, ops::add_n(g, branches, "sum"), "out");
    EightbitOptions options;
    TensorSource source({testing::random_tensor({16, 5, 5, 3}, 95)});
    CalibrationOptions calibration;
    calibration.threads = 1;
    options.ranges = calibrate(g, {"x"}, eightbit_range_tensors(g, options), source, calibration);
    const Graph q = rewrite_eightbit(g, options).graph;
    SCOPED_TRACE(operands);
    EXPECT_EQ(testing::count_ops(q, "QuantizedAdd"), operands == 2 ? 1 : 0);
    EXPECT_EQ(testing::count_ops(q, "Relu"), operands == 2 ? 0 : 1);
    Tensor in = testing::random_tensor({8, 5, 5, 3}, 96);
    EXPECT_LT(relative_error(run_graph(g, "x", in, "out"), run_graph(q, "x", in, "out")), 0.05);
  }
}

// A fire module's two expand convs, each read only by the Concat: they requantize straight to
// the concat's range, so the concat copies their bytes; a conv that something else also reads
// keeps its own range.
TEST(QuantizeEightbitTest, ConvsThatOnlyAConcatReadsTakeItsRange) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {1, 6, 6, 3}, "x");
  ops::Conv2DOptions same;
  same.padding = "SAME";
  auto conv = [&](Output in, int64_t k, const std::string& name, uint32_t seed) {
    return ops::conv2d(
        g, in,
        ops::constant(g, testing::random_tensor({k, k, 3, 4}, seed, -0.5f, 0.5f), name + "/w"),
        same, name);
  };
  Output expand1 = conv(x, 1, "expand1", 80);
  Output expand3 = conv(x, 3, "expand3", 81);
  Output shared = conv(x, 3, "shared", 82);
  Output cat = ops::concat(g, {expand1, expand3, shared}, 3, "cat");
  ops::add(g, cat, ops::concat(g, {shared, shared, shared}, 3, "again"), "out");
  EightbitOptions options;
  const std::vector<std::string> wanted = eightbit_range_tensors(g, options);
  EXPECT_EQ(std::find(wanted.begin(), wanted.end(), "expand1"), wanted.end());
  EXPECT_NE(std::find(wanted.begin(), wanted.end(), "shared"), wanted.end());
  TensorSource source({testing::random_tensor({16, 6, 6, 3}, 83)});
  CalibrationOptions calibration;
  calibration.threads = 1;
  options.ranges = calibrate(g, {"x"}, wanted, source, calibration);
  const Graph q = rewrite_eightbit(g, options).graph;
  const Node& concat = q.node(q.id_of("cat/quantized"));
  ASSERT_EQ(concat.op, "QuantizedConcat");
  auto params = [&](Output o) { return *const_value(q, o); };
  const Tensor out_params = params(concat.inputs.back());
  for (int i : {0, 1, 2}) {
    const Tensor in_params = params(concat.inputs[static_cast<size_t>(2 * i + 1)]);
    SCOPED_TRACE(i);
    ASSERT_EQ(in_params.numel(), out_params.numel());
    const bool same = std::equal(in_params.data<float>(), in_params.data<float>() + 2,
                                 out_params.data<float>());
    EXPECT_EQ(same, i < 2);
  }
  Tensor in = testing::random_tensor({8, 6, 6, 3}, 84);
  EXPECT_LT(relative_error(run_graph(g, "x", in, "out"), run_graph(q, "x", in, "out")), 0.05);
}

TEST(QuantizeEightbitTest, LayoutOpsMoveU8AndAFloatInputIsQuantizedOnce) {
  // An ONNX-style NCHW input: Transpose to NHWC, conv, back to NCHW, flatten, dense.
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {1, 2, 5, 5}, "x");
  Output nhwc = ops::transpose(g, x, {0, 2, 3, 1}, "to_nhwc");
  Output c = ops::conv2d(g, nhwc, ops::constant(g, testing::random_tensor({3, 3, 2, 3}, 70), "w"),
                         {}, "conv");
  Output nchw = ops::transpose(g, c, {0, 3, 1, 2}, "to_nchw");
  Output flat = ops::reshape(g, nchw, {-1, 27}, "flat");
  ops::matmul(g, flat, ops::constant(g, testing::random_tensor({27, 4}, 71), "fc/w"), false, false,
              "fc");
  Graph q = quantize_eightbit(g, EightbitOptions{});
  // The input transpose has nothing 8-bit to move; the ones after the conv do.
  EXPECT_EQ(q.node(q.id_of("to_nhwc")).outputs[0].dtype, DType::f32);
  EXPECT_EQ(q.node(q.id_of("to_nchw/quantized")).outputs[0].dtype, DType::u8);
  EXPECT_EQ(q.node(q.id_of("flat/quantized")).outputs[0].dtype, DType::u8);
  EXPECT_EQ(q.node(q.node(q.id_of("fc/accumulator")).inputs[0].node).name, "flat/quantized");
  EXPECT_EQ(testing::count_ops(q, "Quantize"), 1);
  EXPECT_EQ(testing::count_ops(q, "Dequantize"), 1);
  Tensor in = testing::random_tensor({8, 2, 5, 5}, 72);
  EXPECT_LT(relative_error(run_graph(g, "x", in, "fc"), run_graph(q, "x", in, "fc")), 0.05);
}

TEST(QuantizeEightbitTest, TrainedMnistModelKeepsItsAccuracy) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("sf-eightbit");
  TrainOptions o;
  o.model_path = testing::source_path("tests/data/tiny-cnn.yaml");
  o.out_dir = dir + "/run";
  o.epochs = 1;
  o.train_limit = 640;
  o.test_limit = 100;
  o.threads = 1;
  train(o, {});
  ModelFile model = freeze_run(o.out_dir);
  DataSplit data = load_dataset("mnist");
  Dataset test = take(data.test, 300);

  EightbitOptions options;
  options.outputs = model.outputs;
  auto calibration_images = open_image_source("mnist", 200, ImageInputSpec{28, 28, 1});
  CalibrationOptions calibration;
  calibration.threads = 1;
  calibration.range.method = RangeMethod::entropy;
  options.ranges =
      calibrate(model.graph, model.inputs, eightbit_range_tensors(model.graph, options),
                *calibration_images, calibration);
  Tensor want = run_graph(model.graph, "input", examples_as_floats(test), model.outputs[0]);
  for (bool calibrated : {true, false}) {
    EightbitOptions o2 = options;
    if (!calibrated) o2.ranges.reset();
    EightbitGraph q = rewrite_eightbit(model.graph, o2);
    expect_no_dequantize_quantize_pairs(q.graph);
    EXPECT_EQ(testing::count_ops(q.graph, "RequantizationRange") > 0, !calibrated);
    Tensor got = run_graph(q.graph, "input", examples_as_floats(test), q.outputs[0]);
    EXPECT_GE(argmax_agreement(want, got), 0.97) << (calibrated ? "calibrated" : "run-time ranges");
    if (calibrated) {
      EightbitReport report =
          compare_layers(model.graph, q, model.inputs, *calibration_images, calibration);
      EXPECT_EQ(report.layers.size(), 6u);  // conv1, pool1, conv2, pool2, fc1, fc2
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sf
