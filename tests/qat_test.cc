// Quantization-aware training: the fake-quantization ops, the `qat` spec key, training with
// --qat, freezing, and the eightbit rewrite taking the learned ranges.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "autodiff/gradients.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "ops/fake_quant_ops.h"
#include "ops/ops.h"
#include "quantize/eightbit_rewrite.h"
#include "quantize/learned_ranges.h"
#include "codec/quant_params.h"
#include "codec/weight_codec.h"
#include "runtime/session.h"
#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/testing.h"
#include "train/freeze_run.h"
#include "train/trainer.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

TEST(FakeQuantizeLinearTest, EqualsEncodeThenDecodeOnRandomShapes) {
  const std::vector<Shape> shapes = {{7}, {3, 5}, {5, 5, 1, 8}, {3, 3, 4, 13}, {64, 10}};
  uint32_t seed = 1;
  for (const Shape& shape : shapes)
    for (int bits : {2, 3, 4, 5, 8})
      for (int axis : {quant::kNoAxis, static_cast<int>(shape.size()) - 1}) {
        const Tensor w = testing::random_tensor(shape, seed++, -2.0f, 0.5f);
        const Tensor want = quant::decode(quant::encode_linear(w, bits, axis));
        const Tensor got = quant::fake_quantize_linear(w, bits, axis);
        for (int64_t i = 0; i < w.numel(); ++i)
          ASSERT_EQ(got.data<float>()[i], want.data<float>()[i])
              << shape_str(shape) << " bits " << bits << " axis " << axis << " element " << i;
      }
}

// y = op(x); loss = sum(y * r): the gradient reaching x is what the op passes back for r.
struct GradRun {
  Tensor y, dx;
};

GradRun run_with_gradient(const std::function<Output(Graph&, Output)>& build, const Tensor& x,
                          uint32_t seed, Tensor* r_out = nullptr) {
  Graph g;
  Output xp = ops::placeholder(g, DType::f32, x.shape(), "x");
  Output y = build(g, xp);
  Tensor r = testing::random_tensor(x.shape(), seed);
  Output rp = ops::constant(g, r, "r");
  Output loss = ops::reduce_sum(g, ops::mul(g, y, rp), {}, false, "loss");
  Output dx = gradients(g, loss, {xp})[0];
  Session session(g);
  std::vector<Tensor> out = session.run({{xp, x}}, {y, dx});
  if (r_out) *r_out = r;
  return {out[0].clone(), out[1].clone()};
}

TEST(FakeQuantWeightsTest, RoundsPerOutputChannelAndPassesGradientsStraightThrough) {
  for (int bits : {2, 4, 8}) {
    const Tensor w = testing::random_tensor({3, 3, 4, 6}, 10 + static_cast<uint32_t>(bits));
    Tensor r;
    GradRun run = run_with_gradient(
        [bits](Graph& g, Output x) { return ops::fake_quant_weights(g, x, bits); }, w, 7, &r);
    const Tensor want = quant::fake_quantize_linear(w, bits, 3);
    for (int64_t i = 0; i < w.numel(); ++i) {
      ASSERT_EQ(run.y.data<float>()[i], want.data<float>()[i]) << "bits " << bits;
      ASSERT_EQ(run.dx.data<float>()[i], r.data<float>()[i]) << "bits " << bits;
    }
    // Each output channel holds at most 2^bits distinct values.
    for (int64_t c = 0; c < 6; ++c) {
      std::set<float> values;
      for (int64_t i = c; i < w.numel(); i += 6) values.insert(run.y.data<float>()[i]);
      EXPECT_LE(values.size(), size_t{1} << bits);
    }
  }
}

TEST(FakeQuantActivationTest, RoundsToTheLearnedU8GridAndStopsGradientsWhereItSaturates) {
  const Tensor x = testing::random_tensor({4, 5, 6}, 3, -3.0f, 5.0f);
  Tensor range(DType::f32, {2});
  range.data<float>()[0] = -1.0f;
  range.data<float>()[1] = 2.0f;
  Tensor r;
  GradRun run = run_with_gradient(
      [&](Graph& g, Output in) {
        return ops::fake_quant_activation(g, in, ops::constant(g, range, "range"));
      },
      x, 5, &r);
  const QuantParams p = choose_quant_params(-1.0f, 2.0f);
  const float lo = dequantize_value(0, p), hi = dequantize_value(255, p);
  int saturated = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float xi = x.data<float>()[i];
    // Within one step of the eightbit Quantize (they differ only at rounding ties).
    ASSERT_NEAR(run.y.data<float>()[i], dequantize_value(quantize_value(xi, p), p), p.scale * 1.001f);
    const bool inside = xi >= lo && xi <= hi;
    saturated += !inside;
    ASSERT_EQ(run.dx.data<float>()[i], inside ? r.data<float>()[i] : 0.0f) << "x = " << xi;
  }
  EXPECT_GT(saturated, 0);  // the test data reaches past the range on both sides
}

TEST(FakeQuantActivationTest, UsesTheBatchRangeUntilARangeIsLearnedAndReportsIt) {
  const Tensor x = testing::random_tensor({2, 50}, 8, -0.5f, 3.0f);
  Graph g;
  Output xp = ops::placeholder(g, DType::f32, x.shape(), "x");
  Tensor unset(DType::f32, {2});
  unset.data<float>()[0] = unset.data<float>()[1] = std::nanf("");
  Output y = ops::fake_quant_activation(g, xp, ops::constant(g, unset, "range"));
  Session session(g);
  std::vector<Tensor> out = session.run({{xp, x}}, {y, Output{y.node, 1}});
  const float* v = x.data<float>();
  const float lo = *std::min_element(v, v + x.numel()), hi = *std::max_element(v, v + x.numel());
  EXPECT_EQ(out[1].data<float>()[0], lo);
  EXPECT_EQ(out[1].data<float>()[1], hi);
  const QuantParams p = choose_quant_params(lo, hi);
  for (int64_t i = 0; i < x.numel(); ++i)
    ASSERT_NEAR(out[0].data<float>()[i], dequantize_value(quantize_value(v[i], p), p),
                p.scale * 1.001f);
}

const char* kTinySpec = R"(name: t
input: [6, 6, 1]
classes: 3
layers:
  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: same, activation: relu}
  - {name: flatten, type: flatten}
  - {name: fc, type: dense, units: 3}
)";

TEST(QatSpecTest, QatKeyFakeQuantizesWeightsAndTheTensorsEightbitHoldsInU8) {
  ModelSpec spec = with_qat(parse_model_spec(kTinySpec, "t.yaml"), 4);
  EXPECT_EQ(spec.qat_bits, 4);
  Model m = build_model(spec, 2);
  std::set<std::string> fake_quant;
  for (const Node& n : m.graph.nodes())
    if (n.op == "FakeQuantWeights" || n.op == "FakeQuantActivation") fake_quant.insert(n.name);
  EXPECT_EQ(fake_quant, (std::set<std::string>{"input/fake_quant", "conv1/weights_fake_quant",
                                               "conv1/fake_quant", "fc/weights_fake_quant",
                                               "fc/fake_quant"}));
  EXPECT_EQ(m.moving_averages.size(), 3u);
  // Stored in the spec text, so checkpoints, freeze and resume rebuild the same graph.
  EXPECT_EQ(parse_model_spec(spec.text, "t.yaml").qat_bits, 4);
  EXPECT_EQ(with_qat(spec, 4).text, spec.text);
  EXPECT_THROW(with_qat(spec, 8), Error);
}

TEST(QatSpecTest, RejectsBadQatKeys) {
  for (const char* bad : {"qat: 4\n", "qat: {bits: 1}\n", "qat: {bits: 9}\n",
                          "qat: {bits: four}\n", "qat: {bits: 4, scheme: kmeans}\n"}) {
    try {
      parse_model_spec(std::string(kTinySpec) + bad, "t.yaml");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("t.yaml"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("qat"), std::string::npos) << e.what();
    }
  }
}

TEST(QatTrainTest, TrainsFreezesOnTheBitGridAndQuantizesWithLearnedRanges) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("qat");
  TrainOptions o;
  o.model_path = testing::source_path("tests/data/tiny-cnn.yaml");
  o.data = "mnist";
  o.out_dir = dir;
  o.epochs = 1;
  o.train_limit = 640;
  o.test_limit = 200;
  o.threads = 1;
  o.seed = 3;
  o.qat_bits = 4;
  std::vector<EpochReport> reports = train(o, {});
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_GT(reports[0].test_accuracy, 0.5);

  ModelFile frozen = freeze_run(dir);
  // Weights hold at most 16 distinct values per output channel; activation ranges are learned.
  int weights = 0, ranges = 0;
  for (const Node& n : frozen.graph.nodes()) {
    EXPECT_NE(n.op, "FakeQuantWeights") << n.name;
    if (n.op == "Const" && n.name.ends_with("/weights")) {
      const Tensor& w = n.attrs.get_tensor("value");
      const int64_t channels = w.dim(-1);
      for (int64_t c = 0; c < channels; ++c) {
        std::set<float> values;
        for (int64_t i = c; i < w.numel(); i += channels) values.insert(w.data<float>()[i]);
        EXPECT_LE(values.size(), 16u) << n.name << " channel " << c;
      }
      ++weights;
    }
    if (n.op == "FakeQuantActivation") {
      const Tensor& r = frozen.graph.node(n.inputs[1].node).attrs.get_tensor("value");
      EXPECT_TRUE(std::isfinite(r.data<float>()[0]) && r.data<float>()[1] > r.data<float>()[0])
          << n.name;
      ++ranges;
    }
  }
  EXPECT_EQ(weights, 4);
  EXPECT_EQ(ranges, 5);  // the input and conv1, conv2, fc1, fc2

  // No calibration data: every range the rewrite needs was learned, none is measured at run time.
  EightbitOptions options;
  options.outputs = frozen.outputs;
  EXPECT_TRUE(eightbit_range_tensors(frozen.graph, options).empty());
  const EightbitGraph q = rewrite_eightbit(frozen.graph, options);
  for (const Node& n : q.graph.nodes()) {
    EXPECT_NE(n.op, "RequantizationRange") << n.name;
    EXPECT_NE(n.op, "ChooseQParams") << n.name;
    EXPECT_NE(n.op, "FakeQuantActivation") << n.name;
  }
  // The integer model agrees with the fake-quantized float model it was trained as.
  Session float_session(frozen.graph), int_session(q.graph);
  Tensor images = testing::random_tensor({1, 28, 28, 1}, 4, 0.0f, 1.0f);
  const Output fin{frozen.graph.id_of("input"), 0}, qin{q.graph.id_of("input"), 0};
  const Tensor want = float_session.run({{fin, images}}, {Output{frozen.graph.id_of(frozen.outputs[0]), 0}})[0].clone();
  const Tensor got = int_session.run({{qin, images}}, {Output{q.graph.id_of(q.outputs[0]), 0}})[0].clone();
  for (int64_t i = 0; i < want.numel(); ++i)
    EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 0.05) << "class " << i;

  // Exported to ONNX, the learned ranges become QuantizeLinear -> DequantizeLinear pairs.
  const std::string onnx = export_onnx_bytes(frozen, "qat.onnx");
  ModelFile imported = import_onnx_bytes(onnx, "qat.onnx");
  int quantize_linear = 0;
  for (const Node& n : imported.graph.nodes()) quantize_linear += n.op == "QuantizeLinear";
  EXPECT_EQ(quantize_linear, 5);
  Session onnx_session(imported.graph);
  const Tensor round_trip =
      onnx_session.run({{Output{imported.graph.id_of(imported.inputs[0]), 0}, images}},
                       {Output{imported.graph.id_of(imported.outputs[0]), 0}})[0].clone();
  for (int64_t i = 0; i < want.numel(); ++i)
    EXPECT_NEAR(round_trip.data<float>()[i], want.data<float>()[i], 0.02) << "class " << i;
  std::filesystem::remove_all(dir);
}

TEST(QatTrainTest, FineTunesAFloatRunWithQat) {
  REQUIRE_MNIST();
  const std::string base = testing::make_temp_dir("qat-base"), tuned = testing::make_temp_dir("qat-tuned");
  TrainOptions o;
  o.model_path = testing::source_path("tests/data/tiny-cnn.yaml");
  o.out_dir = base;
  o.epochs = 1;
  o.train_limit = 320;
  o.test_limit = 100;
  o.threads = 1;
  train(o, {});
  TrainOptions f;
  f.init_from = base;
  f.out_dir = tuned;
  f.epochs = 1;
  f.train_limit = 320;
  f.test_limit = 100;
  f.threads = 1;
  f.qat_bits = 3;
  train(f, {});
  EXPECT_TRUE(has_fake_quant(freeze_run(tuned).graph));
  TrainOptions resume;
  resume.resume_dir = tuned;
  resume.epochs = 1;
  resume.qat_bits = 5;
  EXPECT_THROW(train(resume, {}), Error);
  std::filesystem::remove_all(base);
  std::filesystem::remove_all(tuned);
}

}  // namespace
}  // namespace sf
