// The ONNX converters of Max, Min, ReduceMax, ReduceMin and Round: small models built with the
// protobuf API, imported, run and compared with values computed here.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <limits>
#include <random>

#include "onnx/context.h"
#include "onnx/importer.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"
#include "support/onnx_models.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using namespace testing;

onnx::ModelProto new_model(int opset = 13) { return new_onnx_model(opset); }

ModelFile import(const onnx::ModelProto& m, const std::string& name) {
  return import_onnx(write_onnx_model(m, ::testing::TempDir() + name));
}

// Runs the model on its inputs (in order) and returns every output.
std::vector<Tensor> run(const ModelFile& model, const std::vector<Tensor>& inputs) {
  Session s(model.graph);
  Feeds feeds;
  for (size_t i = 0; i < inputs.size(); ++i)
    feeds.emplace_back(Output{model.graph.id_of(model.inputs.at(i)), 0}, inputs[i]);
  std::vector<Output> fetches;
  for (const std::string& name : model.outputs) fetches.push_back({model.graph.id_of(name), 0});
  std::vector<Tensor> out;
  for (const Tensor& t : s.run(feeds, fetches)) out.push_back(t.clone());
  return out;
}

// Max and Min take any number of broadcasting inputs, one of them constant here.
TEST(OnnxExtremumImport, VariadicMaxAndMinFoldPairwise) {
  const std::vector<float> av = random_values(6, 1), bv = random_values(3, 2), cv{-0.2f, 0.3f};
  onnx::ModelProto m = new_model();
  add_input(m, "a", {2, 3});
  add_input(m, "b", {3});
  add_init(m, "c", {2, 1}, cv);
  add_node(m, "Max", {"a", "b", "c"}, {"hi"}, "max");
  add_node(m, "Min", {"a", "b", "c"}, {"lo"}, "min");
  add_output(m, "hi");
  add_output(m, "lo");
  ModelFile model = import(m, "max_min.onnx");
  EXPECT_EQ(count_ops(model, "Maximum"), 2);
  EXPECT_EQ(count_ops(model, "Minimum"), 2);
  std::vector<Tensor> out =
      run(model, {Tensor::from_vector<float>({2, 3}, av), Tensor::from_vector<float>({3}, bv)});
  ASSERT_EQ(out.at(0).shape(), (Shape{2, 3}));
  for (size_t r = 0; r < 2; ++r)
    for (size_t k = 0; k < 3; ++k) {
      const float a = av[r * 3 + k], b = bv[k], c = cv[r];
      EXPECT_EQ(out[0].data<float>()[r * 3 + k], std::max({a, b, c}));
      EXPECT_EQ(out[1].data<float>()[r * 3 + k], std::min({a, b, c}));
    }
}

TEST(OnnxExtremumImport, MaxOfOneInputIsThatInputAndIntegersWork) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {3}, onnx::TensorProto::INT64);
  add_input(m, "z", {3}, onnx::TensorProto::INT64);
  add_node(m, "Max", {"x"}, {"same"});
  add_node(m, "Min", {"x", "z"}, {"lo"});
  add_output(m, "same", onnx::TensorProto::INT64);
  add_output(m, "lo", onnx::TensorProto::INT64);
  ModelFile model = import(m, "max_one.onnx");
  std::vector<Tensor> out = run(model, {Tensor::from_vector<int64_t>({3}, {5, -7, 1LL << 40}),
                                        Tensor::from_vector<int64_t>({3}, {6, -8, 0})});
  EXPECT_EQ(values<int64_t>(out.at(0)), (std::vector<int64_t>{5, -7, 1LL << 40}));
  EXPECT_EQ(values<int64_t>(out.at(1)), (std::vector<int64_t>{5, -8, 0}));
}

// 8-bit integers: Max/Min compare as unsigned (u8) or signed (i8); Add and Mul wrap around.
TEST(OnnxExtremumImport, EightBitIntegersCompareAndWrap) {
  onnx::ModelProto m = new_model();
  add_input(m, "x", {3}, onnx::TensorProto::UINT8);
  add_input(m, "z", {3}, onnx::TensorProto::UINT8);
  add_node(m, "Max", {"x", "z"}, {"y"}, "mx");
  add_node(m, "Add", {"x", "z"}, {"sum"}, "add");
  add_node(m, "Mul", {"x", "z"}, {"prod"}, "mul");
  add_output(m, "y", onnx::TensorProto::UINT8);
  add_output(m, "sum", onnx::TensorProto::UINT8);
  add_output(m, "prod", onnx::TensorProto::UINT8);
  ModelFile model = import(m, "max_u8.onnx");
  std::vector<Tensor> out = run(model, {Tensor::from_vector<uint8_t>({3}, {200, 3, 16}),
                                        Tensor::from_vector<uint8_t>({3}, {100, 250, 17})});
  EXPECT_EQ(values<uint8_t>(out.at(0)), (std::vector<uint8_t>{200, 250, 17}));
  EXPECT_EQ(values<uint8_t>(out.at(1)), (std::vector<uint8_t>{44, 253, 33}));
  EXPECT_EQ(values<uint8_t>(out.at(2)), (std::vector<uint8_t>{32, 238, 16}));
}

// Before opset 18 axes are an attribute and keepdims defaults to 1.
TEST(OnnxExtremumImport, ReduceAxesAttributeAndDefaultKeepDims) {
  const std::vector<float> xv = random_values(24, 3);
  onnx::ModelProto m = new_model(13);
  add_input(m, "x", {2, 3, 4});
  set_ints(add_node(m, "ReduceMax", {"x"}, {"hi"}), "axes", {0, -1});
  set_int(add_node(m, "ReduceMin", {"x"}, {"lo"}), "keepdims", 0);
  add_output(m, "hi");
  add_output(m, "lo");
  ModelFile model = import(m, "reduce13.onnx");
  std::vector<Tensor> out = run(model, {Tensor::from_vector<float>({2, 3, 4}, xv)});
  ASSERT_EQ(out.at(0).shape(), (Shape{1, 3, 1}));
  ASSERT_EQ(out.at(1).shape(), Shape{});
  for (size_t j = 0; j < 3; ++j) {
    float want = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < 2; ++i)
      for (size_t k = 0; k < 4; ++k) want = std::max(want, xv[(i * 3 + j) * 4 + k]);
    EXPECT_EQ(out[0].data<float>()[j], want);
  }
  EXPECT_EQ(out[1].data<float>()[0], *std::min_element(xv.begin(), xv.end()));
}

// From opset 18 axes are an optional input. These tests drive the converters directly with an
// opset-18 context (onnx_opset18_test.cc imports whole opset-18 models).
struct Opset18 {
  Graph g;
  onnx_import::Context c{g, "opset18.onnx", 18};
  Output x = ops::placeholder(g, DType::f32, {2, 3}, "x");

  Opset18() {
    c.values["x"].shape = {2, 3};
    c.values["x"].plain = x;
  }
  // Converts `op`(inputs) into output "y" and returns it.
  Output convert(const std::string& op, const std::vector<std::string>& inputs,
                 const std::vector<std::pair<std::string, int64_t>>& attrs) {
    onnx::NodeProto n;
    n.set_op_type(op);
    n.set_name("r");
    for (const std::string& i : inputs) n.add_input(i);
    n.add_output("y");
    for (const auto& [name, value] : attrs) {
      onnx::AttributeProto* a = n.add_attribute();
      a->set_name(name);
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(value);
    }
    onnx_import::convert_node(c, n);
    return c.plain(c.values.at("y"));
  }
  Tensor run(Output y, const Tensor& xv) {
    Session s(g);
    return s.run({{x, xv}}, {y})[0].clone();
  }
};

TEST(OnnxExtremumImport, ReduceAxesInputFromOpset18) {
  const std::vector<float> xv = random_values(6, 4);
  Opset18 t;
  t.c.values["axes"].shape = {1};
  t.c.values["axes"].dtype = DType::i64;
  t.c.values["axes"].constant = Tensor::from_vector<int64_t>({1}, {-1});
  Output y = t.convert("ReduceMax", {"x", "axes"}, {{"keepdims", 0}});
  EXPECT_EQ(values<float>(t.run(y, Tensor::from_vector<float>({2, 3}, xv))),
            (std::vector<float>{std::max({xv[0], xv[1], xv[2]}), std::max({xv[3], xv[4], xv[5]})}));
}

TEST(OnnxExtremumImport, NoAxesWithNoopWithEmptyAxesPassesThrough) {
  Opset18 t;
  EXPECT_EQ(t.convert("ReduceMin", {"x"}, {{"noop_with_empty_axes", 1}}), t.x);
}

TEST(OnnxExtremumImport, ReduceAxesInputMustBeConstant) {
  Opset18 t;
  t.c.values["axes"].shape = {1};
  t.c.values["axes"].dtype = DType::i64;
  t.c.values["axes"].plain = ops::placeholder(t.g, DType::i64, {1}, "axes");
  try {
    t.convert("ReduceMin", {"x", "axes"}, {});
    FAIL() << "expected OnnxUnsupported";
  } catch (const OnnxUnsupported& e) {
    EXPECT_EQ(std::string(e.what()),
              "opset18.onnx: node 'r' (ReduceMin): axes (input 'axes') must be a constant");
  }
}

// A value held NHWC (here the free view of an NHWC input) is reduced in place: no transposes.
TEST(OnnxExtremumImport, ReductionOfNhwcValueNeedsNoTranspose) {
  const int64_t H = 3, W = 2, C = 4;
  const std::vector<float> xv = random_values(H * W * C, 5);
  onnx::ModelProto m = new_model();
  add_input(m, "x", {1, H, W, C});
  set_ints(add_node(m, "Transpose", {"x"}, {"nchw"}), "perm", {0, 3, 1, 2});
  set_ints(add_node(m, "ReduceMax", {"nchw"}, {"hi"}), "axes", {1});
  set_ints(add_node(m, "Transpose", {"hi"}, {"y"}), "perm", {0, 2, 3, 1});
  onnx::NodeProto* pooled = add_node(m, "ReduceMin", {"nchw"}, {"pooled"});
  set_ints(pooled, "axes", {2, 3});
  set_int(pooled, "keepdims", 0);
  add_output(m, "y");
  add_output(m, "pooled");
  ModelFile model = import(m, "reduce_nhwc.onnx");
  EXPECT_EQ(count_ops(model, "Transpose"), 0);
  std::vector<Tensor> out = run(model, {Tensor::from_vector<float>({1, H, W, C}, xv)});
  ASSERT_EQ(out.at(0).shape(), (Shape{1, H, W, 1}));
  ASSERT_EQ(out.at(1).shape(), (Shape{1, C}));
  for (size_t p = 0; p < static_cast<size_t>(H * W); ++p)
    EXPECT_EQ(out[0].data<float>()[p],
              *std::max_element(xv.begin() + static_cast<int64_t>(p * C),
                                xv.begin() + static_cast<int64_t>((p + 1) * C)));
  for (size_t c = 0; c < static_cast<size_t>(C); ++c) {
    float want = std::numeric_limits<float>::infinity();
    for (size_t p = 0; p < static_cast<size_t>(H * W); ++p) want = std::min(want, xv[p * C + c]);
    EXPECT_EQ(out[1].data<float>()[c], want);
  }
}

TEST(OnnxExtremumImport, RoundTiesToEven) {
  onnx::ModelProto m = new_model(11);
  add_input(m, "x", {6});
  add_node(m, "Round", {"x"}, {"y"});
  add_output(m, "y");
  ModelFile model = import(m, "round.onnx");
  std::vector<Tensor> out =
      run(model, {Tensor::from_vector<float>({6}, {-1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 2.6f})});
  EXPECT_EQ(values<float>(out.at(0)), (std::vector<float>{-2, 0, 0, 2, 2, 3}));
}

}  // namespace
}  // namespace sf
