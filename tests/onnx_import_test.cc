// The ONNX importer: small models built with the protobuf API, imported, run and compared
// with values computed here; error messages for unsupported and corrupt models.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <fstream>
#include <random>

#include "io/image.h"
#include "onnx/importer.h"
#include "runtime/model_to_run.h"
#include "runtime/session.h"
#include "support/onnx_models.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using namespace testing;

onnx::ModelProto new_model(int opset = 13) { return new_onnx_model(opset); }
Tensor run(const ModelFile& model, const Tensor& x) { return run_model(model, x); }

std::string write(const std::string& bytes, const std::string& name) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string write(const onnx::ModelProto& m, const std::string& name) {
  return write_onnx_model(m, ::testing::TempDir() + name);
}

TEST(OnnxImport, ConvReluGlobalPoolFlattenGemm) {
  const int64_t C = 2, H = 5, W = 4, O = 3, K = 4;
  const std::vector<float> w = random_values(O * C * 9, 1), b = random_values(O, 2);
  const std::vector<float> fc = random_values(K * O, 3), fb = random_values(K, 4);
  onnx::ModelProto m = new_model();
  add_input(m, "x", {-1, C, H, W});
  add_init(m, "w", {O, C, 3, 3}, w);
  add_init(m, "b", {O}, b);
  add_init(m, "fc", {K, O}, fc);
  add_init(m, "fb", {K}, fb);
  onnx::NodeProto* conv = add_node(m, "Conv", {"x", "w", "b"}, {"c"}, "conv");
  set_ints(conv, "pads", {1, 1, 1, 1});
  add_node(m, "Relu", {"c"}, {"r"});
  add_node(m, "GlobalAveragePool", {"r"}, {"p"});
  add_node(m, "Flatten", {"p"}, {"f"});
  set_int(add_node(m, "Gemm", {"f", "fc", "fb"}, {"y"}, "gemm"), "transB", 1);
  add_output(m, "y");
  ModelFile model = import_onnx(write(m, "cnn.onnx"));
  ASSERT_EQ(model.inputs, std::vector<std::string>{"x"});
  ASSERT_EQ(model.outputs, std::vector<std::string>{"y"});
  // Only the input changes layout; the pooled [N,C,1,1] goes back by a reshape.
  EXPECT_EQ(count_ops(model, "Transpose"), 1);

  const int64_t N = 2;  // the batch was declared dynamic
  const std::vector<float> xv = random_values(N * C * H * W, 5);
  Tensor y = run(model, Tensor::from_vector<float>({N, C, H, W}, xv));
  ASSERT_EQ(y.shape(), (Shape{N, K}));
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> pooled(O, 0.0);
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < W; ++j) {
          double acc = b[o];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t di = 0; di < 3; ++di)
              for (int64_t dj = 0; dj < 3; ++dj) {
                const int64_t ii = i + di - 1, jj = j + dj - 1;
                if (ii < 0 || ii >= H || jj < 0 || jj >= W) continue;
                acc += xv[((n * C + c) * H + ii) * W + jj] * w[((o * C + c) * 3 + di) * 3 + dj];
              }
          pooled[o] += std::max(acc, 0.0) / (H * W);
        }
    for (int64_t k = 0; k < K; ++k) {
      double want = fb[k];
      for (int64_t o = 0; o < O; ++o) want += pooled[o] * fc[k * O + o];
      EXPECT_NEAR(y.data<float>()[n * K + k], want, 1e-4) << "n=" << n << " k=" << k;
    }
  }
}

TEST(OnnxImport, ListsEveryUnsupportedNode) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {1, 4});
  add_node(m, "Relu", {"x"}, {"a"}, "n1");
  add_node(m, "RNN", {"a"}, {"b"}, "n3");
  add_node(m, "TopK", {"b"}, {"y"}, "n7");
  add_output(m, "y");
  const std::string path = write(m, "model.onnx");
  try {
    import_onnx(path);
    FAIL() << "expected OnnxUnsupported";
  } catch (const OnnxUnsupported& e) {
    EXPECT_EQ(std::string(e.what()), path + ": 2 unsupported nodes: 'n3' (RNN), 'n7' (TopK)");
  }
}

TEST(OnnxImport, UnsupportedFeatureNamesTheNode) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {1, 1, 4, 4});
  onnx::NodeProto* p = add_node(m, "AveragePool", {"x"}, {"y"}, "pool1");
  set_ints(p, "kernel_shape", {3, 3});
  set_int(p, "ceil_mode", 1);
  set_int(p, "count_include_pad", 1);
  add_output(m, "y");
  try {
    import_onnx(write(m, "ceil.onnx"));
    FAIL() << "expected OnnxUnsupported";
  } catch (const OnnxUnsupported& e) {
    EXPECT_NE(std::string(e.what()).find("node 'pool1' (AveragePool): ceil_mode=1"),
              std::string::npos)
        << e.what();
  }
}

// Found by the ONNX fuzzer: a Concat whose inputs were lost indexed its first input.
TEST(OnnxImport, ConcatWithoutInputsNamesTheNode) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {2});
  set_int(add_node(m, "Concat", {}, {"y"}, "cat"), "axis", 0);
  add_output(m, "y");
  try {
    import_onnx(write(m, "empty_concat.onnx"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'cat' (Concat): needs at least one input"),
              std::string::npos)
        << e.what();
  }
}

// SqueezeNet's pooling: 3x3 windows, stride 2, ceil rounding: 5x5 -> 2x2 (floor) becomes 3x3.
TEST(OnnxImport, CeilModeMaxPoolRoundsTheOutputUp) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {1, 1, 6, 6});
  onnx::NodeProto* p = add_node(m, "MaxPool", {"x"}, {"y"}, "pool1");
  set_ints(p, "kernel_shape", {3, 3});
  set_ints(p, "strides", {2, 2});
  set_int(p, "ceil_mode", 1);
  add_output(m, "y");
  ModelFile model = import_onnx(write(m, "ceil-max.onnx"));
  std::vector<float> values(36);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  Tensor y = run(model, Tensor::from_vector<float>({1, 1, 6, 6}, values));
  ASSERT_EQ(y.shape(), (Shape{1, 1, 3, 3}));
  // Window starts 0, 2, 4; the last window is clipped to rows/columns 4..5.
  const std::vector<float> want = {14, 16, 17, 26, 28, 29, 32, 34, 35};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(y.data<float>()[i], want[static_cast<size_t>(i)]) << i;
}

TEST(OnnxImport, TruncatedFileIsRejected) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {1, 64});
  add_init(m, "w", {64, 64}, random_values(64 * 64, 7));
  add_node(m, "MatMul", {"x", "w"}, {"y"});
  add_output(m, "y");
  const std::string bytes = m.SerializeAsString();
  const std::string path = write(bytes.substr(0, bytes.size() / 2), "truncated.onnx");
  try {
    import_onnx(path);
    FAIL() << "expected sf::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": not a valid ONNX model (protobuf parse failed)");
  }
  EXPECT_THROW(import_onnx(write("\xff\xff\xff garbage", "garbage.onnx")), Error);
  EXPECT_THROW(import_onnx(::testing::TempDir() + "missing.onnx"), Error);
}

TEST(OnnxImport, FoldsShapeSubgraphIntoReshape) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {2, 3, 4});
  add_init_i64(m, "zero", {}, {0});
  add_init_i64(m, "axes", {1}, {0});
  add_init_i64(m, "minus_one", {1}, {-1});
  add_node(m, "Shape", {"x"}, {"s"});
  add_node(m, "Gather", {"s", "zero"}, {"n"});
  add_node(m, "Unsqueeze", {"n", "axes"}, {"n1"});
  add_node(m, "Concat", {"n1", "minus_one"}, {"shape"})->add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("axis");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(0);
    return a;
  }());
  add_node(m, "Reshape", {"x", "shape"}, {"y"});
  add_output(m, "y");
  ModelFile model = import_onnx(write(m, "fold.onnx"));
  for (const char* op : {"Shape", "Gather", "Unsqueeze", "Concat"})
    EXPECT_EQ(count_ops(model, op), 0) << op;
  const std::vector<float> xv = random_values(24, 9);
  Tensor y = run(model, Tensor::from_vector<float>({2, 3, 4}, xv));
  ASSERT_EQ(y.shape(), (Shape{2, 12}));
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(y.data<float>()[i], xv[i]);
}

// Folded arithmetic runs the reference kernels: integer Div truncates toward zero (3 / -2 is
// -1, so the target [1,-1,1] is valid; floor division would give the invalid [1,-2,1]).
TEST(OnnxImport, FoldsIntegerDivTowardZero) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {2, 3, 4});
  add_init_i64(m, "divisors", {3}, {2, -2, 4});
  add_node(m, "Shape", {"x"}, {"s"});
  add_node(m, "Div", {"s", "divisors"}, {"shape"});
  add_node(m, "Reshape", {"x", "shape"}, {"y"});
  add_output(m, "y");
  ModelFile model = import_onnx(write(m, "fold_div.onnx"));
  EXPECT_EQ(count_ops(model, "Div"), 0);
  Tensor y = run(model, Tensor::from_vector<float>({2, 3, 4}, random_values(24, 10)));
  EXPECT_EQ(y.shape(), (Shape{1, 24, 1}));
}

TEST(OnnxImport, DynamicSpatialDimsNeedInputShapes) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {1, 3, -1, -1});
  add_node(m, "Relu", {"x"}, {"y"});
  add_output(m, "y");
  const std::string path = write(m, "dynamic.onnx");
  EXPECT_THROW(import_onnx(path), Error);
  ImportOptions options;
  options.input_shapes["x"] = {1, 3, 2, 2};
  ModelFile model = import_onnx(path, options);
  Tensor y = run(model, Tensor::from_vector<float>({1, 3, 2, 2}, random_values(12, 3)));
  EXPECT_EQ(y.shape(), (Shape{1, 3, 2, 2}));
}

// A model that transposes its NHWC input to NCHW for a convolution needs no Transpose node.
TEST(OnnxImport, NhwcInputTransposeIsFree) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {1, 3, 3, 2});
  add_init(m, "w", {1, 2, 1, 1}, {1.0f, 10.0f});
  set_ints(add_node(m, "Transpose", {"x"}, {"t"}), "perm", {0, 3, 1, 2});
  add_node(m, "Conv", {"t", "w"}, {"c"});
  set_ints(add_node(m, "Transpose", {"c"}, {"y"}), "perm", {0, 2, 3, 1});
  add_output(m, "y");
  ModelFile model = import_onnx(write(m, "nhwc.onnx"));
  EXPECT_EQ(count_ops(model, "Transpose"), 0);
  const std::vector<float> xv = random_values(18, 4);
  Tensor y = run(model, Tensor::from_vector<float>({1, 3, 3, 2}, xv));
  ASSERT_EQ(y.shape(), (Shape{1, 3, 3, 1}));
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(y.data<float>()[i], xv[2 * i] + 10 * xv[2 * i + 1], 1e-5);
}

// The importer records the interface layout it keeps, and NHWC images can skip its input move.
TEST(OnnxImport, RecordsTheNchwInputLayoutThatImagesCanSkip) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {-1, 3, 4, 5});
  add_init(m, "w", {2, 3, 3, 3}, random_values(54, 6));
  set_ints(add_node(m, "Conv", {"x", "w"}, {"y"}, "conv"), "pads", {1, 1, 1, 1});
  add_output(m, "y");
  const ModelFile model = import_onnx(write(m, "layout.onnx"));
  EXPECT_EQ(model.metadata.at("input_layout"), "NCHW");
  EXPECT_TRUE(input_is_nchw(model));
  EXPECT_EQ(image_input_hwc(model), (Shape{4, 5, 3}));

  ModelToRun run = prepare_for_run(model);
  const ImagePort images = take_nhwc_images(run);
  EXPECT_FALSE(images.nchw);
  EXPECT_EQ(run.file.graph.node(images.port.node).op, "Placeholder");
  EXPECT_NE(images.port, run.input_ports[0]);
  const Tensor nhwc = Tensor::from_vector<float>({2, 4, 5, 3}, random_values(120, 7));
  Session session(run.file.graph);
  const Tensor got = session.run({{images.port, nhwc}}, run.output_ports)[0];
  const Tensor want = run_model(model, nhwc_to_nchw(nhwc));
  EXPECT_EQ(std::vector<float>(got.data<float>(), got.data<float>() + got.numel()),
            std::vector<float>(want.data<float>(), want.data<float>() + want.numel()));
}

}  // namespace
}  // namespace sf
