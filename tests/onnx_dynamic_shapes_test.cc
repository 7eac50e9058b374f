// Dynamic shapes end to end: a PyTorch 1.13 export with symbolic batch, height and width runs
// through `slimflow run` (from the .onnx and from one symbolic .sfm) at several input shapes and
// matches ONNX Runtime; inconsistent inputs are one-line errors naming the input and dimension.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "io/npy.h"
#include "slimflow/slimflow.h"
#include "onnx/shape_specializer.h"
#include "support/cli.h"
#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/onnx_models.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// The export and the peer start Python and Node: bounded, so that a stuck one fails the test.
testing::CliResult run_command(const std::string& command) {
  return testing::run_shell("timeout 120 " + command);
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return 1e30f;
  float worst = 0.0f;
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, std::abs(a.data<float>()[i] - b.data<float>()[i]));
  return worst;
}

// The export takes seconds, so the suite shares one.
class OnnxDynamicShapesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (run_command("/usr/bin/python3 -c 'import torch'").exit_code != 0) return;
    shared_dir_ = testing::make_temp_dir("sf-onnx-dynamic");
    export_log_ = run_command("/usr/bin/python3 " +
                              testing::source_path("tests/scripts/export_dynamic_models.py") +
                              " " + shared_dir_)
                      .out;
  }
  static void TearDownTestSuite() {
    if (!shared_dir_.empty()) std::filesystem::remove_all(shared_dir_);
  }
  void SetUp() override {
    if (shared_dir_.empty()) GTEST_SKIP() << "/usr/bin/python3 with torch is not available";
    dir_ = shared_dir_;
    model_ = dir_ + "/dynamic_cnn.onnx";
    ASSERT_TRUE(std::filesystem::exists(model_)) << export_log_;
  }
  static inline std::string shared_dir_, export_log_;
  std::string dir_, model_;
};

// Two shapes per model file, both against ONNX Runtime: the .onnx and the symbolic .sfm that
// `import` writes without --input-shape (one file serving every size).
TEST_F(OnnxDynamicShapesTest, MatchesOnnxRuntimeAtSeveralShapes) {
  ASSERT_EQ(run_command("node --version").exit_code, 0)
      << "node is not installed; scripts/setup.sh installs it and onnxruntime-node";
  const testing::CliResult imported = testing::run_cli("import " + model_ + " --out " + dir_ + "/m.sfm");
  ASSERT_EQ(imported.exit_code, 0) << imported.out;
  const std::string runner = testing::source_path("bench/ort_runner.js");
  const std::vector<Shape> shapes = {{1, 3, 16, 16}, {3, 3, 24, 20}, {2, 3, 9, 13}};
  for (size_t k = 0; k < shapes.size(); ++k) {
    const std::string x = dir_ + "/x" + std::to_string(k) + ".npy";
    write_npy(x, testing::random_tensor(shapes[k], 40 + static_cast<uint32_t>(k)));
    const std::string theirs_path = dir_ + "/ort" + std::to_string(k) + ".npy";
    const testing::CliResult ort =
        run_command("node " + runner + " " + model_ + " " + x + " " + theirs_path + " --runs 1 --threads 1");
    ASSERT_EQ(ort.exit_code, 0) << ort.out;
    const Tensor theirs = read_npy(theirs_path);
    for (const std::string& file : {model_, dir_ + "/m.sfm"}) {
      const std::string out = dir_ + "/out" + std::to_string(k);
      const testing::CliResult ran = testing::run_cli("run --model " + file + " --input x=" + x +
                                                      " --output-dir " + out + " --threads 1");
      ASSERT_EQ(ran.exit_code, 0) << ran.out;
      const Tensor ours = read_npy(out + "/logits.npy");
      EXPECT_LE(max_abs_diff(ours, theirs), 1e-4f) << file << " at " << shape_str(shapes[k]);
      const Tensor features = read_npy(out + "/features.npy");
      EXPECT_EQ(features.shape(), (Shape{shapes[k][0], 8, shapes[k][2], shapes[k][3]}));
    }
  }
}

// The sequence models users bring, as PyTorch exports them: a transformer encoder (batched
// MatMul, Softmax, decomposed LayerNormalization, Erf GELU), a 1-D conv + bidirectional GRU and
// a Conv3d + ConvTranspose3d video model, each at two shapes against ONNX Runtime.
TEST_F(OnnxDynamicShapesTest, SequenceModelsMatchOnnxRuntimeAtTwoShapes) {
  ASSERT_EQ(run_command("node --version").exit_code, 0)
      << "node is not installed; scripts/setup.sh installs it and onnxruntime-node";
  const std::string runner = testing::source_path("bench/ort_runner.js");
  struct Case {
    std::string model;
    std::vector<Shape> shapes;
  };
  for (const Case& c : {Case{"encoder", {{1, 12, 16}, {3, 7, 16}}},
                        Case{"audio", {{1, 8, 20}, {2, 8, 33}}},
                        Case{"video", {{1, 2, 5, 6, 7}, {2, 2, 4, 5, 8}}}}) {
    const std::string model = dir_ + "/" + c.model + ".onnx";
    ASSERT_TRUE(std::filesystem::exists(model)) << export_log_;
    for (size_t k = 0; k < c.shapes.size(); ++k) {
      const std::string tag = c.model + std::to_string(k);
      const std::string x = dir_ + "/" + tag + ".npy";
      write_npy(x, testing::random_tensor(c.shapes[k], 60 + static_cast<uint32_t>(k), -2.0f, 2.0f));
      const testing::CliResult ort = run_command("node " + runner + " " + model + " " + x + " " +
                                                 dir_ + "/" + tag + "-ort.npy --runs 1 --threads 1");
      ASSERT_EQ(ort.exit_code, 0) << ort.out;
      const testing::CliResult ran = testing::run_cli("run --model " + model + " --input x=" + x +
                                                      " --output-dir " + dir_ + "/" + tag +
                                                      " --threads 1");
      ASSERT_EQ(ran.exit_code, 0) << ran.out;
      EXPECT_LE(max_abs_diff(read_npy(dir_ + "/" + tag + "/y.npy"),
                             read_npy(dir_ + "/" + tag + "-ort.npy")),
                1e-4f)
          << c.model << " at " << shape_str(c.shapes[k]);
    }
  }
}

TEST_F(OnnxDynamicShapesTest, InconsistentInputIsOneLineNamingTheDimension) {
  const std::string x = dir_ + "/bad.npy";
  write_npy(x, testing::random_tensor({1, 4, 8, 8}, 3));
  const testing::CliResult ran =
      testing::run_cli("run --model " + model_ + " --input x=" + x + " --output-dir " + dir_);
  EXPECT_NE(ran.exit_code, 0);
  const std::vector<std::string> lines = testing::non_empty_lines(ran.out);
  ASSERT_EQ(lines.size(), 1u) << ran.out;
  EXPECT_EQ(lines[0],
            "slimflow: error: " + x +
                ": input 'x' shape [1,4,8,8]: dimension 1 is 4; the model allows only 3 "
                "([batch,3,height,width])");
  write_npy(x, testing::random_tensor({1, 3, 8}, 3));
  const testing::CliResult rank =
      testing::run_cli("run --model " + model_ + " --input x=" + x + " --output-dir " + dir_);
  EXPECT_NE(rank.exit_code, 0);
  EXPECT_NE(rank.out.find("input 'x' has shape [1,3,8] (rank 3); the model takes rank 4"),
            std::string::npos)
      << rank.out;
}

// Planning is per input shape: a repeated shape reuses its plan, the cache is capped, and
// bench --json says which shape it timed and what the cache holds.
TEST_F(OnnxDynamicShapesTest, PlansPerShapeWithACappedCache) {
  std::ifstream in(model_, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ShapeSpecializer model(bytes, model_, {}, {}, 2);
  EXPECT_TRUE(model.dynamic());
  model.run({testing::random_tensor({1, 3, 8, 8}, 1)});
  model.run({testing::random_tensor({1, 3, 8, 8}, 2)});
  EXPECT_EQ(model.stats().plans_made, 1u);
  model.run({testing::random_tensor({2, 3, 8, 8}, 1)});
  model.run({testing::random_tensor({1, 3, 6, 8}, 1)});
  EXPECT_EQ(model.stats().plans, 2u);
  EXPECT_EQ(model.stats().plans_made, 3u);
  EXPECT_GT(model.stats().cache_bytes, 0u);

  const testing::CliResult bench = testing::run_cli(
      "bench --model " + model_ + " --input-shape x=2,3,16,12 --runs 2 --warmup 1 --json --threads 1",
      false);
  ASSERT_EQ(bench.exit_code, 0) << bench.out;
  EXPECT_NE(bench.out.find("\"input_shapes\":{\"x\":[2,3,16,12]}"), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("\"plan_cache\""), std::string::npos) << bench.out;
  const testing::CliResult unshaped =
      testing::run_cli("bench --model " + model_ + " --runs 1 --warmup 0");
  EXPECT_NE(unshaped.exit_code, 0);
  EXPECT_NE(unshaped.out.find("input 'x' [batch,3,height,width] has symbolic dimension 2"),
            std::string::npos)
      << unshaped.out;
}

// The C API serves every size from one symbolic file: it reports the free dimensions, runs two
// shapes (the same outputs as the specializer the command uses, bit for bit), and refuses an
// input that does not fit with one line naming the input and the dimension.
TEST_F(OnnxDynamicShapesTest, CApiRunsASymbolicFileAtEveryShape) {
  const std::string sfm = dir_ + "/capi.sfm";
  ASSERT_EQ(testing::run_cli("import " + model_ + " --out " + sfm).exit_code, 0);
  sf_model* model = sf_model_load(sfm.c_str());
  ASSERT_NE(model, nullptr) << sf_last_error();
  int64_t dims[4];
  ASSERT_EQ(sf_model_input_shape(model, 0, dims, 4), 4);
  EXPECT_EQ(Shape(dims, dims + 4), (Shape{-1, 3, -1, -1}));
  std::ifstream in(model_, std::ios::binary);
  ShapeSpecializer reference(std::string((std::istreambuf_iterator<char>(in)),
                                         std::istreambuf_iterator<char>()),
                             model_);
  ASSERT_EQ(sf_model_num_outputs(model), static_cast<int>(reference.outputs().size()));
  for (const Shape& shape : {Shape{2, 3, 10, 12}, Shape{1, 3, 7, 16}}) {
    const Tensor x = testing::random_tensor(shape, 5);
    ASSERT_EQ(sf_model_set_input(model, 0, x.data<float>(), shape.data(), 4), 0) << sf_last_error();
    ASSERT_EQ(sf_model_run(model), 0) << sf_last_error();
    const std::vector<Tensor> expected = reference.run({x});
    for (int k = 0; k < sf_model_num_outputs(model); ++k) {
      const float* y;
      const int64_t* y_dims;
      int y_rank;
      ASSERT_EQ(sf_model_output(model, k, &y, &y_dims, &y_rank), 0) << sf_last_error();
      const Tensor& want = expected[static_cast<size_t>(k)];
      ASSERT_EQ(Shape(y_dims, y_dims + y_rank), want.shape()) << sf_model_output_name(model, k);
      // Not bit-equal: each side measures its conv layouts (blocked, NHWC, Winograd) when it
      // plans, so a busy machine can give the two plans different summation orders.
      for (int64_t e = 0; e < want.numel(); ++e)
        ASSERT_NEAR(y[e], want.data<float>()[e], 1e-4f)
            << sf_model_output_name(model, k) << " at " << e;
    }
  }
  const Shape bad = {1, 4, 8, 8};
  const Tensor x = testing::random_tensor(bad, 6);
  ASSERT_EQ(sf_model_set_input(model, 0, x.data<float>(), bad.data(), 4), 0) << sf_last_error();
  EXPECT_EQ(sf_model_run(model), -1);
  EXPECT_EQ(std::string(sf_last_error()),
            sfm + ": input 'x' shape [1,4,8,8]: dimension 1 is 4; the model allows only 3 "
                  "([batch,3,height,width])");
  sf_model_free(model);
}

// A Reshape whose shape is a graph input fed at run time: read at plan time, and a new value
// makes a new plan (as do the shapes of the data).
TEST(OnnxShapeArguments, ReshapeShapeFedAtRunTimeReplansWhenItChanges) {
  onnx::ModelProto m = testing::new_onnx_model(13);
  testing::add_input(m, "data", {-1, 6});
  testing::add_input(m, "shape", {2}, onnx::TensorProto::INT64);
  testing::add_output(m, "y");
  testing::add_node(m, "Reshape", {"data", "shape"}, {"y"}, "reshape");
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  ShapeSpecializer model(bytes, "reshape.onnx");
  ASSERT_EQ(model.inputs().size(), 2u);
  EXPECT_FALSE(model.inputs()[0].shape_argument);
  EXPECT_TRUE(model.inputs()[1].shape_argument);
  const Tensor data = testing::random_tensor({2, 6}, 7);
  auto shape = [](std::vector<int64_t> dims) {
    Tensor t(DType::i64, {static_cast<int64_t>(dims.size())});
    std::copy(dims.begin(), dims.end(), t.data<int64_t>());
    return t;
  };
  EXPECT_EQ(model.run({data, shape({3, 4})})[0].shape(), (Shape{3, 4}));
  EXPECT_EQ(model.run({data, shape({-1, 2})})[0].shape(), (Shape{6, 2}));
  const Tensor y = model.run({data, shape({4, 3})})[0].clone();
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(y.data<float>()[i], data.data<float>()[i]);
  EXPECT_EQ(model.run({testing::random_tensor({4, 6}, 8), shape({-1, 3})})[0].shape(),
            (Shape{8, 3}));
  EXPECT_EQ(model.stats().plans_made, 4u);
  model.run({data, shape({3, 4})});
  EXPECT_EQ(model.stats().plans_made, 4u);  // cached
}

}  // namespace
}  // namespace sf
