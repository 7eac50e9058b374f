// Opset 18's changes to the ops the importer reads (Reduce* axes as an input, Split num_outputs,
// Pad axes, Resize axes/antialias/keep_aspect_ratio_policy) and the refusal of newer opsets:
// small models built with the protobuf API, imported, run and compared with values computed
// here. Debian's ONNX (1.12) ships no opset-18 node tests, so these stand in for them.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <numeric>

#include "onnx/importer.h"
#include "runtime/session.h"
#include "support/onnx_models.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using namespace testing;

ModelFile import(const onnx::ModelProto& m, const std::string& name) {
  return import_onnx(write_onnx_model(m, ::testing::TempDir() + name));
}

// Output `i` of the model for input x.
Tensor run_output(const ModelFile& model, const Tensor& x, size_t i) {
  Session s(model.graph);
  return s
      .run({{Output{model.graph.id_of(model.inputs.at(0)), 0}, x}},
           {Output{model.graph.id_of(model.outputs.at(i)), 0}})[0]
      .clone();
}

// The one-line message of the OnnxUnsupported or Error that importing `m` throws.
std::string import_error(const onnx::ModelProto& m, const std::string& name) {
  try {
    import(m, name);
  } catch (const Error& e) {
    return e.what();
  }
  return "imported";
}

TEST(OnnxOpset18, ReduceOpsTakeAxesAsInput) {
  const std::vector<float> xv = random_values(24, 7);
  onnx::ModelProto m = new_onnx_model(18);
  add_input(m, "x", {2, 3, 4});
  add_init_i64(m, "last", {1}, {-1});
  add_init_i64(m, "first_two", {2}, {0, 1});
  set_int(add_node(m, "ReduceMean", {"x", "last"}, {"mean"}), "keepdims", 0);
  add_node(m, "ReduceMax", {"x", "first_two"}, {"max"});
  set_int(add_node(m, "ReduceMin", {"x", "last"}, {"min"}), "keepdims", 0);
  set_int(add_node(m, "ReduceSum", {"x"}, {"sum"}), "keepdims", 0);
  for (const char* out : {"mean", "max", "min", "sum"}) add_output(m, out);
  const ModelFile model = import(m, "reduce18.onnx");
  const Tensor x = Tensor::from_vector<float>({2, 3, 4}, xv);

  const Tensor mean = run_output(model, x, 0), max = run_output(model, x, 1);
  const Tensor min = run_output(model, x, 2), sum = run_output(model, x, 3);
  ASSERT_EQ(mean.shape(), (Shape{2, 3}));
  ASSERT_EQ(max.shape(), (Shape{1, 1, 4}));
  ASSERT_EQ(min.shape(), (Shape{2, 3}));
  ASSERT_EQ(sum.shape(), Shape{});
  for (size_t row = 0; row < 6; ++row) {
    const auto begin = xv.begin() + static_cast<std::ptrdiff_t>(row * 4);
    EXPECT_NEAR(mean.data<float>()[row], std::accumulate(begin, begin + 4, 0.0f) / 4, 1e-6f);
    EXPECT_EQ(min.data<float>()[row], *std::min_element(begin, begin + 4));
  }
  for (size_t k = 0; k < 4; ++k) {
    float want = xv[k];
    for (size_t row = 0; row < 6; ++row) want = std::max(want, xv[row * 4 + k]);
    EXPECT_EQ(max.data<float>()[k], want);
  }
  EXPECT_NEAR(sum.data<float>()[0], std::accumulate(xv.begin(), xv.end(), 0.0f), 1e-5f);
}

TEST(OnnxOpset18, ReduceWithoutAxesAndNoopWithEmptyAxesIsIdentity) {
  onnx::ModelProto m = new_onnx_model(18);
  add_input(m, "x", {2, 3});
  set_int(add_node(m, "ReduceMax", {"x"}, {"y"}), "noop_with_empty_axes", 1);
  add_output(m, "y");
  const std::vector<float> xv = random_values(6, 8);
  const Tensor y = run_output(import(m, "noop18.onnx"), Tensor::from_vector<float>({2, 3}, xv), 0);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(y), xv);
}

TEST(OnnxOpset18, SplitNumOutputsMakesTheLastPartSmaller) {
  onnx::ModelProto m = new_onnx_model(18);
  add_input(m, "x", {2, 7});
  onnx::NodeProto* split = add_node(m, "Split", {"x"}, {"a", "b", "c"}, "split");
  set_int(split, "axis", 1);
  set_int(split, "num_outputs", 3);
  for (const char* out : {"a", "b", "c"}) add_output(m, out);
  const ModelFile model = import(m, "split18.onnx");
  std::vector<float> xv(14);
  std::iota(xv.begin(), xv.end(), 0.0f);
  const Tensor x = Tensor::from_vector<float>({2, 7}, xv);
  EXPECT_EQ(values<float>(run_output(model, x, 0)), (std::vector<float>{0, 1, 2, 7, 8, 9}));
  EXPECT_EQ(values<float>(run_output(model, x, 1)), (std::vector<float>{3, 4, 5, 10, 11, 12}));
  EXPECT_EQ(values<float>(run_output(model, x, 2)), (std::vector<float>{6, 13}));
}

TEST(OnnxOpset18, SplitNumOutputsMustMatchTheOutputs) {
  onnx::ModelProto m = new_onnx_model(18);
  add_input(m, "x", {6});
  set_int(add_node(m, "Split", {"x"}, {"a", "b"}, "split"), "num_outputs", 3);
  add_output(m, "a");
  add_output(m, "b");
  EXPECT_EQ(import_error(m, "split18_bad.onnx"),
            ::testing::TempDir() +
                "split18_bad.onnx: node 'split' (Split): num_outputs is 3 but the node has 2 "
                "outputs");
}

TEST(OnnxOpset18, PadAxesPadOnlyTheGivenAxes) {
  onnx::ModelProto m = new_onnx_model(18);
  add_input(m, "x", {2, 2});
  add_init_i64(m, "pads", {2}, {1, 2});
  add_init(m, "value", {}, {9.0f});
  add_init_i64(m, "axes", {1}, {-1});
  add_node(m, "Pad", {"x", "pads", "value", "axes"}, {"y"});
  add_output(m, "y");
  const Tensor y =
      run_output(import(m, "pad18.onnx"), Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4}), 0);
  ASSERT_EQ(y.shape(), (Shape{2, 5}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{9, 1, 2, 9, 9, 9, 3, 4, 9, 9}));
}

TEST(OnnxOpset18, ResizeScalesForTheGivenAxes) {
  onnx::ModelProto m = new_onnx_model(18);
  add_input(m, "x", {1, 1, 2, 2});
  add_init(m, "scales", {2}, {2.0f, 3.0f});
  onnx::NodeProto* resize = add_node(m, "Resize", {"x", "", "scales"}, {"y"}, "resize");
  set_ints(resize, "axes", {2, 3});
  add_output(m, "y");
  const Tensor y = run_output(import(m, "resize18.onnx"),
                              Tensor::from_vector<float>({1, 1, 2, 2}, {1, 2, 3, 4}), 0);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 4, 6}));
  EXPECT_EQ(values<float>(y)[0], 1.0f);
  EXPECT_EQ(values<float>(y)[23], 4.0f);
}

TEST(OnnxOpset18, ResizeAntialiasIsRefusedNamingTheNode) {
  onnx::ModelProto m = new_onnx_model(18);
  add_input(m, "x", {1, 1, 4, 4});
  add_init(m, "scales", {4}, {1.0f, 1.0f, 0.5f, 0.5f});
  onnx::NodeProto* resize = add_node(m, "Resize", {"x", "", "scales"}, {"y"}, "shrink");
  set_string(resize, "mode", "linear");
  set_int(resize, "antialias", 1);
  add_output(m, "y");
  EXPECT_EQ(import_error(m, "antialias.onnx"),
            ::testing::TempDir() +
                "antialias.onnx: node 'shrink' (Resize): antialias=1 is not supported");
}

TEST(OnnxOpset18, ResizeAspectRatioPolicyIsRefusedNamingTheNode) {
  onnx::ModelProto m = new_onnx_model(18);
  add_input(m, "x", {1, 1, 4, 4});
  add_init_i64(m, "sizes", {4}, {1, 1, 2, 3});
  onnx::NodeProto* resize = add_node(m, "Resize", {"x", "", "", "sizes"}, {"y"}, "fit");
  set_string(resize, "keep_aspect_ratio_policy", "not_larger");
  add_output(m, "y");
  const std::string e = import_error(m, "policy.onnx");
  EXPECT_NE(e.find("node 'fit' (Resize): keep_aspect_ratio_policy 'not_larger' is not supported"),
            std::string::npos)
      << e;
}

TEST(OnnxOpset18, Opset19IsRefusedByName) {
  onnx::ModelProto m = new_onnx_model(19);
  add_input(m, "x", {2});
  add_node(m, "Relu", {"x"}, {"y"});
  add_output(m, "y");
  EXPECT_EQ(import_error(m, "opset19.onnx"),
            ::testing::TempDir() + "opset19.onnx: opset 19 is not supported (1 to 18 are)");
}

TEST(OnnxOpset18, NewOpsOfOpset18AreUnsupportedNamingTheNode) {
  onnx::ModelProto m = new_onnx_model(18);
  add_input(m, "x", {2});
  add_node(m, "Mish", {"x"}, {"y"}, "activation");
  add_output(m, "y");
  const std::string e = import_error(m, "mish.onnx");
  EXPECT_NE(e.find("activation"), std::string::npos) << e;
  EXPECT_NE(e.find("Mish"), std::string::npos) << e;
}

}  // namespace
}  // namespace sf
