// The eightbit pipeline (quantize/eightbit_model.h) makes what its steps make one by one, and
// an NCHW model calibrated on NHWC images that skip its input move gets the ranges it got from
// permuted images.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "codec/sparse_codec.h"
#include "io/npy.h"
#include "modelfile/model_file.h"
#include "ops/ops.h"
#include "quantize/eightbit_model.h"
#include "runtime/session.h"
#include "support/temp_files.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// Twelve RGB images 4x5 as one IDX file of u8 [N,H,W,C].
std::string write_images(const std::string& dir) {
  const std::string path = dir + "/images.idx";
  const uint32_t dims[4] = {12, 4, 5, 3};
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return path;
  const uint8_t magic[4] = {0, 0, 0x08, 4};
  std::fwrite(magic, 1, 4, f);
  for (uint32_t d : dims) {
    const uint8_t be[4] = {static_cast<uint8_t>(d >> 24), static_cast<uint8_t>(d >> 16),
                           static_cast<uint8_t>(d >> 8), static_cast<uint8_t>(d)};
    std::fwrite(be, 1, 4, f);
  }
  for (uint32_t i = 0; i < 12 * 4 * 5 * 3; ++i) std::fputc(static_cast<int>((i * 37) % 251), f);
  std::fclose(f);
  return path;
}

Output conv(Graph& g, Output x, int64_t out, uint32_t seed, const std::string& name) {
  const int64_t in = g.type(x).shape[3];
  return g.add("FusedConv2D",
               {x, ops::constant(g, testing::random_tensor({3, 3, in, out}, seed)),
                ops::constant(g, testing::random_tensor({out}, seed + 1))},
               {{"padding", std::string("SAME")}, {"activation", std::string("relu")}}, name);
}

// An imported ONNX model's shape: x NCHW [1,3,4,5] -> Transpose -> two convs -> flatten ->
// dense -> logits.
ModelFile nchw_model() {
  ModelFile model;
  Graph& g = model.graph;
  Output x = ops::placeholder(g, DType::f32, {1, 3, 4, 5}, "x");
  Output c =
      conv(g, conv(g, ops::transpose(g, x, {0, 2, 3, 1}, "x/to_nhwc"), 4, 1, "c1"), 2, 3, "c2");
  Output flat = ops::reshape(g, c, {-1, 40}, "flat");
  ops::matmul(g, flat, ops::constant(g, testing::random_tensor({40, 10}, 5), "fc/w"), false, false,
              "logits");
  model.inputs = {"x"};
  model.outputs = {"logits"};
  model.metadata = {{"format", "onnx"}, {"input_layout", "NCHW"}};
  return model;
}

Tensor run(const Graph& g, const Tensor& x) {
  Session session(g);
  return session.run({{Output{g.id_of("x"), 0}, x}}, {Output{g.id_of("logits"), 0}})[0].clone();
}

TEST(EightbitModel, CalibratesAnNchwModelAsItsStepsDoOnPermutedImages) {
  const std::string images = write_images(testing::make_temp_dir("sf-eightbit-model"));
  const ModelFile model = nchw_model();
  EightbitModelOptions options;
  options.calib_data = images;
  options.report = true;
  int64_t announced = 0;
  options.on_calibrating = [&](int64_t count) { announced = count; };
  const EightbitModel q = quantize_model_eightbit(model, "nchw.onnx", options);

  // The steps by hand, with the images permuted to the declared NCHW.
  EightbitOptions rewrite{.per_channel = false, .outputs = model.outputs};
  ImageInputSpec spec{.height = 4, .width = 5, .channels = 3, .nchw = true};
  auto source = open_image_source(images, 1000, spec);
  CalibrationOptions co;
  co.batch_size = 1;  // the model is declared with batch 1
  rewrite.ranges = calibrate(model.graph, model.inputs,
                             eightbit_range_tensors(model.graph, rewrite), *source, co);
  const EightbitGraph want = rewrite_eightbit(model.graph, rewrite);

  EXPECT_TRUE(q.calibrated);
  EXPECT_FALSE(q.learned_ranges);
  EXPECT_EQ(announced, 12);
  EXPECT_EQ(q.calibration_images, 12);
  EXPECT_EQ(q.ranges, "calibrated activation ranges");
  ASSERT_EQ(q.layers.size(), want.layers.size());
  for (size_t i = 0; i < q.layers.size(); ++i)
    EXPECT_EQ(q.layers[i].quantized_op, want.layers[i].quantized_op) << q.layers[i].name;
  const Tensor x = testing::random_tensor({2, 3, 4, 5}, 9, 0.0f, 1.0f);
  EXPECT_EQ(testing::values<float>(run(q.model.graph, x)),
            testing::values<float>(run(want.graph, x)));
  EXPECT_EQ(q.model.inputs, model.inputs);
  EXPECT_EQ(q.model.metadata.at("input_layout"), "NCHW");
  EXPECT_EQ(q.model.metadata.at("quantization"), "eightbit, calibrated activation ranges");
  EXPECT_EQ(q.model.metadata.at("calibration"), "12 images from " + images + ", minmax");
  EXPECT_LT(q.weight_bytes, q.fp32_weight_bytes);

  const EightbitReport report = compare_layers(model.graph, want, model.inputs, *source, co);
  ASSERT_EQ(q.report.layers.size(), report.layers.size());
  for (size_t i = 0; i < report.layers.size(); ++i) {
    EXPECT_EQ(q.report.layers[i].name, report.layers[i].name);
    EXPECT_DOUBLE_EQ(q.report.layers[i].sqnr_db, report.layers[i].sqnr_db);
  }
}

TEST(EightbitModel, WithoutCalibrationRangesAreFoundAtRunTime) {
  const EightbitModel q = quantize_model_eightbit(nchw_model(), "nchw.onnx", {});
  EXPECT_FALSE(q.calibrated);
  EXPECT_EQ(q.ranges, "activation ranges at run time");
  EXPECT_EQ(q.model.metadata.count("calibration"), 0u);
  EXPECT_FALSE(q.float_ops.empty());  // the input transpose
}

// x [2,8] -> MatMul "proj" -> ReduceMean/Sub (a normalization) -> Softmax "probs" -> MatMul
// "out": the first MatMul is quantized and every op left in float is named with its reason.
TEST(EightbitModel, NamesTheOpsThatStayFloatAndWhy) {
  ModelFile model;
  Graph& g = model.graph;
  const Output x = ops::placeholder(g, DType::f32, {2, 8}, "x");
  const Output h = ops::matmul(g, x, ops::constant(g, testing::random_tensor({8, 8}, 21), "proj/w"),
                               false, false, "proj");
  const Output centered =
      ops::sub(g, h, ops::reduce_mean(g, h, {1}, true, "norm/mean"), "norm/sub");
  const Output probs = ops::softmax(g, centered, "probs");
  ops::matmul(g, probs, ops::constant(g, testing::random_tensor({8, 4}, 22), "out/w"), false, false,
              "out");
  model.inputs = {"x"};
  model.outputs = {"out"};
  EightbitModelOptions options;
  options.exclude = {"out"};
  const EightbitModel q = quantize_model_eightbit(model, "small.sfm", options);

  ASSERT_EQ(q.layers.size(), 1u);
  EXPECT_EQ(q.layers[0].name, "proj");
  std::vector<std::string> named;
  for (const FloatNode& n : q.float_nodes) named.push_back(n.name + " " + n.op + ": " + n.reason);
  EXPECT_EQ(named, (std::vector<std::string>{
                       "norm/mean ReduceMean: no integer kernel", "norm/sub Sub: no integer kernel",
                       "probs Softmax: no integer kernel", "out MatMul: excluded"}));
  EXPECT_EQ(float_nodes_summary(q.float_nodes),
            "MatMul x1 (excluded), ReduceMean x1 (no integer kernel), Softmax x1 (no integer "
            "kernel), Sub x1 (no integer kernel)");
  EXPECT_EQ(float_nodes_summary({}), "nothing");
}

// A dense layer on a sequence ([2,3,8] by constant [8,4], a BatchMatMul as ONNX imports it) is
// quantized on its rows; the product of two activations after it stays float, saying why.
TEST(EightbitModel, BatchedProductByConstantWeightsIsQuantized) {
  ModelFile model;
  Graph& g = model.graph;
  const Output x = ops::placeholder(g, DType::f32, {2, 3, 8}, "x");
  const Output dense = ops::batch_matmul(
      g, x, ops::constant(g, testing::random_tensor({8, 4}, 23), "dense/w"), false, false, "dense");
  ops::batch_matmul(g, dense, dense, false, true, "scores");
  model.inputs = {"x"};
  model.outputs = {"scores"};
  const EightbitModel q = quantize_model_eightbit(model, "seq.sfm", {});

  ASSERT_EQ(q.layers.size(), 1u);
  EXPECT_EQ(q.layers[0].name, "dense");
  ASSERT_EQ(q.float_nodes.size(), 1u);
  EXPECT_EQ(q.float_nodes[0].name, "scores");
  EXPECT_EQ(q.float_nodes[0].reason, "its right operand is not constant weights");
  const Tensor xv = testing::random_tensor({2, 3, 8}, 24);
  const auto scores = [&](const Graph& graph) {
    Session session(graph);
    return testing::values<float>(
        session.run({{Output{graph.id_of("x"), 0}, xv}}, {Output{graph.id_of("scores"), 0}})[0]);
  };
  const std::vector<float> want = scores(model.graph), got = scores(q.model.graph);
  ASSERT_EQ(got.size(), 2u * 3 * 3);
  float max_abs = 0.0f;
  for (float v : want) max_abs = std::max(max_abs, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.05f * max_abs) << i;

  // Made at batch 2, the model still runs at batch 1: the rows' reshapes leave the batch free.
  Session session(q.model.graph);
  const Tensor one = testing::random_tensor({1, 3, 8}, 25);
  EXPECT_EQ(session
                .run({{Output{q.model.graph.id_of("x"), 0}, one}},
                     {Output{q.model.graph.id_of("scores"), 0}})[0]
                .shape(),
            (Shape{1, 3, 3}));
}

TEST(EightbitModel, ErrorsNameTheNodeOrTheModel) {
  EightbitModelOptions options;
  options.exclude = {"nosuch"};
  options.calib_data = "/nonexistent/images";  // the exclude list is checked first
  testing::expect_error([&] { quantize_model_eightbit(nchw_model(), "nchw.onnx", options); },
                        "'nosuch'");
  ModelFile flat;
  Output x = ops::placeholder(flat.graph, DType::f32, {1, 40}, "x");
  ops::matmul(flat.graph, x, ops::constant(flat.graph, testing::random_tensor({40, 10}, 5)), false,
              false, "logits");
  flat.inputs = {"x"};
  flat.outputs = {"logits"};
  EightbitModelOptions calibrated;
  calibrated.calib_data = "mnist";
  testing::expect_error([&] { quantize_model_eightbit(flat, "flat.sfm", calibrated); },
                        "flat.sfm: calibration on images needs an image input, the model's is "
                        "[1,40] (give example inputs as .npy instead: --calib-data FILE.npy)");
}

// A model whose input is no image (features [1,40]) calibrates on example inputs in a .npy.
TEST(EightbitModel, CalibratesOnNpyExamplesOfAModelWithoutImageInput) {
  const std::string dir = testing::make_temp_dir("eightbit-npy");
  ModelFile flat;
  Graph& g = flat.graph;
  Output x = ops::placeholder(g, DType::f32, {1, 40}, "x");
  Output w1 = ops::constant(g, testing::random_tensor({40, 16}, 7), "fc1/w");
  Output h = ops::relu(g, ops::matmul(g, x, w1, false, false, "fc1"), "fc1/relu");
  Output w2 = ops::constant(g, testing::random_tensor({16, 10}, 8), "fc2/w");
  ops::matmul(g, h, w2, false, false, "logits");
  flat.inputs = {"x"};
  flat.outputs = {"logits"};
  const Tensor examples = testing::random_tensor({24, 40}, 9);
  write_npy(dir + "/features.npy", examples);
  EightbitModelOptions options;
  options.calib_data = dir + "/features.npy";
  options.calib_count = 16;
  const EightbitModel q = quantize_model_eightbit(flat, "flat.sfm", options);
  EXPECT_TRUE(q.calibrated);
  EXPECT_EQ(q.calibration_images, 16);
  EXPECT_EQ(q.model.metadata.at("calibration"),
            "16 examples from " + dir + "/features.npy, minmax");
  EXPECT_EQ(q.layers.size(), 2u);
  // The calibrated integer model computes what the float one does, within 8-bit error.
  Tensor one(DType::f32, {1, 40});
  std::memcpy(one.raw(), examples.raw(), one.bytes());
  const auto logits = [&](const Graph& graph) {
    Session session(graph);
    return testing::values<float>(session.run({{Output{graph.id_of("x"), 0}, one}},
                                              {Output{graph.id_of("logits"), 0}})[0]);
  };
  const std::vector<float> want = logits(flat.graph), got = logits(q.model.graph);
  float max_abs = 0.0f;
  for (float v : want) max_abs = std::max(max_abs, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.05f * max_abs) << i;

  // A model made for batches of 3 (as --input-shape specializes one) calibrates on whole
  // batches of 3: 15 of the 16 examples.
  ModelFile by3;
  Output x3 = ops::placeholder(by3.graph, DType::f32, {3, 40}, "x");
  ops::matmul(by3.graph, ops::reshape(by3.graph, x3, {3, 40}, "fixed"),
              ops::constant(by3.graph, testing::random_tensor({40, 10}, 8), "fc/w"), false, false,
              "logits");
  by3.inputs = {"x"};
  by3.outputs = {"logits"};
  EXPECT_EQ(quantize_model_eightbit(by3, "by3.sfm", options).calibration_images, 15);
  options.calib_count = 2;
  testing::expect_error([&] { quantize_model_eightbit(by3, "by3.sfm", options); },
                        "by3.sfm: the model takes batches of 3 (its input is [3,40]); the "
                        "calibration data has 2 example(s)");
  std::filesystem::remove_all(dir);
}

// x [1,256] -> dense 256x512 with 90% of its weights pruned -> logits.
ModelFile pruned_model() {
  ModelFile model;
  Graph& g = model.graph;
  Output x = ops::placeholder(g, DType::f32, {1, 256}, "x");
  Tensor w = testing::random_tensor({256, 512}, 11);
  float* v = w.data<float>();
  for (int64_t i = 0; i < w.numel(); ++i)
    if (i % 10 != 3) v[i] = 0.0f;
  ops::matmul(g, x, ops::constant(g, w, "fc/w"), false, false, "logits");
  model.inputs = {"x"};
  model.outputs = {"logits"};
  return model;
}

TEST(EightbitModel, PrunedInt8WeightsAreStoredSparseAndRunByteForByteAsDense) {
  const std::string dir = testing::make_temp_dir("sf-eightbit-sparse");
  const ModelFile pruned = pruned_model();
  const EightbitModel q = quantize_model_eightbit(pruned, "pruned.sfm", {});
  // The int8 weights, and the zero bias the rewrite gave the product.
  ASSERT_EQ(q.model.encoded_weights.count("logits/weights_quantized"), 1u);
  const quant::EncodedTensor& stored = q.model.encoded_weights.at("logits/weights_quantized");
  EXPECT_EQ(stored.dtype, DType::i8);
  EXPECT_EQ(stored.encoding.kind, quant::Encoding::sparse);

  ModelFile dense = q.model;
  dense.encoded_weights.clear();
  ModelFile pruned_fp32 = pruned;  // as freeze stores a pruned model
  pruned_fp32.encoded_weights["fc/w"] =
      *sparse_if_smaller(pruned.graph.node(pruned.graph.id_of("fc/w")).attrs.get_tensor("value"));
  save_model(dir + "/sparse-int8.sfm", q.model);
  save_model(dir + "/dense-int8.sfm", dense);
  save_model(dir + "/pruned-fp32.sfm", pruned_fp32);
  const auto size = [&](const char* name) { return std::filesystem::file_size(dir + "/" + name); };
  EXPECT_LT(size("sparse-int8.sfm"), size("pruned-fp32.sfm"));
  EXPECT_LT(size("sparse-int8.sfm") * 3, size("dense-int8.sfm"));

  const ModelFile from_sparse = load_model(dir + "/sparse-int8.sfm");
  const ModelFile from_dense = load_model(dir + "/dense-int8.sfm");
  EXPECT_EQ(from_sparse.stored_weights.count("logits/weights_quantized"), 1u);
  const Tensor x = testing::random_tensor({1, 256}, 12, 0.0f, 1.0f);
  const Tensor a = run(from_sparse.graph, x), b = run(from_dense.graph, x);
  ASSERT_EQ(a.bytes(), b.bytes());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.bytes()), 0);
}

}  // namespace
}  // namespace sf
