// load_for_run opens a .sfm file as the C API and the commands run it: the execution passes
// applied, the ports found; the image helpers read the input's layout from the file.
#include "runtime/model_to_run.h"

#include <gtest/gtest.h>

#include "io/image.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/temp_files.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

Output conv(Graph& g, Output x, int64_t out, uint32_t seed, const std::string& name) {
  const int64_t in = g.type(x).shape[3];
  return g.add("FusedConv2D",
               {x, ops::constant(g, testing::random_tensor({1, 1, in, out}, seed)),
                ops::constant(g, testing::random_tensor({out}, seed + 1))},
               {{"padding", std::string("SAME")}, {"activation", std::string("relu")}}, name);
}

// x [1,4,4,3] -> two convs -> channel Concat -> conv -> probabilities: the Concat read only by a
// conv is what the execution passes remove.
ModelFile concat_model() {
  ModelFile model;
  Graph& g = model.graph;
  Output x = ops::placeholder(g, DType::f32, {1, 4, 4, 3}, "x");
  Output both = ops::concat(g, {conv(g, x, 2, 10, "a"), conv(g, x, 3, 20, "b")}, 3, "both");
  Output c = conv(g, both, 4, 30, "c");
  ops::softmax(g, ops::reshape(g, c, {-1, 64}, "flat"), "probabilities");
  model.inputs = {"x"};
  model.outputs = {"probabilities"};
  return model;
}

TEST(LoadForRun, AppliesTheExecutionPassesAndFindsThePorts) {
  const std::string path = testing::make_temp_dir("sf-load-for-run") + "/concat.sfm";
  const ModelFile stored = concat_model();
  save_model(path, stored);
  const ModelToRun run = load_for_run(path);
  EXPECT_EQ(run.file.inputs, stored.inputs);
  EXPECT_EQ(run.file.outputs, stored.outputs);
  EXPECT_GT(run.file.file_bytes, 0u);
  EXPECT_EQ(testing::count_ops(stored.graph, "Concat"), 1);
  EXPECT_EQ(testing::count_ops(run.file.graph, "Concat"), 0);
  ASSERT_EQ(run.input_ports.size(), 1u);
  ASSERT_EQ(run.output_ports.size(), 1u);
  EXPECT_EQ(run.input_ports[0], (Output{run.file.graph.id_of("x"), 0}));
  EXPECT_EQ(run.output_ports[0], (Output{run.file.graph.id_of("probabilities"), 0}));
  EXPECT_EQ(run.input_type(0), (TensorType{DType::f32, {1, 4, 4, 3}}));

  const Tensor x = testing::random_tensor({2, 4, 4, 3}, 5);
  Session as_stored(stored.graph);
  const Tensor want = as_stored.run({{Output{stored.graph.id_of("x"), 0}, x}},
                                    {Output{stored.graph.id_of("probabilities"), 0}})[0];
  Session as_run(run.file.graph);
  const Tensor got = as_run.run({{run.input_ports[0], x}}, run.output_ports)[0];
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5) << i;
}

TEST(LoadForRun, AMissingFileIsAnErrorNamingIt) {
  const std::string path = testing::make_temp_dir("sf-load-for-run") + "/missing.sfm";
  testing::expect_error([&] { load_for_run(path); }, "missing.sfm");
}

// x NCHW [1,3,4,5] -> the importer's Transpose -> conv, recorded as ONNX models are.
ModelFile nchw_model() {
  ModelFile model;
  Graph& g = model.graph;
  Output x = ops::placeholder(g, DType::f32, {1, 3, 4, 5}, "x");
  conv(g, ops::transpose(g, x, {0, 2, 3, 1}, "x/to_nhwc"), 2, 40, "y");
  model.inputs = {"x"};
  model.outputs = {"y"};
  model.metadata["input_layout"] = "NCHW";
  return model;
}

// A `quantize --mode bf16` file runs in bf16 unless the command asks otherwise; its fp32 layers
// stay fp32; malformed precision metadata is a one-line error naming the file.
TEST(ModelPrecision, TheFileChoosesUnlessTheCommandDoes) {
  ModelFile model = concat_model();
  SessionOptions options;
  EXPECT_EQ(choose_model_precision(model, "m.sfm", "", options).precision, Precision::fp32);
  model.metadata["precision"] = "bf16";
  model.metadata["fp32_layers"] = R"(["a"])";
  const PrecisionChoice stored = choose_model_precision(model, "m.sfm", "", options);
  EXPECT_EQ(stored.precision, Precision::bf16);
  EXPECT_EQ(stored.reason.rfind("the model's (quantize --mode bf16); ", 0), 0u) << stored.reason;
  EXPECT_EQ(options.precision, Precision::bf16);
  EXPECT_EQ(options.fp32_layers, std::set<std::string>{"a"});
  EXPECT_EQ(choose_model_precision(model, "m.sfm", "fp32", options).precision, Precision::fp32);
  EXPECT_EQ(options.precision, Precision::fp32);

  model.metadata["precision"] = "fp8\nsecond line";
  testing::expect_error([&] { choose_model_precision(model, "m.sfm", "", options); },
                        "m.sfm: metadata precision must be fp32 or bf16");
  model.metadata["precision"] = "bf16";
  for (const char* bad : {"a", "{}", "[1]", "[[\"a\"]]"}) {
    model.metadata["fp32_layers"] = bad;
    testing::expect_error([&] { choose_model_precision(model, "m.sfm", "", options); },
                          "m.sfm: metadata fp32_layers");
  }
}

TEST(ImageInput, TheLayoutComesFromTheMetadataOrTheShape) {
  ModelFile nchw = nchw_model();
  EXPECT_TRUE(input_is_nchw(nchw));
  EXPECT_EQ(image_input_hwc(nchw), (Shape{4, 5, 3}));
  nchw.metadata.erase("input_layout");
  EXPECT_TRUE(input_is_nchw(nchw));  // [1,3,4,5]: only dimension 1 looks like channels
  nchw.metadata["input_layout"] = "NHWC";
  EXPECT_FALSE(input_is_nchw(nchw));
  EXPECT_EQ(image_input_hwc(nchw), (Shape{3, 4, 5}));

  const ModelFile nhwc = concat_model();
  EXPECT_FALSE(input_is_nchw(nhwc));
  EXPECT_EQ(image_input_hwc(nhwc), (Shape{4, 4, 3}));
  ModelFile flat;
  ops::placeholder(flat.graph, DType::f32, {1, 784}, "x");
  flat.inputs = {"x"};
  EXPECT_TRUE(image_input_hwc(flat).empty());
}

TEST(ImageInput, NhwcImagesSkipTheMoveOfAnNchwModel) {
  const ModelFile stored = nchw_model();
  ModelToRun run = prepare_for_run(stored);
  const ImagePort images = take_nhwc_images(run);
  EXPECT_FALSE(images.nchw);
  EXPECT_EQ(run.file.graph.node(images.port.node).name, "x/to_nhwc");
  EXPECT_EQ(run.input_ports[0], (Output{run.file.graph.id_of("x"), 0}));  // as declared

  const Tensor nhwc = testing::random_tensor({2, 4, 5, 3}, 6);
  Session as_stored(stored.graph);
  const Tensor want =
      as_stored.run({{Output{0, 0}, nhwc_to_nchw(nhwc)}}, {Output{stored.graph.id_of("y"), 0}})[0];
  Session as_run(run.file.graph);
  const Tensor got = as_run.run({{images.port, nhwc}}, run.output_ports)[0];
  EXPECT_EQ(testing::values<float>(got), testing::values<float>(want));

  // A slimflow model takes them at its input, as they are.
  ModelToRun own = prepare_for_run(concat_model());
  const ImagePort direct = take_nhwc_images(own);
  EXPECT_FALSE(direct.nchw);
  EXPECT_EQ(direct.port, own.input_ports[0]);
}

}  // namespace
}  // namespace sf
