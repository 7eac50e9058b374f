// Binary and ternary networks: the binarization ops and their straight-through gradients, the
// `binary`/`binarize` spec keys, training with --binarize, the packed encodings in .sfm files,
// and the bit-packed kernels against their reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "autodiff/gradients.h"
#include "codec/binary_weights.h"
#include "codec/weight_codec.h"
#include "cpu/cpu_features.h"
#include "cpu/measured_split.h"
#include "kernels/binary/bit_conv.h"
#include "kernels/binary/bit_gemm.h"
#include "modelfile/model_file.h"
#include "models/spec.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "ops/binary_ops.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "quantize/eightbit_model.h"
#include "quantize/eightbit_rewrite.h"
#include "quantize/weight_quantizer.h"
#include "transforms/execution_passes.h"
#include "runtime/session.h"
#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/model_bytes.h"
#include "support/testing.h"
#include "train/freeze_run.h"
#include "train/trainer.h"
#include "train/training_run.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// --- the weight math ---

TEST(BinarizeWeightsTest, SignTimesMeanMagnitudePerOutputChannel) {
  Tensor w(DType::f32, {3, 2});
  const std::vector<float> values = {0.5f, -2.0f, -0.1f, 1.0f, 0.0f, -3.0f};
  std::copy(values.begin(), values.end(), w.data<float>());
  const Tensor b = quant::binarize_weights(w);
  const float a0 = (0.5f + 0.1f + 0.0f) / 3, a1 = (2.0f + 1.0f + 3.0f) / 3;
  EXPECT_EQ(testing::values<float>(b), (std::vector<float>{a0, -a1, -a0, a1, a0, -a1}));
}

TEST(TernarizeWeightsTest, TwnThresholdAndScaleOfTheKeptWeights) {
  Tensor w(DType::f32, {4, 1});
  const std::vector<float> values = {1.0f, -0.2f, -0.8f, 0.4f};  // mean 0.6, threshold 0.42
  std::copy(values.begin(), values.end(), w.data<float>());
  const Tensor t = quant::ternarize_weights(w);
  EXPECT_EQ(testing::values<float>(t), (std::vector<float>{0.9f, 0.0f, -0.9f, 0.0f}));
  const std::optional<quant::SignedLevels> levels = quant::signed_levels(t);
  ASSERT_TRUE(levels);
  EXPECT_TRUE(levels->ternary);
  EXPECT_EQ(levels->scales, std::vector<float>{0.9f});
  EXPECT_FALSE(quant::signed_levels(testing::random_tensor({5, 3}, 1)));
}

// --- straight-through gradients ---

// loss = sum(op(x) * r); returns d loss / d x.
Tensor straight_through_gradient(const std::function<Output(Graph&, Output)>& op, const Tensor& x,
                                 const Tensor& r) {
  Graph g;
  Output xp = ops::placeholder(g, DType::f32, x.shape(), "x");
  Output loss = ops::reduce_sum(g, ops::mul(g, op(g, xp), ops::constant(g, r, "r")), {}, false, "loss");
  Output dx = gradients(g, loss, {xp})[0];
  Session session(g);
  return session.run({{xp, x}}, {dx})[0].clone();
}

// The straight-through gradient is the derivative of hard-tanh, clip(x, -1, 1): checked against
// its central differences at points away from the kinks at -1 and +1, where it is defined.
TEST(BinarizeGradientTest, StraightThroughEqualsHardTanhFiniteDifferences) {
  const uint32_t seed = 7;
  SCOPED_TRACE("seed 7");
  Tensor x = testing::random_tensor({64}, seed, -2.0f, 2.0f);
  for (int64_t i = 0; i < x.numel(); ++i)
    if (std::fabs(std::fabs(x.data<float>()[i]) - 1.0f) < 0.05f) x.data<float>()[i] = 0.5f;
  const Tensor r = testing::random_tensor({64}, seed + 1);
  auto hard_tanh = [](double v) { return std::clamp(v, -1.0, 1.0); };
  const double eps = 1e-3;
  for (bool weights : {false, true}) {
    const Tensor dx = straight_through_gradient(
        [&](Graph& g, Output in) {
          return weights ? ops::reshape(g, ops::binarize_weights(g, ops::reshape(g, in, {8, 8}), false), {64})
                         : ops::binarize_activation(g, in);
        },
        x, r);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.data<float>()[i];
      const double numeric = (hard_tanh(v + eps) - hard_tanh(v - eps)) / (2 * eps) * r.data<float>()[i];
      EXPECT_NEAR(dx.data<float>()[i], numeric, 1e-5)
          << (weights ? "weights" : "activation") << " element " << i << " x " << v;
    }
  }
}

// Where the gradient is defined, the float activations of a binary-weight conv and dense layer
// get exact gradients (checked by central differences).
TEST(BinarizeGradientTest, FloatInputsOfBinaryWeightLayersMatchFiniteDifferences) {
  const Tensor filter = testing::random_tensor({3, 3, 3, 5}, 11);
  const Tensor matrix = testing::random_tensor({7, 4}, 12);
  testing::expect_gradients_match(
      [&](Graph& g, const std::vector<Output>& in) {
        ops::Conv2DOptions o;
        o.padding = "SAME";
        return ops::conv2d(g, in[0], ops::binarize_weights(g, ops::constant(g, filter, "w"), false), o);
      },
      {testing::random_tensor({1, 5, 6, 3}, 13)}, 13);
  testing::expect_gradients_match(
      [&](Graph& g, const std::vector<Output>& in) {
        return ops::matmul(g, in[0], ops::binarize_weights(g, ops::constant(g, matrix, "w"), true));
      },
      {testing::random_tensor({2, 7}, 14)}, 14);
}

// --- specs ---

int count_op(const Graph& g, const std::string& op) { return testing::count_ops(g, op); }

std::string tiny_spec_text() {
  std::ifstream in(testing::source_path("tests/data/tiny-cnn.yaml"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(BinarizeSpecTest, KeepsTheFirstConvAndTheLastDenseFloatUnlessAll) {
  const ModelSpec base = parse_model_spec(tiny_spec_text(), "tiny-cnn.yaml");
  const Model xnor = build_model(with_binarize(base, "xnor", false), 1);
  EXPECT_EQ(count_op(xnor.graph, op_names::kBinarizeWeights), 2);     // conv2, fc1
  EXPECT_EQ(count_op(xnor.graph, op_names::kBinarizeActivation), 2);
  EXPECT_GE(xnor.graph.find("conv2/weights_binarized"), 0);
  EXPECT_GE(xnor.graph.find("fc1/binarize_input"), 0);
  EXPECT_LT(xnor.graph.find("conv1/weights_binarized"), 0);
  const Model all = build_model(with_binarize(base, "weights", true), 1);
  EXPECT_EQ(count_op(all.graph, op_names::kBinarizeWeights), 4);
  EXPECT_EQ(count_op(all.graph, op_names::kBinarizeActivation), 0);
  for (const Parameter& p : all.parameters)
    EXPECT_EQ(p.clip_to_unit, p.name.ends_with("/weights")) << p.name;
  const Model ternary = build_model(with_binarize(base, "ternary", false), 1);
  const Node& t = ternary.graph.node(ternary.graph.find("fc1/weights_binarized"));
  EXPECT_EQ(t.attrs.get_string("mode"), "ternary");
  EXPECT_THROW(with_binarize(with_binarize(base, "xnor", false), "ternary", false), Error);
}

TEST(BinarizeSpecTest, PerLayerKeyAndBadValues) {
  std::string text = tiny_spec_text();
  const std::string fc1 = "{name: fc1, type: dense, units: 64, activation: relu}";
  text.replace(text.find(fc1), fc1.size(), "{name: fc1, type: dense, units: 64, activation: relu, binary: ternary}");
  const Model m = build_model(parse_model_spec(text, "t.yaml"), 1);
  EXPECT_EQ(count_op(m.graph, op_names::kBinarizeWeights), 1);
  testing::expect_error([&] { parse_model_spec(tiny_spec_text() + "binarize: {mode: two}\n", "t.yaml"); },
                        "binarize mode 'two' must be weights, xnor or ternary");
  testing::expect_error([&] { parse_model_spec(tiny_spec_text() + "binarize: xnor\n", "t.yaml"); },
                        "'binarize' must be a mapping");
  std::string bad = tiny_spec_text();
  bad.replace(bad.find(fc1), fc1.size(), "{name: fc1, type: dense, units: 64, binary: 1bit}");
  testing::expect_error([&] { parse_model_spec(bad, "t.yaml"); },
                        "layer 'fc1' (dense): binary '1bit' must be weights, xnor or ternary");
}

// --- encodings ---

TEST(BinaryEncodingTest, RoundTripsBinaryAndTernaryIn1And2Bits) {
  for (bool ternary : {false, true}) {
    const Tensor w = testing::random_tensor({3, 3, 5, 7}, 21);
    const Tensor b = ternary ? quant::ternarize_weights(w) : quant::binarize_weights(w);
    const quant::EncodedTensor e = ternary ? quant::encode_ternary(b) : quant::encode_binary(b);
    EXPECT_EQ(e.data.size(), (b.numel() * (ternary ? 2 : 1) + 7) / 8);
    EXPECT_EQ(e.encoding.scales.size(), 7u);
    EXPECT_EQ(e.encoding.axis, 3);
    EXPECT_EQ(testing::values<float>(quant::decode(e)), testing::values<float>(b));
    EXPECT_EQ(quant::first_format_version(e.encoding.kind), 3u);
  }
  testing::expect_error([] { quant::encode_binary(testing::random_tensor({4, 2}, 3)); },
                        "cannot binary-encode");
  testing::expect_error([] { quant::encode_binary(quant::ternarize_weights(testing::random_tensor({40, 2}, 3))); },
                        "cannot binary-encode");
}

TEST(BinaryEncodingTest, RejectsEveryMalformedField) {
  const Tensor b = quant::ternarize_weights(testing::random_tensor({6, 3}, 5));
  const quant::EncodedTensor good = quant::encode_ternary(b);
  auto rejects = [&](const std::function<void(quant::EncodedTensor&)>& edit, const std::string& want) {
    quant::EncodedTensor e = good;
    edit(e);
    testing::expect_error([&] { quant::decode(e); }, want);
  };
  rejects([](quant::EncodedTensor& e) { e.encoding.bits = 1; }, "ternary bits 1 must be 2");
  rejects([](quant::EncodedTensor& e) { e.encoding.axis = 0; }, "ternary axis 0 must be the last axis");
  rejects([](quant::EncodedTensor& e) { e.encoding.scales.pop_back(); }, "2 scales, expected 3");
  rejects([](quant::EncodedTensor& e) { e.encoding.scales[1] = -1.0f; }, "scale 1 is -1");
  rejects([](quant::EncodedTensor& e) { e.encoding.scales[2] = NAN; }, "scale 2 is nan");
  rejects([](quant::EncodedTensor& e) { e.data.pop_back(); }, "bytes, but ternary 2-bit");
  rejects([](quant::EncodedTensor& e) { e.data[0] = 0xff; }, "ternary element 0 has code 3");
}

// --- training, freezing, the file ---

class BinaryTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_MNIST();
  }
  static TrainOptions options(const std::string& out, const std::string& mode) {
    TrainOptions o;
    o.model_path = testing::source_path("tests/data/tiny-cnn.yaml");
    o.out_dir = out;
    o.epochs = 1;
    o.train_limit = 640;
    o.test_limit = 200;
    o.threads = 1;
    o.seed = 3;
    o.binarize = mode;
    return o;
  }
};

// The frozen model's outputs against the training graph's in eval mode, on the run's variables.
void expect_frozen_equals_training_graph(const std::string& run_dir, const ModelFile& frozen) {
  const TrainingRun run(run_dir);
  Model model = build_model(run.spec(), 2);
  Output probabilities = ops::softmax(model.graph, model.logits, "probabilities");
  auto store = std::make_shared<VariableStore>();
  run.restore_variables(*store, model);
  Session training_graph(model.graph, {}, store);
  Session inference(frozen.graph);
  const Tensor images = testing::random_tensor({2, 28, 28, 1}, 8, 0.0f, 1.0f);
  const Tensor want = training_graph.run({{model.input, images}}, {probabilities})[0].clone();
  const Tensor got = inference.run({{Output{frozen.graph.id_of("input"), 0}, images}},
                                   {Output{frozen.graph.id_of(frozen.outputs[0]), 0}})[0].clone();
  testing::expect_close(want, got, {.rtol = 1e-3, .atol = 1e-4}, "frozen vs training graph");
}

TEST_F(BinaryTrainTest, XnorTrainsClipsFreezesInOneBitAndRunsTheXnorKernels) {
  const std::string dir = testing::make_temp_dir("xnor");
  const std::vector<EpochReport> reports = train(options(dir, "xnor"), {});
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_GT(reports[0].test_accuracy, 0.3);  // 640 images, one epoch: far above chance (0.1)
  const TrainingRun run(dir);
  for (const auto& [name, value] : run.variables()) {
    if (name != "conv2/weights" && name != "fc1/weights") continue;
    for (float v : testing::values<float>(value)) ASSERT_LE(std::fabs(v), 1.0f) << name;
  }

  ModelFile frozen = freeze_run(dir);
  ASSERT_EQ(frozen.encoded_weights.count("conv2/weights"), 1u);
  ASSERT_EQ(frozen.encoded_weights.count("fc1/weights"), 1u);
  EXPECT_EQ(frozen.encoded_weights.at("fc1/weights").encoding.kind, quant::Encoding::binary);
  EXPECT_EQ(frozen.encoded_weights.count("conv1/weights"), 0u);
  expect_frozen_equals_training_graph(dir, frozen);

  const std::string path = dir + "/xnor.sfm";
  save_model(path, frozen);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(bytes[8], 3);  // format version 3: binary encodings
  ModelFile loaded = load_model(path);
  EXPECT_EQ(loaded.stored_weights.at("fc1/weights").encoding.kind, quant::Encoding::binary);

  // conv2 and fc1 run the XNOR kernels, the float layers what they ran before.
  Session session(loaded.graph);
  session.set_profiling(true);
  session.run({{Output{loaded.graph.id_of("input"), 0}, testing::random_tensor({1, 28, 28, 1}, 2, 0.0f, 1.0f)}},
              {Output{loaded.graph.id_of(loaded.outputs[0]), 0}});
  // (The sparse kernels see frozen weights first and hand dense ones on: "sparse:dense:...".)
  const std::string xnor = std::string("xnor_") + binary::xnor_gemm_impl();
  int binary_layers = 0;
  for (const NodeProfile& p : session.profile()) {
    const bool ran_xnor = p.impl.ends_with(":" + xnor);
    EXPECT_EQ(ran_xnor, p.name == "conv2" || p.name == "fc1") << p.name << " ran " << p.impl;
    binary_layers += ran_xnor;
  }
  EXPECT_EQ(binary_layers, 2);

  // As it runs (execution passes): pool1 writes conv2's input as packed bits, a SignBits packs
  // fc1's (pool2's 16 channels do not fill a 32-bit element, so its flatten stays); the same
  // outputs exactly.
  std::vector<std::string> names = loaded.outputs;
  const Graph runs = optimize_for_execution(loaded.graph, names);
  EXPECT_EQ(testing::count_ops(runs, op_names::kMaxPoolSignBits), 1);
  EXPECT_EQ(testing::count_ops(runs, op_names::kSignBits), 1);
  EXPECT_EQ(testing::count_ops(runs, op_names::kXnorConv2D), 1);
  EXPECT_EQ(testing::count_ops(runs, op_names::kXnorMatMul), 1);
  EXPECT_EQ(testing::count_ops(runs, op_names::kBinarizeActivation), 0);
  const Tensor images = testing::random_tensor({3, 28, 28, 1}, 4, 0.0f, 1.0f);
  Session unfused(loaded.graph), fused(runs);
  const Tensor want = unfused.run({{Output{loaded.graph.id_of("input"), 0}, images}},
                                  {Output{loaded.graph.id_of(loaded.outputs[0]), 0}})[0].clone();
  const Tensor got = fused.run({{Output{runs.id_of("input"), 0}, images}}, {Output{runs.id_of(names[0]), 0}})[0].clone();
  EXPECT_EQ(testing::values<float>(got), testing::values<float>(want));

  // Eightbit and weights-only quantization keep the binarized layers binary, stored in 1 bit.
  const EightbitModel q = quantize_model_eightbit(loaded, path, {});
  for (const EightbitLayer& layer : q.layers)
    EXPECT_TRUE(layer.name != "conv2" && layer.name != "fc1") << layer.name;
  EXPECT_EQ(q.model.encoded_weights.at("fc1/weights").encoding.kind, quant::Encoding::binary);
  ModelFile weights_only = load_model(path);
  quant::quantize_model_weights(weights_only, {});
  EXPECT_EQ(weights_only.encoded_weights.at("fc1/weights").encoding.kind, quant::Encoding::binary);
  EXPECT_EQ(weights_only.encoded_weights.at("fc2/weights").encoding.kind, quant::Encoding::linear);

  // An older reader rejects the file by its version; a file claiming an older version with
  // binary tensors is rejected naming the tensor.
  std::string old = bytes;
  testing::put_u32(old, 8, 2);
  std::ofstream(dir + "/old.sfm", std::ios::binary) << old;
  testing::expect_error([&] { load_model(dir + "/old.sfm"); }, "which format version 2 does not have");

  // ONNX has no operator for the binary activations: the export refuses, naming the node.
  testing::expect_error([&] { export_onnx_bytes(frozen, "xnor.onnx"); },
                        "node 'conv2/binarize_input' (BinarizeActivation)");

  // Resuming keeps the mode; another mode is refused.
  TrainOptions resume;
  resume.resume_dir = dir;
  resume.epochs = 1;
  resume.binarize = "ternary";
  EXPECT_THROW(train(resume, {}), Error);
  std::filesystem::remove_all(dir);
}

TEST_F(BinaryTrainTest, CorruptPackedTensorIsRejectedNamingIt) {
  const std::string dir = testing::make_temp_dir("twn");
  TrainOptions o = options(dir, "ternary");
  o.train_limit = 64;
  o.test_limit = 32;
  train(o, {});
  ModelFile frozen = freeze_run(dir);
  ASSERT_EQ(frozen.encoded_weights.at("fc1/weights").encoding.kind, quant::Encoding::ternary);
  expect_frozen_equals_training_graph(dir, frozen);
  const std::string path = dir + "/twn.sfm";
  save_model(path, frozen);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  // Every code 3 (undefined) in fc1's data.
  std::string bad = bytes;
  const nlohmann::json meta = nlohmann::json::parse(testing::metadata_text(bytes));
  const uint64_t data_at = testing::get_u64(bytes, 32);
  for (const auto& t : meta["tensors"])
    if (t["encoding"] == "ternary" && t["shape"][1] == 64) {
      const uint64_t at = data_at + t["offset"].get<uint64_t>();
      for (uint64_t i = 0; i < t["bytes"].get<uint64_t>(); ++i) bad[at + i] = static_cast<char>(0xff);
    }
  std::ofstream(dir + "/bad.sfm", std::ios::binary) << bad;
  testing::expect_error([&] { load_model(dir + "/bad.sfm"); }, "fc1/weights");
  testing::expect_error([&] { load_model(dir + "/bad.sfm"); }, "has code 3");
  std::filesystem::remove_all(dir);
}

TEST_F(BinaryTrainTest, FineTunesAFloatRunWithBinaryWeights) {
  const std::string base = testing::make_temp_dir("bc-base"), tuned = testing::make_temp_dir("bc");
  TrainOptions o = options(base, "");
  o.train_limit = 320;
  train(o, {});
  TrainOptions f;
  f.init_from = base;
  f.out_dir = tuned;
  f.epochs = 1;
  f.train_limit = 320;
  f.test_limit = 100;
  f.threads = 1;
  f.binarize = "weights";
  f.binarize_all = true;
  const std::vector<EpochReport> reports = train(f, {});
  EXPECT_GT(reports[0].test_accuracy, 0.3);
  ModelFile frozen = freeze_run(tuned);
  EXPECT_EQ(frozen.encoded_weights.count("conv1/weights"), 1u);  // --binarize-all
  EXPECT_EQ(frozen.encoded_weights.count("fc2/weights"), 1u);
  expect_frozen_equals_training_graph(tuned, frozen);

  // ONNX gets the float equivalent (sign * scale weights): the same outputs.
  const ModelFile imported = import_onnx_bytes(export_onnx_bytes(frozen, "bc.onnx"), "bc.onnx");
  const Tensor images = testing::random_tensor({1, 28, 28, 1}, 5, 0.0f, 1.0f);
  Session a(frozen.graph), b(imported.graph);
  const Tensor want = a.run({{Output{frozen.graph.id_of("input"), 0}, images}},
                            {Output{frozen.graph.id_of(frozen.outputs[0]), 0}})[0].clone();
  const Tensor got = b.run({{Output{imported.graph.id_of(imported.inputs[0]), 0}, images}},
                           {Output{imported.graph.id_of(imported.outputs[0]), 0}})[0].clone();
  testing::expect_close(want, got, {.rtol = 1e-3, .atol = 1e-4}, "ONNX round trip");

  // The eightbit rewrite leaves the binarized layers in float, where their binary kernels run.
  EightbitOptions eightbit;
  eightbit.outputs = frozen.outputs;
  const EightbitGraph q = rewrite_eightbit(frozen.graph, eightbit);
  for (const EightbitLayer& layer : q.layers)
    EXPECT_TRUE(layer.op != op_names::kFusedConv2D && layer.op != op_names::kFusedMatMul) << layer.name;
  EXPECT_EQ(testing::count_ops(q.graph, op_names::kFusedMatMul), 2);
  std::filesystem::remove_all(base);
  std::filesystem::remove_all(tuned);
}

// --- kernels ---

Tensor signs(const Tensor& t) {
  Tensor out(DType::f32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.data<float>()[i] = t.data<float>()[i] > 0 ? 1.0f : -1.0f;
  return out;
}


binary::PackedWeights random_packed(int64_t k, int64_t n, bool ternary, uint32_t seed) {
  const Tensor w = testing::random_tensor({k, n}, seed);
  return binary::pack_weights(*quant::signed_levels(ternary ? quant::ternarize_weights(w)
                                                            : quant::binarize_weights(w)),
                              k, n);
}

std::vector<uint64_t> random_rows(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t words = binary::words_for(k);
  std::vector<uint64_t> rows(static_cast<size_t>(m * words));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < words; ++i) {
      const int64_t bits = std::min<int64_t>(64, k - i * 64);
      rows[static_cast<size_t>(r * words + i)] = rng() & (bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1);
    }
  return rows;
}

TEST(XnorGemmTest, PackedPathsEqualTheReferenceExactly) {
  uint32_t seed = 100;
  for (bool ternary : {false, true})
    for (int64_t k : {1, 5, 63, 64, 65, 127, 200, 800, 3136})
      for (int64_t n : {1, 3, 4, 5, 17})
        for (int64_t m : {1, 64})
          for (bool split : {false, true}) {
            const binary::PackedWeights w = random_packed(k, n, ternary, seed++);
            const std::vector<uint64_t> a = random_rows(m, k, seed++);
            std::vector<int32_t> want(static_cast<size_t>(m * n)), got(want.size()), best(want.size());
            binary::xnor_gemm_reference(a.data(), m, w, want.data());
            binary::xnor_gemm_portable(a.data(), m, w, got.data(), split);
            binary::xnor_gemm(a.data(), m, w, best.data(), split);
            SCOPED_TRACE(::testing::Message() << "k " << k << " n " << n << " m " << m << " ternary "
                                              << ternary << " split " << split);
            ASSERT_EQ(got, want) << "portable";
            ASSERT_EQ(best, want) << binary::xnor_gemm_impl();
          }
}

TEST(XnorGemmTest, PackSignsMatchesPortableAndSpotsNonSigns) {
  for (int64_t k : {1, 15, 16, 17, 63, 64, 65, 200})
    for (bool signs_only : {true, false}) {
      Tensor x = signs(testing::random_tensor({3, k}, static_cast<uint32_t>(k)));
      if (!signs_only) x.data<float>()[x.numel() - 1] = 0.0f;  // a ReLU's zero: bit 0, not a sign
      const int64_t words = binary::words_for(k);
      std::vector<uint64_t> want(static_cast<size_t>(3 * words)), got(want.size());
      EXPECT_EQ(binary::pack_signs_portable(x.data<float>(), 3, k, words, want.data()), signs_only);
      EXPECT_EQ(binary::pack_signs(x.data<float>(), 3, k, words, got.data()), signs_only) << k;
      EXPECT_EQ(got, want) << "k " << k;
      for (int64_t i = 0; i < k; ++i)
        ASSERT_EQ((want[static_cast<size_t>(i / 64)] >> (i % 64)) & 1, x.data<float>()[i] > 0 ? 1u : 0u);
    }
}

TEST(XnorGemmTest, BitAppenderPlacesFieldsAtAnyOffset) {
  const std::vector<uint64_t> src = {0xfedcba9876543210ull, 0x0123456789abcdefull};
  auto field = [&](int64_t bits) {  // src's first `bits` bits, the rest of the last word 0
    std::vector<uint64_t> f(src.begin(), src.begin() + binary::words_for(bits));
    if (bits % 64) f.back() &= (uint64_t{1} << (bits % 64)) - 1;
    return f;
  };
  for (int64_t at : {0, 1, 31, 63, 64, 100})
    for (int64_t bits : {1, 32, 64, 100}) {
      std::vector<uint64_t> dst(5, ~uint64_t{0});  // every word is written, none read
      binary::BitAppender out(dst.data());
      out.append_zeros(at);
      out.append_words(field(bits).data(), bits);
      out.append_zeros(320 - at - bits);
      out.finish();
      for (int64_t i = 0; i < 320; ++i) {
        const bool want = i >= at && i < at + bits && ((src[(i - at) / 64] >> ((i - at) % 64)) & 1);
        ASSERT_EQ(((dst[i / 64] >> (i % 64)) & 1) != 0, want) << "at " << at << " bits " << bits << " bit " << i;
      }
    }
}

// A conv or dense layer with binary or ternary frozen weights, on +-1 inputs (the XNOR path) or
// float inputs: "binary" equals "binary_reference" exactly, and both equal the float reference
// kernels (padding counting as 0) within float rounding.
struct LayerCase {
  Shape x;
  Shape w;
  std::string padding;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations = {1, 1};
};

// Whether the packed kernel runs a binary conv on ±1 inputs with this many input channels
// without im2col (bit_conv.h).
bool runs_direct(const LayerCase& c, bool ternary) {
  const CpuFeatures& cpu = cpu_features();
  return c.x.size() == 4 && !ternary && cpu.avx512f && cpu.avx512vl && cpu.avx512_vpopcntdq &&
         binary::direct_conv_fits(c.w[2]);
}

TEST(BinaryLayerKernelTest, PackedEqualsReferenceExactlyAndFloatReferenceClosely) {
  const std::vector<LayerCase> cases = {
      {{1, 7, 7, 3}, {3, 3, 3, 5}, "SAME", {1, 1}},    {{64, 5, 5, 65}, {3, 3, 65, 3}, "SAME", {1, 1}},
      {{1, 14, 14, 32}, {5, 5, 32, 64}, "SAME", {1, 1}}, {{2, 9, 8, 7}, {3, 2, 7, 9}, "VALID", {2, 1}},
      {{1, 6, 6, 1}, {5, 5, 1, 3}, "EXPLICIT", {2, 2}},  {{1, 100}, {100, 7}, "", {}},
      {{64, 129}, {129, 11}, "", {}},                    {{1, 3136}, {3136, 33}, "", {}},
      // The im2col-free path (channels padded to 32 bits wasting at most a quarter): odd
      // channel counts, partial vectors of output channels, more than 4 vectors, batch 64,
      // strides, dilation, every kind of padding.
      {{64, 6, 5, 25}, {3, 3, 25, 17}, "SAME", {1, 1}},  {{1, 9, 8, 100}, {3, 2, 100, 70}, "VALID", {2, 1}},
      {{1, 10, 9, 32}, {3, 3, 32, 5}, "SAME", {1, 1}, {2, 2}},
      {{2, 7, 6, 64}, {5, 5, 64, 33}, "EXPLICIT", {2, 1}},
  };
  uint32_t seed = 300;
  for (const LayerCase& c : cases)
    for (bool ternary : {false, true})
      for (bool xnor : {true, false}) {
        const Tensor raw = testing::random_tensor(c.w, seed++);
        const Tensor w = ternary ? quant::ternarize_weights(raw) : quant::binarize_weights(raw);
        const Tensor bias = testing::random_tensor({c.w.back()}, seed++);
        Tensor x = testing::random_tensor(c.x, seed++);
        if (xnor) x = signs(x);
        auto build = [&](Graph& g, const std::vector<Output>& in) {
          if (c.x.size() == 2)
            return g.add(op_names::kFusedMatMul, {in[0], in[1], in[2]},
                         {{"transpose_a", false}, {"transpose_b", false}, {"activation", std::string("relu")}});
          Attrs a{{"padding", c.padding}, {"strides", c.strides}, {"dilations", c.dilations},
                  {"activation", std::string("relu")}};
          if (c.padding == "EXPLICIT") a.set("pads", std::vector<int64_t>{1, 2, 2, 0});
          return g.add(op_names::kFusedConv2D, {in[0], in[1], in[2]}, a);
        };
        const std::string what = shape_str(c.x) + " x " + shape_str(c.w) + (ternary ? " ternary" : " binary") +
                                 (xnor ? " xnor" : " float");
        SCOPED_TRACE(what);
        const std::vector<Tensor> inputs = {x, w, bias};
        const std::vector<bool> constant = {false, true, true};
        EXPECT_EQ(testing::compare_with_reference(build, inputs, constant, "binary_reference",
                                                  {.rtol = 1e-4, .atol = 1e-4}),
                  "binary_reference");
        // Exactly equal to the oracle: same integer products, same float steps after them.
        Graph g;
        std::vector<Output> in = {ops::placeholder(g, DType::f32, x.shape(), "x"),
                                  ops::constant(g, w, "w"), ops::constant(g, bias, "b")};
        Output y = build(g, in);
        Session packed(g, {.kernel_impl = "binary"}), oracle(g, {.kernel_impl = "binary_reference"});
        packed.set_profiling(true);
        // Enough runs for the layer to time both ways of running (split over the threads and
        // whole) and keep one.
        const Tensor want = oracle.run({{in[0], x}}, {y})[0].clone();
        for (int run = 0; run < 2 * (MeasuredSplit::kTimedRuns + 1) + 1; ++run) {
          const Tensor got = packed.run({{in[0], x}}, {y})[0].clone();
          if (xnor) {
            ASSERT_EQ(testing::values<float>(got), testing::values<float>(want));
          } else {
            testing::expect_close(want, got, {.rtol = 1e-4, .atol = 1e-4}, what);
          }
        }
        if (xnor) {
          std::string impl;
          for (const NodeProfile& p : packed.profile())
            if (p.name == g.node(y.node).name) impl = p.impl;
          EXPECT_EQ(impl.ends_with("xnor_direct_avx512"), runs_direct(c, ternary)) << impl;
        }
      }
}

// --- packed sign bits (execution pass pack_binary_activations) ---

// An XNOR block as `train --binarize xnor` freezes it: float input -> MaxPool -> binarize ->
// binary conv (+ bias, relu) -> MaxPool -> flatten -> binarize -> binary dense, and a second
// XNOR conv reading a binarized conv output directly (no pool: the SignBits path).
struct XnorBlock {
  Shape x;                      // [N, H, W, C]
  ops::PoolOptions pool;
  Shape conv_w;                 // [kh, kw, C, O]
  ops::Conv2DOptions conv;
  int64_t dense_out;
  bool ternary;
};

TEST(PackBinaryActivationsTest, PoolsAndConvsWriteBitsAndTheOutputsStayExactlyEqual) {
  ops::PoolOptions same_2x2;
  same_2x2.padding = "SAME";
  ops::PoolOptions overlapping;  // 3x3 windows, stride 1, padded
  overlapping.ksize = {3, 3};
  overlapping.strides = {1, 1};
  overlapping.padding = "SAME";
  ops::Conv2DOptions same;
  same.padding = "SAME";
  ops::Conv2DOptions strided;
  strided.padding = "EXPLICIT";
  strided.pads = {1, 2, 0, 1};
  strided.strides = {2, 1};
  const std::vector<XnorBlock> blocks = {
      {{1, 28, 28, 32}, {}, {5, 5, 32, 64}, same, 50, false},          // Deep-MNIST's conv2 / fc1
      {{64, 28, 28, 32}, {}, {5, 5, 32, 64}, same, 10, false},         // batch 64
      {{1, 9, 7, 25}, same_2x2, {3, 3, 25, 17}, strided, 9, false},    // odd channels and sizes
      {{64, 6, 5, 7}, overlapping, {3, 2, 7, 33}, same, 5, true},      // im2col path, ternary
      {{3, 8, 8, 64}, same_2x2, {1, 1, 64, 32}, {}, 11, false},        // 1x1, flatten of 32 channels
  };
  uint32_t seed = 900;
  for (const XnorBlock& c : blocks) {
    const std::string what = shape_str(c.x) + " x " + shape_str(c.conv_w) + (c.ternary ? " ternary" : "");
    SCOPED_TRACE(what);
    auto levels = [&](const Shape& shape) {
      const Tensor raw = testing::random_tensor(shape, seed++);
      return c.ternary ? quant::ternarize_weights(raw) : quant::binarize_weights(raw);
    };
    Graph g;
    const Output x = ops::placeholder(g, DType::f32, c.x, "x");
    const Output pooled = ops::max_pool(g, x, c.pool, "pool1");
    const Output conv = g.add(op_names::kFusedConv2D,
                              {ops::binarize_activation(g, pooled, "conv2/binarize_input"),
                               ops::constant(g, levels(c.conv_w), "conv2/w"),
                               ops::constant(g, testing::random_tensor({c.conv_w[3]}, seed++), "conv2/b")},
                              [&] {
                                Attrs a = ops::conv2d_attrs(c.conv);
                                a.set("activation", std::string("relu"));
                                return a;
                              }(),
                              "conv2");
    ops::PoolOptions halve;
    halve.padding = "SAME";
    const Output flat = ops::flatten(g, ops::max_pool(g, conv, halve, "pool2"), 1, "flatten");
    const int64_t k = g.type(flat).shape[1];
    const Output dense = g.add(op_names::kFusedMatMul,
                               {ops::binarize_activation(g, flat, "fc1/binarize_input"),
                                ops::constant(g, levels({k, c.dense_out}), "fc1/w"),
                                ops::constant(g, testing::random_tensor({c.dense_out}, seed++), "fc1/b")},
                               {{"transpose_a", false}, {"transpose_b", false}, {"activation", std::string("relu")}},
                               "fc1");
    ops::Conv2DOptions one_by_one;
    const Output direct = ops::conv2d(g, ops::binarize_activation(g, conv, "conv3/binarize_input"),
                                      ops::constant(g, levels({1, 1, c.conv_w[3], 3}), "conv3/w"),
                                      one_by_one, "conv3");
    std::vector<std::string> names = {g.node(dense.node).name, g.node(direct.node).name};
    const Graph fused = optimize_for_execution(g, names);
    EXPECT_EQ(testing::count_ops(fused, op_names::kBinarizeActivation), 0);
    EXPECT_EQ(testing::count_ops(fused, op_names::kMaxPool), c.conv_w[3] % 32 == 0 ? 0 : 1);
    EXPECT_EQ(testing::count_ops(fused, op_names::kMaxPoolSignBits), c.conv_w[3] % 32 == 0 ? 2 : 1);
    EXPECT_EQ(testing::count_ops(fused, op_names::kSignBits), c.conv_w[3] % 32 == 0 ? 1 : 2);
    EXPECT_EQ(testing::count_ops(fused, op_names::kXnorConv2D), 2);
    EXPECT_EQ(testing::count_ops(fused, op_names::kXnorMatMul), 1);

    Tensor images = testing::random_tensor(c.x, seed++);
    images.data<float>()[0] = 0.0f;  // a zero is -1, as BinarizeActivation reads it
    const std::vector<Output> unfused_outputs = {dense, direct};
    const std::vector<Output> fused_outputs = {{fused.id_of(names[0]), 0}, {fused.id_of(names[1]), 0}};
    Session oracle(g, {.kernel_impl = "binary_reference"});
    Session packed(fused), packed_oracle(fused, {.kernel_impl = "binary_reference"}),
        reference(fused, {.kernel_impl = "reference"});
    const std::vector<Tensor> want = oracle.run({{x, images}}, unfused_outputs);
    const std::vector<Tensor> got = packed.run({{Output{fused.id_of("x"), 0}, images}}, fused_outputs);
    const std::vector<Tensor> got_oracle =
        packed_oracle.run({{Output{fused.id_of("x"), 0}, images}}, fused_outputs);
    const std::vector<Tensor> got_reference =
        reference.run({{Output{fused.id_of("x"), 0}, images}}, fused_outputs);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(testing::values<float>(got[i]), testing::values<float>(want[i])) << names[i];
      ASSERT_EQ(testing::values<float>(got_oracle[i]), testing::values<float>(want[i])) << names[i];
      testing::expect_close(want[i], got_reference[i], {.rtol = 1e-4, .atol = 1e-3}, names[i]);
    }
  }
}

TEST(PackBinaryActivationsTest, LeavesBinarizeActivationsReadByFloatLayersOrGraphOutputs) {
  for (bool binary_weights : {false, true}) {
    Graph g;
    const Output x = ops::placeholder(g, DType::f32, {1, 2, 6, 1}, "x");
    const Output signs = ops::binarize_activation(g, ops::max_pool(g, x), "signs");
    const Tensor w = testing::random_tensor({3, 4}, 3);
    const Output y = ops::matmul(g, ops::reshape(g, signs, {1, 3}),
                                 ops::constant(g, binary_weights ? quant::binarize_weights(w) : w, "w"));
    // Float weights: no XNOR layer; binary ones, but the signs are a graph output too.
    std::vector<std::string> names = {g.node(y.node).name};
    if (binary_weights) names.push_back("signs");
    const Graph fused = optimize_for_execution(g, names);
    EXPECT_EQ(testing::count_ops(fused, op_names::kBinarizeActivation), 1) << binary_weights;
    EXPECT_EQ(testing::count_ops(fused, op_names::kXnorMatMul), 0) << binary_weights;
  }
}

TEST(PackBinaryActivationsTest, XnorConvChecksThatTheBitsHoldTheFilterChannels) {
  Graph g;
  const Output bits = ops::placeholder(g, DType::i32, {1, 4, 4, 2}, "bits");
  const Output w = ops::constant(g, testing::random_tensor({3, 3, 65, 5}, 1), "w");
  const Output b = ops::constant(g, testing::random_tensor({5}, 2), "b");
  testing::expect_error([&] { g.add(op_names::kXnorConv2D, {bits, w, b}, ops::conv2d_attrs({}), "c"); },
                        "node 'c' (XnorConv2D): bits [1,4,4,2] hold 2 elements per row, 65 channels need 3");
}

}  // namespace
}  // namespace sf
