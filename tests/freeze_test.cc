#include <gtest/gtest.h>

#include <filesystem>

#include "modelfile/model_file.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/testing.h"
#include "train/freeze_run.h"
#include "train/trainer.h"
#include "transforms/inference_passes.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

void expect_close(const Tensor& a, const Tensor& b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i], tol) << "element " << i;
}

// conv -> bias -> batch-norm (inference statistics) -> relu -> dense -> bias
struct ConvBnNet {
  Graph graph;
  Output x, y;
  VariableStore vars;
  ConvBnNet() {
    Graph& g = graph;
    x = ops::placeholder(g, DType::f32, {2, 6, 6, 3}, "x");
    auto var = [&](const std::string& name, Shape shape, uint32_t seed, float lo, float hi) {
      vars.set(name, testing::random_tensor(shape, seed, lo, hi));
      return ops::variable(g, DType::f32, shape, name);
    };
    ops::Conv2DOptions o;
    o.padding = "SAME";
    Output c = ops::conv2d(g, x, var("w", {3, 3, 3, 4}, 1, -1, 1), o, "conv");
    Output b = ops::bias_add(g, c, var("b", {4}, 2, -1, 1), "conv/bias");
    Output bn = ops::batch_norm(g, b, var("gamma", {4}, 3, 0.5, 2), var("beta", {4}, 4, -1, 1),
                                var("mean", {4}, 5, -1, 1), var("var", {4}, 6, 0.5, 2), 1e-3, "bn");
    Output r = ops::relu(g, ops::dropout(g, bn, 0.5, "drop"), "relu");
    Output f = ops::flatten(g, r);
    y = ops::bias_add(g, ops::matmul(g, f, var("fc/weights", {144, 5}, 7, -1, 1), false, false, "fc"),
                      var("fc_b", {5}, 8, -1, 1), "fc/bias");
  }
};

TEST(FreezeTest, PassesKeepOutputsAndFoldAndFuse) {
  ConvBnNet net;
  Tensor input = testing::random_tensor({2, 6, 6, 3}, 9);
  auto store = std::make_shared<VariableStore>(net.vars);
  Session original(net.graph, {}, store);
  Tensor want = original.run({{net.x, input}}, {net.y})[0].clone();

  std::vector<Output> outputs = {net.y};
  Graph optimized = optimize_for_inference(net.graph, net.vars, outputs);
  EXPECT_EQ(testing::count_ops(optimized, "Variable"), 0);
  EXPECT_EQ(testing::count_ops(optimized, "Dropout"), 0);
  EXPECT_EQ(testing::count_ops(optimized, "BatchNorm"), 0);
  EXPECT_EQ(testing::count_ops(optimized, "FusedConv2D"), 1);
  EXPECT_EQ(testing::count_ops(optimized, "FusedMatMul"), 1);
  EXPECT_EQ(optimized.node(optimized.id_of("conv")).attrs.get_string("activation"), "relu");
  Session frozen(optimized);
  Tensor got = frozen.run({{Output{optimized.id_of("x"), 0}, input}}, outputs)[0].clone();
  expect_close(want, got, 1e-4);
  // Kernels prepare constant weights once; later runs must give the same result.
  expect_close(got, frozen.run({{Output{optimized.id_of("x"), 0}, input}}, outputs)[0], 0.0);

  Session reference(optimized, SessionOptions{.kernel_impl = "reference"});
  expect_close(want, reference.run({{Output{optimized.id_of("x"), 0}, input}}, outputs)[0], 1e-4);
}

TEST(FreezeTest, FrozenRunMatchesTheCheckpointAndRoundTripsThroughAFile) {
  REQUIRE_MNIST();
  std::string dir = testing::make_temp_dir("sf-freeze");
  TrainOptions o;
  o.model_path = testing::source_path("tests/data/tiny-cnn.yaml");
  o.out_dir = dir + "/run";
  o.epochs = 1;
  o.train_limit = 320;
  o.test_limit = 200;
  o.threads = 1;
  train(o, {});
  ModelFile model = freeze_run(o.out_dir);
  save_model(dir + "/tiny.sfm", model);
  ModelFile loaded = load_model(dir + "/tiny.sfm");
  EXPECT_EQ(testing::count_ops(loaded.graph, "Dropout"), 0);
  EXPECT_EQ(testing::count_ops(loaded.graph, "FusedConv2D"), 2);

  // The frozen file and the checkpoint agree on the test images' accuracy.
  EvalResult from_checkpoint = evaluate_run(o.out_dir, "mnist", 200, 1);
  DataSplit data = load_dataset("mnist");
  Dataset test = take(data.test, 200);
  Session session(loaded.graph, SessionOptions{.threads = 1});
  Tensor probs = session.run({{Output{loaded.graph.id_of("input"), 0}, examples_as_floats(test)}},
                             {Output{loaded.graph.id_of(loaded.outputs[0]), 0}})[0];
  int64_t correct = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const float* row = probs.data<float>() + i * 10;
    correct += std::max_element(row, row + 10) - row == test.labels.data<int32_t>()[i];
  }
  EXPECT_DOUBLE_EQ(static_cast<double>(correct) / 200.0, from_checkpoint.accuracy);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sf
