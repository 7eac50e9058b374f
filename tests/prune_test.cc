// Magnitude pruning: masks, the schedule, optimizer state under masks, and a pruned retraining
// run whose masked weights stay exactly zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "models/spec.h"
#include "prune/magnitude.h"
#include "prune/prune_run.h"
#include "prune/sensitivity.h"
#include "prune/structured.h"
#include "runtime/session.h"
#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/testing.h"
#include "train/checkpoint.h"
#include "train/freeze_run.h"
#include "modelfile/model_file.h"
#include "train/optimizer.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

Tensor values(std::vector<float> v) {
  Tensor t(DType::f32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

std::vector<float> elements(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(MagnitudeMask, ZerosExactlyTheSmallestMagnitudes) {
  const Tensor w = values({0.5f, -0.1f, 0.3f, -0.9f, 0.05f, 0.2f});
  EXPECT_EQ(elements(magnitude_mask(w, 0.5)), (std::vector<float>{1, 0, 1, 1, 0, 0}));
  EXPECT_EQ(elements(magnitude_mask(w, 0.0)), (std::vector<float>(6, 1.0f)));
  EXPECT_EQ(elements(magnitude_mask(w, 1.0)), (std::vector<float>(6, 0.0f)));
  // Ties are broken by position, so the count is exact.
  const Tensor ties = values({0.1f, -0.1f, 0.1f, 0.1f});
  EXPECT_EQ(elements(magnitude_mask(ties, 0.5)), (std::vector<float>{0, 0, 1, 1}));
}

TEST(MagnitudeMask, RandomTensorsGetTheRequestedSparsity) {
  const Tensor w = testing::random_tensor({37, 53}, 5);
  for (double s : {0.1, 0.5, 0.9, 0.97}) {
    Tensor pruned = w.clone();
    apply_mask(pruned, magnitude_mask(w, s));
    EXPECT_NEAR(sparsity_of(pruned), s, 1.0 / static_cast<double>(w.numel()));
  }
}

TEST(MagnitudeMask, GlobalThresholdPrunesSmallWeightLayersMost) {
  Tensor big = values({1.0f, 2.0f, -3.0f, 4.0f});
  Tensor small = values({0.01f, -0.02f, 0.03f, 0.04f, 5.0f, 0.05f});
  const auto s = global_sparsities({{"big", &big}, {"small", &small}}, 0.5);
  EXPECT_DOUBLE_EQ(s.at("small"), 5.0 / 6.0);
  EXPECT_DOUBLE_EQ(s.at("big"), 0.0);
}

TEST(MagnitudeMask, CubicScheduleRisesFastThenFlattens) {
  EXPECT_DOUBLE_EQ(cubic_sparsity(0, 100, 0.9), 0.0);
  EXPECT_DOUBLE_EQ(cubic_sparsity(100, 100, 0.9), 0.9);
  EXPECT_DOUBLE_EQ(cubic_sparsity(500, 100, 0.9), 0.9);
  EXPECT_NEAR(cubic_sparsity(50, 100, 0.9), 0.9 * (1 - 0.125), 1e-12);
  double previous = 0.0;
  for (int64_t t = 1; t <= 100; ++t) {
    EXPECT_GE(cubic_sparsity(t, 100, 0.9), previous);
    previous = cubic_sparsity(t, 100, 0.9);
  }
}

Tensor matrix(int64_t rows, std::vector<float> v) {
  Tensor t(DType::f32, {rows, static_cast<int64_t>(v.size()) / rows});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

TEST(MagnitudeMask, BlocksOfAdjacentOutputsByNormPerWeight) {
  // Rows of 10 in blocks of 4: columns [0, 4), [4, 8) and the shorter [8, 10).
  // L1 / size:  0.1, 1, 0.3 | 0.1, 0.15, 1.025   L2 / sqrt(size): 0.1, 1, 0.3 | 0.2, 0.15, 1.41
  const Tensor w = matrix(2, {0.1f, -0.1f, 0.1f, 0.1f, 1, 1, -1, 1, 0.3f, 0.3f,  //
                              0.4f, 0, 0, 0, 0.15f, 0.15f, -0.15f, 0.15f, 0.05f, 2});
  EXPECT_EQ(elements(magnitude_mask(w, 2.0 / 6.0, 4, "l1")),
            (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 1, 1,  //
                                0, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(elements(magnitude_mask(w, 2.0 / 6.0, 4, "l2")),
            (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 1, 1,  //
                                1, 1, 1, 1, 0, 0, 0, 0, 1, 1}));
  // The shorter block is compared per weight, not by its smaller sum: it goes fourth.
  EXPECT_EQ(elements(magnitude_mask(w, 4.0 / 6.0, 4, "l1")),
            (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 0, 0,  //
                                0, 0, 0, 0, 0, 0, 0, 0, 1, 1}));
  // Block 1 is magnitude pruning of single weights with either norm.
  const Tensor r = testing::random_tensor({37, 53}, 5);
  EXPECT_EQ(elements(magnitude_mask(r, 0.7, 1, "l2")), elements(magnitude_mask(r, 0.7)));
  EXPECT_THROW(magnitude_mask(w, 0.5, 3), Error);
  EXPECT_THROW(magnitude_mask(w, 0.5, 4, "l3"), Error);
}

TEST(MagnitudeMask, BlockMasksOfRandomTensorsHaveTheRequestedBlockSparsity) {
  const Tensor w = testing::random_tensor({5, 5, 6, 32}, 7);  // HWIO: blocks along the outputs
  for (int64_t block : {4, 8, 16})
    for (double s : {0.5, 0.9}) {
      Tensor pruned = w.clone();
      apply_mask(pruned, magnitude_mask(w, s, block));
      EXPECT_NEAR(sparsity_of(pruned), s, static_cast<double>(block) / w.numel());
      // Each block is all zero or all kept.
      for (int64_t b = 0; b < w.numel(); b += block) {
        const float* v = pruned.data<float>() + b;
        const bool zero = v[0] == 0.0f;
        for (int64_t i = 1; i < block; ++i) ASSERT_EQ(v[i] == 0.0f, zero) << block << " " << b;
      }
    }
}

TEST(MagnitudeMask, GlobalThresholdOverBlocks) {
  // Blocks of 4 with per-weight magnitudes big: 1, 2; small: 0.01, 0.02, 0.03, 0.04. Half of the
  // 24 weights is the three smallest blocks, all in `small`.
  Tensor big = matrix(1, {1, 1, 1, 1, 2, -2, 2, 2});
  Tensor small = matrix(2, {0.01f, 0.01f, 0.01f, 0.01f, 0.02f, 0.02f, 0.02f, 0.02f,  //
                            0.03f, 0.03f, 0.03f, 0.03f, 0.04f, 0.04f, 0.04f, 0.04f});
  const auto s = global_sparsities({{"big", &big}, {"small", &small}}, 0.5, 4);
  EXPECT_DOUBLE_EQ(s.at("small"), 0.75);
  EXPECT_DOUBLE_EQ(s.at("big"), 0.0);
  EXPECT_TRUE(is_prune_block(16));
  EXPECT_FALSE(is_prune_block(2));
}

TEST(MagnitudeMask, OptimizerStateIsMaskedForThatVariableOnly) {
  Optimizer opt(OptimizerConfig{.kind = "adam"});
  Tensor w = values({1, 1, 1}), other = values({1, 1, 1}), nested = values({1, 1, 1});
  const Tensor grad = values({0.5f, 0.5f, 0.5f});
  opt.begin_step();
  opt.apply("fc1/weights", w, grad, 0.1, true);
  opt.apply("xfc1/weights", other, grad, 0.1, true);
  opt.apply("a/fc1/weights", nested, grad, 0.1, true);
  opt.mask_state("fc1/weights", values({1, 0, 1}));
  for (const auto& [key, slot] : opt.state()) {
    if (slot.numel() != 3) continue;
    const bool masked = key.ends_with("/fc1/weights") && !key.ends_with("a/fc1/weights");
    EXPECT_EQ(slot.data<float>()[1] == 0.0f, masked) << key;
  }
}

// The weights layers read as their ops declare them, in model order; biases and batch-norm
// parameters stay dense; under QAT the weights are found through FakeQuantWeights.
TEST(PrunableWeights, AreTheConvAndDenseWeights) {
  const ModelSpec spec = parse_model_spec(R"(
name: prunable
input: [8, 8, 1]
classes: 3
layers:
  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: same}
  - {name: bn1, type: batch_norm}
  - {name: dw, type: depthwise_conv2d, kernel: 3, padding: same}
  - {name: flatten, type: flatten}
  - {name: fc1, type: dense, units: 3}
)", "prunable.yaml");
  const std::vector<std::string> expected = {"conv1/weights", "dw/weights", "fc1/weights"};
  EXPECT_EQ(prunable_weights(build_model(spec, 1)), expected);
  EXPECT_EQ(prunable_weights(build_model(with_qat(spec, 4), 1)), expected);
}

TEST(ParseLayerSparsities, NamesTheBadEntry) {
  EXPECT_EQ(parse_layer_sparsities("fc1=0.97,conv2=0.8").at("conv2"), 0.8);
  for (const char* bad : {"fc1", "fc1=", "=0.5", "fc1=1.0", "fc1=-0.1", "fc1=0.5x"})
    EXPECT_THROW(parse_layer_sparsities(bad), Error) << bad;
  EXPECT_THROW(parse_levels("0.5,1.2"), Error);
  EXPECT_EQ(parse_levels("0.5,0.9").size(), 2u);
}

class PruneRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::mnist_available()) return;
    dense_dir_ = testing::make_temp_dir("sf-prune-dense");
    TrainOptions o;
    o.model_path = testing::source_path("tests/data/tiny-cnn.yaml");
    o.out_dir = dense_dir_;
    o.epochs = 1;
    o.train_limit = 1280;
    o.test_limit = 200;
    o.threads = 1;
    o.seed = 3;
    train(o, {});
  }
  static void TearDownTestSuite() {
    if (!dense_dir_.empty()) std::filesystem::remove_all(dense_dir_);
  }
  PruneOptions options(const std::string& out) const {
    PruneOptions o;
    o.run_dir = dense_dir_;
    o.out_dir = out;
    o.epochs = 2;
    o.train_limit = 640;
    o.test_limit = 200;
    o.threads = 1;
    return o;
  }
  static std::string dense_dir_;
};
std::string PruneRunTest::dense_dir_;

TEST_F(PruneRunTest, MasksHoldWeightsAndOptimizerStateAtZero) {
  REQUIRE_MNIST();
  for (const char* schedule : {"gradual", "oneshot"}) {
    SCOPED_TRACE(schedule);
    const std::string out = testing::make_temp_dir("sf-prune");
    PruneOptions o = options(out);
    o.schedule = schedule;
    o.per_layer = {{"fc1", 0.9}, {"conv2", 0.5}};
    const PruneResult r = prune_run(o, {});
    ASSERT_EQ(r.history.size(), 2u);
    EXPECT_GT(r.history.back().test_accuracy, 0.5);
    const Checkpoint ckpt = load_checkpoint(checkpoint_path(out));
    const Tensor& fc1 = ckpt.tensors.at("variables/fc1/weights");
    EXPECT_NEAR(sparsity_of(fc1), 0.9, 1.0 / static_cast<double>(fc1.numel()));
    EXPECT_NEAR(sparsity_of(ckpt.tensors.at("variables/conv2/weights")), 0.5, 1e-3);
    EXPECT_EQ(sparsity_of(ckpt.tensors.at("variables/conv1/weights")), 0.0);
    // Adam's moments are zero wherever the weight is.
    for (const char* slot : {"optimizer/adam/m/fc1/weights", "optimizer/adam/v/fc1/weights"}) {
      const Tensor& s = ckpt.tensors.at(slot);
      for (int64_t i = 0; i < fc1.numel(); ++i)
        if (fc1.data<float>()[i] == 0.0f) {
          ASSERT_EQ(s.data<float>()[i], 0.0f) << slot << " " << i;
        }
    }
    int64_t fc1_nonzero = 0;
    for (const LayerSparsity& l : r.layers)
      if (l.layer == "fc1") fc1_nonzero = l.nonzero;
    EXPECT_EQ(fc1_nonzero, fc1.numel() - std::llround(0.9 * static_cast<double>(fc1.numel())));
    // The pruned run is an ordinary run: it evaluates to what training reported.
    EXPECT_DOUBLE_EQ(evaluate_run(out, "mnist", 200, 1).accuracy, r.history.back().test_accuracy);
    // Frozen, the 90%-sparse fc1 is stored sparse (smaller file) and loads to the same values.
    ModelFile frozen = freeze_run(out);
    EXPECT_FALSE(frozen.encoded_weights.empty());
    save_model(out + "/sparse.sfm", frozen);
    frozen.encoded_weights.clear();
    save_model(out + "/dense.sfm", frozen);
    EXPECT_LT(std::filesystem::file_size(out + "/sparse.sfm"),
              std::filesystem::file_size(out + "/dense.sfm") / 2);
    const ModelFile sparse = load_model(out + "/sparse.sfm"), dense = load_model(out + "/dense.sfm");
    for (const Node& n : dense.graph.nodes()) {
      if (n.op != "Const") continue;
      const Tensor& a = n.attrs.get_tensor("value");
      const Tensor& b = sparse.graph.node(sparse.graph.id_of(n.name)).attrs.get_tensor("value");
      ASSERT_EQ(a.numel(), b.numel());
      if (a.dtype() != DType::f32) continue;
      for (int64_t i = 0; i < a.numel(); ++i)
        ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << n.name << " " << i;
    }
    std::filesystem::remove_all(out);
  }
}

// Whole blocks of `block` adjacent outputs are zero, the rest of the weights not, and Adam's
// moments are zero wherever the weight is.
void expect_exact_blocks(const Checkpoint& ckpt, const std::string& name, int64_t block) {
  SCOPED_TRACE(name);
  const Tensor& w = ckpt.tensors.at("variables/" + name);
  const int64_t row = w.shape().back();
  for (int64_t start = 0; start < w.numel(); start += row)
    for (int64_t b = start; b < start + row; b += block) {
      const float* v = w.data<float>() + b;
      const int64_t size = std::min(block, start + row - b);
      const bool zero = v[0] == 0.0f;
      for (int64_t i = 1; i < size; ++i) ASSERT_EQ(v[i] == 0.0f, zero) << "block at " << b;
    }
  for (const std::string slot : {"optimizer/adam/m/", "optimizer/adam/v/"}) {
    const Tensor& s = ckpt.tensors.at(slot + name);
    for (int64_t i = 0; i < w.numel(); ++i)
      if (w.data<float>()[i] == 0.0f) {
        ASSERT_EQ(s.data<float>()[i], 0.0f) << slot << " " << i;
      }
  }
}

TEST_F(PruneRunTest, BlockMasksStayExactThroughRetraining) {
  REQUIRE_MNIST();
  {
    SCOPED_TRACE("per-layer, gradual, blocks of 8");
    const std::string out = testing::make_temp_dir("sf-prune-block8");
    PruneOptions o = options(out);
    o.block = 8;
    o.per_layer = {{"fc1", 0.9}, {"conv2", 0.5}};
    const PruneResult r = prune_run(o, {});
    EXPECT_GT(r.history.back().test_accuracy, 0.5);
    const Checkpoint ckpt = load_checkpoint(checkpoint_path(out));
    const Tensor& fc1 = ckpt.tensors.at("variables/fc1/weights");  // [784, 64]: 8 blocks a row
    const int64_t blocks = fc1.dim(0) * 8;
    EXPECT_EQ(sparsity_of(fc1), std::llround(0.9 * static_cast<double>(blocks)) * 8.0 /
                                    static_cast<double>(fc1.numel()));
    expect_exact_blocks(ckpt, "fc1/weights", 8);
    // Conv filters are pruned by single weights: there is no block-sparse conv kernel.
    const Tensor& conv2 = ckpt.tensors.at("variables/conv2/weights");
    EXPECT_EQ(sparsity_of(conv2), std::llround(0.5 * static_cast<double>(conv2.numel())) /
                                      static_cast<double>(conv2.numel()));
    expect_exact_blocks(ckpt, "conv2/weights", 1);
    EXPECT_EQ(sparsity_of(ckpt.tensors.at("variables/conv1/weights")), 0.0);
    std::filesystem::remove_all(out);
  }
  {
    SCOPED_TRACE("model-wide, oneshot, blocks of 16 (fc2's 10 outputs: one shorter block)");
    const std::string out = testing::make_temp_dir("sf-prune-block16");
    PruneOptions o = options(out);
    o.block = 16;
    o.norm = "l2";
    o.schedule = "oneshot";
    o.epochs = 1;
    o.target = 0.8;
    const PruneResult r = prune_run(o, {});
    EXPECT_NEAR(
        1.0 - static_cast<double>(r.nonzero_weights()) / static_cast<double>(r.total_weights()),
        0.8, 0.01);
    const Checkpoint ckpt = load_checkpoint(checkpoint_path(out));
    for (const char* w : {"fc1/weights", "fc2/weights"}) expect_exact_blocks(ckpt, w, 16);
    for (const char* w : {"conv1/weights", "conv2/weights"}) expect_exact_blocks(ckpt, w, 1);
    std::filesystem::remove_all(out);
  }
}

TEST(PruneOptionsTest, BadBlockValuesGiveOneLineErrors) {
  PruneOptions o;
  o.run_dir = "/nonexistent";
  o.out_dir = "/nonexistent-out";
  o.target = 0.5;
  for (int64_t block : {0, -4, 2, 3, 32}) {
    o.block = block;
    try {
      prune_run(o, {});
      FAIL() << "no error for block " << block;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message, "prune: --block must be 1, 4, 8 or 16 (output channels per block), got " +
                             std::to_string(block));
    }
  }
  o.block = 8;
  o.structured = true;
  EXPECT_THROW(prune_run(o, {}), Error);
  o.structured = false;
  o.target.reset();
  o.from_sensitivity = true;
  EXPECT_THROW(prune_run(o, {}), Error);
  o.from_sensitivity = false;
  o.target = 0.5;
  o.norm = "l3";
  EXPECT_THROW(prune_run(o, {}), Error);
}

TEST_F(PruneRunTest, ModelWideTargetAndSensitivity) {
  REQUIRE_MNIST();
  const std::string out = testing::make_temp_dir("sf-prune-target");
  PruneOptions o = options(out);
  o.epochs = 1;
  o.target = 0.8;
  const PruneResult r = prune_run(o, {});
  EXPECT_NEAR(1.0 - static_cast<double>(r.nonzero_weights()) / static_cast<double>(r.total_weights()),
              0.8, 0.01);
  std::filesystem::remove_all(out);

  RunEvaluator run(dense_dir_, "mnist", 200, 1);
  const Tensor before = run.variables().get("fc1/weights").clone();
  const SensitivityTable table = analyse_sensitivity(run, {0.5, 0.99});
  ASSERT_EQ(table.rows.size(), 4u);  // conv1, conv2, fc1, fc2
  EXPECT_EQ(elements(run.variables().get("fc1/weights")), elements(before));  // restored
  for (const SensitivityRow& row : table.rows) EXPECT_EQ(row.accuracy.size(), 2u);
  const auto within = sparsity_within(table, 100.0);  // any drop allowed
  EXPECT_EQ(within.at("fc1"), 0.99);
}

// Logits of `spec` with `variables` on `x` (inference: dropout off).
Tensor logits_of(const ModelSpec& spec, const std::map<std::string, Tensor>& variables,
                 const Tensor& x) {
  Model m = build_model(spec, x.dim(0));
  auto store = std::make_shared<VariableStore>();
  for (const auto& [name, t] : variables) store->set(name, t.clone());
  Session session(m.graph, SessionOptions{.threads = 1}, store);
  return session.run({{m.input, x}}, {m.logits})[0];
}

TEST_F(PruneRunTest, StructuredModelEqualsTheMaskedDenseModel) {
  REQUIRE_MNIST();
  const Checkpoint ckpt = load_checkpoint(checkpoint_path(dense_dir_));
  const ModelSpec spec = parse_model_spec(
      nlohmann::json::parse(ckpt.metadata_json).at("model_spec").get<std::string>(), "tiny");
  std::map<std::string, Tensor> dense;
  for (const auto& [name, t] : ckpt.tensors)
    if (name.rfind("variables/", 0) == 0) dense[name.substr(10)] = t.clone();

  const StructuredPruning pruned = prune_structured(spec, dense, 0.5, "l2");
  ASSERT_EQ(pruned.layers.size(), 3u);  // conv1, conv2, fc1; fc2 (the classifier) keeps all
  EXPECT_EQ(pruned.layers[0].kept.size(), 4u);
  EXPECT_EQ(pruned.variables.at("conv2/weights").shape(), (Shape{3, 3, 4, 8}));
  EXPECT_EQ(pruned.variables.at("fc1/weights").shape(), (Shape{7 * 7 * 8, 32}));
  EXPECT_EQ(pruned.variables.at("fc2/weights").shape(), (Shape{32, 10}));
  const ModelSpec smaller = parse_model_spec(pruned.spec_text, "pruned");

  // The masked dense model: every connection out of a removed channel is zeroed where the next
  // layer reads it.
  std::map<std::string, Tensor> masked = dense;
  auto zero_inputs = [&](const std::string& weights, const std::vector<int64_t>& kept,
                         int64_t channels, int64_t positions, bool conv) {
    Tensor& w = masked.at(weights);
    const int64_t outs = w.shape().back();
    float* v = w.data<float>();
    for (int64_t c = 0; c < channels; ++c) {
      if (std::find(kept.begin(), kept.end(), c) != kept.end()) continue;
      if (conv) {  // HWIO: input channel c of every tap
        const int64_t taps = w.dim(0) * w.dim(1), ins = w.dim(2);
        for (int64_t t = 0; t < taps; ++t) std::fill_n(v + (t * ins + c) * outs, outs, 0.0f);
      } else {  // rows p * channels + c
        for (int64_t p = 0; p < positions; ++p) std::fill_n(v + (p * channels + c) * outs, outs, 0.0f);
      }
    }
  };
  zero_inputs("conv2/weights", pruned.layers[0].kept, 8, 1, true);
  zero_inputs("fc1/weights", pruned.layers[1].kept, 16, 49, false);
  zero_inputs("fc2/weights", pruned.layers[2].kept, 64, 1, false);

  const Tensor x = testing::random_tensor({3, 28, 28, 1}, 9);
  const Tensor want = logits_of(spec, masked, x);
  const Tensor got = logits_of(smaller, pruned.variables, x);
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i)
    EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-4f) << i;

  EXPECT_THROW(prune_structured(spec, dense, 1.0, "l1"), Error);
  EXPECT_THROW(prune_structured(spec, dense, 0.5, "l3"), Error);
}

TEST_F(PruneRunTest, StructuredRunRetrainsTheSmallerModel) {
  REQUIRE_MNIST();
  const std::string out = testing::make_temp_dir("sf-prune-structured");
  PruneOptions o = options(out);
  o.epochs = 1;
  o.structured = true;
  o.target = 0.5;
  const PruneResult r = prune_run(o, {});
  ASSERT_EQ(r.history.size(), 1u);
  EXPECT_GT(r.history.back().test_accuracy, 0.3);
  EXPECT_LT(r.nonzero_weights(), r.total_weights() / 2);
  EXPECT_DOUBLE_EQ(evaluate_run(out, "mnist", 200, 1).accuracy, r.history.back().test_accuracy);
  std::filesystem::remove_all(out);
}

TEST_F(PruneRunTest, BadArgumentsGiveOneLineErrors) {
  REQUIRE_MNIST();
  PruneOptions o = options(testing::make_temp_dir("sf-prune-bad"));
  o.per_layer = {{"fc9", 0.5}};
  try {
    prune_run(o, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown layer 'fc9' (prunable: conv1, conv2, fc1, fc2)"),
              std::string::npos)
        << e.what();
  }
  o.per_layer.clear();
  o.target = 1.0;
  EXPECT_THROW(prune_run(o, {}), Error);
  o.target.reset();
  EXPECT_THROW(prune_run(o, {}), Error);  // no way to choose sparsities
  o.target = 0.5;
  o.run_dir = "/nonexistent";
  EXPECT_THROW(prune_run(o, {}), Error);
}

}  // namespace
}  // namespace sf
