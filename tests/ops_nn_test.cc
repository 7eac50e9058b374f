// Conv2D, MatMul, BiasAdd and pooling: shape functions and errors, forward values on small
// hand-checked cases (reference kernels), and finite-difference gradient checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "graph/graph.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::expect_gradients_match;
using testing::random_tensor;
using testing::run_once;

Tensor values(Shape shape, std::vector<float> v) {
  return Tensor::from_vector(std::move(shape), v);
}

// 1..n in shape order.
Tensor iota(Shape shape) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  std::iota(v.begin(), v.end(), 1.0f);
  return values(std::move(shape), v);
}

// Distinct values 0.1 apart in random order: finite differences (step 0.01) never change which
// element of a max-pooling window wins.
Tensor distinct(Shape shape, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i) - 1.0f;
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return values(std::move(shape), v);
}

void expect_values(const Tensor& t, const Shape& shape, const std::vector<float>& want) {
  ASSERT_EQ(t.shape(), shape);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(t.data<float>()[i], want[i], 1e-5) << "element " << i;
}

using testing::error_of;

testing::BuildFn conv(const ops::Conv2DOptions& o) {
  return [o](Graph& g, const std::vector<Output>& in) { return ops::conv2d(g, in[0], in[1], o); };
}

// --- shapes and errors ---

TEST(OpsNnShapes, Conv2DOutputSizes) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2, 28, 28, 3});
  Output w = ops::placeholder(g, DType::f32, {5, 5, 3, 8});
  EXPECT_EQ(g.type(ops::conv2d(g, x, w, {.padding = "SAME"})).shape, (Shape{2, 28, 28, 8}));
  EXPECT_EQ(g.type(ops::conv2d(g, x, w)).shape, (Shape{2, 24, 24, 8}));
  EXPECT_EQ(g.type(ops::conv2d(g, x, w, {.strides = {2, 3}, .padding = "SAME"})).shape,
            (Shape{2, 14, 10, 8}));
  EXPECT_EQ(g.type(ops::conv2d(g, x, w, {.padding = "EXPLICIT", .pads = {1, 2, 0, 0}})).shape,
            (Shape{2, 27, 24, 8}));
  EXPECT_EQ(g.type(ops::conv2d(g, x, w, {.dilations = {2, 2}})).shape, (Shape{2, 20, 20, 8}));
  Output dw = ops::placeholder(g, DType::f32, {3, 3, 1, 6});
  EXPECT_EQ(g.type(ops::conv2d(g, x, dw, {.groups = 3})).shape, (Shape{2, 26, 26, 6}));
}

TEST(OpsNnShapes, Conv2DChannelMismatchNamesNodeAndShapes) {
  EXPECT_EQ(error_of([](Graph& g) {
              ops::conv2d(g, ops::placeholder(g, DType::f32, {64, 14, 14, 16}),
                          ops::placeholder(g, DType::f32, {5, 5, 32, 64}), {}, "conv2");
            }),
            "node 'conv2' (Conv2D): filter [5,5,32,64] expects 32 input channels, "
            "x [64,14,14,16] has 16");
}

TEST(OpsNnShapes, Conv2DBadAttributes) {
  auto conv_error = [](ops::Conv2DOptions o, Shape x = {1, 4, 4, 2}, Shape w = {3, 3, 2, 2}) {
    return error_of([&](Graph& g) {
      ops::conv2d(g, ops::placeholder(g, DType::f32, x), ops::placeholder(g, DType::f32, w), o,
                  "c");
    });
  };
  EXPECT_EQ(conv_error({.padding = "FULL"}),
            "node 'c' (Conv2D): x [1,4,4,2], filter [3,3,2,2]: "
            "padding must be SAME, VALID or EXPLICIT, got 'FULL'");
  EXPECT_EQ(conv_error({.pads = {1, 1, 1, 1}}),
            "node 'c' (Conv2D): x [1,4,4,2], filter [3,3,2,2]: "
            "pads [1,1,1,1] need padding EXPLICIT, got VALID");
  EXPECT_EQ(conv_error({.strides = {0, 1}}),
            "node 'c' (Conv2D): x [1,4,4,2], filter [3,3,2,2]: "
            "strides must be 2 positive ints, got [0,1]");
  EXPECT_EQ(conv_error({}, {1, 2, 4, 2}),
            "node 'c' (Conv2D): x [1,2,4,2], filter [3,3,2,2]: window 3 (dilated 3) is larger "
            "than the height input 2");
  EXPECT_EQ(conv_error({.groups = 2}, {1, 4, 4, 4}, {3, 3, 2, 3}),
            "node 'c' (Conv2D): filter [3,3,2,3] has 3 output channels, not divisible by groups 2");
  EXPECT_NE(conv_error({}, {1, 4, 4}), "(no error)");
}

TEST(OpsNnShapes, MatMulInnerDimensionsDiffer) {
  EXPECT_EQ(error_of([](Graph& g) {
              ops::matmul(g, ops::placeholder(g, DType::f32, {64, 3136}),
                          ops::placeholder(g, DType::f32, {1024, 10}), false, false, "fc1");
            }),
            "node 'fc1' (MatMul): inner dimensions differ: a [64,3136] vs b [1024,10]");
  Graph g;
  Output a = ops::placeholder(g, DType::f32, {3, 4});
  Output b = ops::placeholder(g, DType::f32, {5, 4});
  EXPECT_EQ(g.type(ops::matmul(g, a, b, false, true)).shape, (Shape{3, 5}));
  EXPECT_EQ(g.type(ops::matmul(g, a, a, true, false)).shape, (Shape{4, 4}));
}

TEST(OpsNnShapes, BiasAndPoolErrors) {
  EXPECT_EQ(error_of([](Graph& g) {
              ops::bias_add(g, ops::placeholder(g, DType::f32, {4, 10}),
                            ops::placeholder(g, DType::f32, {9}), "b");
            }),
            "node 'b' (BiasAdd): bias [9] does not match the last dimension of x [4,10]");
  EXPECT_EQ(error_of([](Graph& g) {
              ops::max_pool(g, ops::placeholder(g, DType::f32, {1, 4, 4, 1}),
                            {.padding = "EXPLICIT", .pads = {2, 0, 0, 0}}, "p");
            }),
            "node 'p' (MaxPool): pads [2,0,0,0] must be smaller than ksize [2,2]");
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2, 7, 7, 3});
  EXPECT_EQ(g.type(ops::max_pool(g, x)).shape, (Shape{2, 3, 3, 3}));
  EXPECT_EQ(g.type(ops::avg_pool(g, x, {.padding = "SAME"})).shape, (Shape{2, 4, 4, 3}));
  EXPECT_EQ(g.type(ops::global_avg_pool(g, x)).shape, (Shape{2, 3}));
}

// The pair the training passes make of a tiling pool and its gradient, and the conv they fuse
// into the pool.
TEST(OpsNnShapes, WindowArgmaxErrors) {
  auto argmax_grad = [](DType argmax_dtype, Shape argmax_shape) {
    return error_of([&](Graph& g) {
      Attrs a = ops::pool2d_attrs({});
      a.set("input_shape", Shape{1, 4, 4, 2});
      g.add(op_names::kMaxPoolGradWindowArgmax,
            {ops::placeholder(g, DType::f32, {1, 2, 2, 2}),
             ops::placeholder(g, argmax_dtype, std::move(argmax_shape))},
            a, "g");
    });
  };
  EXPECT_EQ(argmax_grad(DType::u8, {1, 2, 2, 2}), "(no error)");
  EXPECT_EQ(argmax_grad(DType::i64, {1, 2, 2, 2}),
            "node 'g' (MaxPoolGradWindowArgmax): input 'argmax' must be u8, got i64");
  EXPECT_EQ(argmax_grad(DType::u8, {1, 2, 2, 1}),
            "node 'g' (MaxPoolGradWindowArgmax): argmax [1,2,2,1] does not match dy [1,2,2,2]");
  EXPECT_EQ(error_of([](Graph& g) {
              g.add(op_names::kMaxPoolWindowArgmax,
                    {ops::placeholder(g, DType::f32, {1, 20, 20, 1})},
                    ops::pool2d_attrs({.ksize = {16, 16}, .strides = {1, 1}}), "p");
            }),
            "node 'p' (MaxPoolWindowArgmax): a 16x16 window has more than 255 positions");
  EXPECT_EQ(
      error_of([](Graph& g) {
        g.add(op_names::kMaxPoolWindowArgmax, {ops::placeholder(g, DType::f32, {1, 4, 4, 1})},
              ops::pool2d_attrs({.ksize = {2, 2}, .strides = {0, 1}}), "p");
      }),
      "node 'p' (MaxPoolWindowArgmax): x [1,4,4,1]: strides must be 2 positive ints, got [0,1]");
  auto conv_pool = [](ops::PoolOptions pool) {
    return error_of([&](Graph& g) {
      Attrs a = ops::conv2d_attrs({.padding = "SAME"});
      const Attrs p = ops::pool2d_attrs(pool);
      for (const char* name : kPoolWindowAttrNames)
        a.set(prefixed_pool_attr(name), p.all().at(name));
      g.add(op_names::kFusedConv2DMaxPool,
            {ops::placeholder(g, DType::f32, {1, 7, 7, 1}),
             ops::placeholder(g, DType::f32, {3, 3, 1, 4}), ops::placeholder(g, DType::f32, {4})},
            a, "c");
    });
  };
  EXPECT_EQ(conv_pool({.padding = "SAME"}), "(no error)");
  auto conv_pool_grad = [](Shape dy) {
    return error_of([&](Graph& g) {
      Attrs a = ops::conv2d_attrs({.padding = "SAME"});
      const Attrs p = ops::pool2d_attrs({});
      for (const char* name : kPoolWindowAttrNames)
        a.set(prefixed_pool_attr(name), p.all().at(name));
      a.set("filter_shape", Shape{3, 3, 1, 4});
      g.add(op_names::kFusedConv2DMaxPoolGrad,
            {ops::placeholder(g, DType::f32, {1, 8, 8, 1}), ops::placeholder(g, DType::f32, dy),
             ops::placeholder(g, DType::u8, dy)},
            a, "cg");
    });
  };
  EXPECT_EQ(conv_pool_grad({1, 4, 4, 4}), "(no error)");
  EXPECT_EQ(conv_pool_grad({1, 4, 4, 3}),
            "node 'cg' (FusedConv2DMaxPoolGrad): dy [1,4,4,3] does not match the pooled conv "
            "output [1,4,4,4]");
  EXPECT_EQ(conv_pool({}),
            "node 'c' (FusedConv2DMaxPool): the 2x2 pool of the conv's output [1,7,7,4] must tile "
            "it, in at most 255 positions a window");
  EXPECT_EQ(conv_pool({.padding = "EXPLICIT", .pads = {2, 0, 0, 0}}),
            "node 'c' (FusedConv2DMaxPool): pooling the conv's output [1,7,7,4]: pads [2,0,0,0] "
            "must be smaller than ksize [2,2]");
}

TEST(OpsNnShapes, BackpropOpsFollowTheBatchSize) {
  Graph g;
  Output dy = ops::placeholder(g, DType::f32, {2, 4, 4, 3}, "dy");
  Output w = ops::placeholder(g, DType::f32, {3, 3, 2, 3});
  Output dx = g.add("Conv2DBackpropInput", {dy, w},
                    {{"input_shape", Shape{2, 4, 4, 2}}, {"padding", std::string("SAME")}});
  EXPECT_EQ(g.type(dx).shape, (Shape{2, 4, 4, 2}));
  g.reinfer({{dy.node, Shape{5, 4, 4, 3}}});
  EXPECT_EQ(g.type(dx).shape, (Shape{5, 4, 4, 2}));
  EXPECT_NE(error_of([](Graph& g2) {
              g2.add("Conv2DBackpropInput",
                     {ops::placeholder(g2, DType::f32, {2, 3, 4, 3}),
                      ops::placeholder(g2, DType::f32, {3, 3, 2, 3})},
                     {{"input_shape", Shape{2, 4, 4, 2}}, {"padding", std::string("SAME")}});
            }).find("dy [2,3,4,3] does not match the forward output [2,4,4,3]"),
            std::string::npos);
}

// --- forward values ---

TEST(OpsNnForward, Conv2DValidAndSame) {
  Tensor x = iota({1, 3, 3, 1});
  Tensor w = values({2, 2, 1, 1}, {1, 1, 1, 1});
  expect_values(run_once(conv({}), {x, w}, "reference"), {1, 2, 2, 1}, {12, 16, 24, 28});
  // SAME pads the bottom and right, as TensorFlow does.
  expect_values(run_once(conv({.padding = "SAME"}), {x, w}, "reference"), {1, 3, 3, 1},
                {12, 16, 9, 24, 28, 15, 15, 17, 9});
  expect_values(run_once(conv({.strides = {2, 2}, .padding = "SAME"}), {x, w}, "reference"),
                {1, 2, 2, 1}, {12, 9, 15, 9});
  expect_values(run_once(conv({.padding = "EXPLICIT", .pads = {1, 0, 0, 0}}), {x, w}, "reference"),
                {1, 3, 2, 1}, {3, 5, 12, 16, 24, 28});
  // Dilation 2 on a 3x3 input touches only the corners.
  expect_values(run_once(conv({.dilations = {2, 2}}), {x, w}, "reference"), {1, 1, 1, 1},
                {1 + 3 + 7 + 9});
}

TEST(OpsNnForward, Conv2DGroups) {
  // Two groups of one channel each: output 0 sees channel 0, outputs 1 and 2 channel 1.
  Tensor x = values({1, 1, 1, 2}, {1, 2});
  Tensor w = values({1, 1, 1, 4}, {10, 100, 1000, 3});
  expect_values(run_once(conv({.groups = 2}), {x, w}, "reference"), {1, 1, 1, 4},
                {10, 100, 2000, 6});
}

TEST(OpsNnForward, MatMulTransposes) {
  Tensor a = values({2, 2}, {1, 2, 3, 4});
  Tensor b = values({2, 2}, {5, 6, 7, 8});
  auto mm = [](bool ta, bool tb) {
    return [=](Graph& g, const std::vector<Output>& in) {
      return ops::matmul(g, in[0], in[1], ta, tb);
    };
  };
  expect_values(run_once(mm(false, false), {a, b}, "reference"), {2, 2}, {19, 22, 43, 50});
  expect_values(run_once(mm(true, false), {a, b}, "reference"), {2, 2}, {26, 30, 38, 44});
  expect_values(run_once(mm(false, true), {a, b}, "reference"), {2, 2}, {17, 23, 39, 53});
  expect_values(run_once(mm(true, true), {a, b}, "reference"), {2, 2}, {23, 31, 34, 46});
}

TEST(OpsNnForward, BiasAddAndItsGradient) {
  Tensor x = iota({2, 3});
  Tensor b = values({3}, {10, 20, 30});
  expect_values(
      run_once(
          [](Graph& g, const std::vector<Output>& in) { return ops::bias_add(g, in[0], in[1]); },
          {x, b}, "reference"),
      {2, 3}, {11, 22, 33, 14, 25, 36});
  expect_values(
      run_once(
          [](Graph& g, const std::vector<Output>& in) { return g.add("BiasAddGrad", {in[0]}); },
          {iota({2, 2, 3})}, "reference"),
      {3}, {1 + 4 + 7 + 10, 2 + 5 + 8 + 11, 3 + 6 + 9 + 12});
}

TEST(OpsNnForward, Pooling) {
  Tensor x = iota({1, 3, 3, 1});
  auto pool = [](bool max, ops::PoolOptions o) {
    return [=](Graph& g, const std::vector<Output>& in) {
      return max ? ops::max_pool(g, in[0], o) : ops::avg_pool(g, in[0], o);
    };
  };
  expect_values(run_once(pool(true, {.padding = "SAME"}), {x}, "reference"), {1, 2, 2, 1},
                {5, 6, 8, 9});
  expect_values(run_once(pool(false, {.padding = "SAME"}), {x}, "reference"), {1, 2, 2, 1},
                {3, 4.5, 7.5, 9});
  expect_values(
      run_once(pool(false, {.padding = "SAME", .count_include_pad = true}), {x}, "reference"),
      {1, 2, 2, 1}, {3, 9 / 4.0f, 15 / 4.0f, 9 / 4.0f});
  // Padding never wins a max, even when every real value is negative.
  Tensor neg = values({1, 2, 2, 1}, {-4, -3, -2, -1});
  expect_values(
      run_once(
          pool(true,
               {.ksize = {2, 2}, .strides = {1, 1}, .padding = "EXPLICIT", .pads = {1, 0, 1, 0}}),
          {neg}, "reference"),
      {1, 2, 2, 1}, {-4, -3, -2, -1});
  expect_values(
      run_once(
          [](Graph& g, const std::vector<Output>& in) { return ops::global_avg_pool(g, in[0]); },
          {iota({1, 2, 2, 2})}, "reference"),
      {1, 2}, {4, 5});
}

TEST(OpsNnForward, MaxPoolOfIntegerImages) {
  Tensor x = Tensor::from_vector<uint8_t>({1, 3, 3, 1}, {1, 200, 3, 4, 5, 255, 7, 0, 9});
  Tensor y = run_once(
      [](Graph& g, const std::vector<Output>& in) {
        return ops::max_pool(g, in[0], {.ksize = {2, 2}, .strides = {1, 1}});
      },
      {x});
  ASSERT_EQ(y.dtype(), DType::u8);
  EXPECT_EQ(testing::values<uint8_t>(y), (std::vector<uint8_t>{200, 255, 7, 255}));
}

TEST(OpsNnForward, MaxPoolWithArgmaxFindsTheFirstMaximum) {
  // NHWC [1,2,2,2]: channel 0 holds 1 5 / 5 3, channel 1 holds 8 2 / 0 8 (ties: the first wins).
  Tensor x = values({1, 2, 2, 2}, {1, 8, 5, 2, 5, 0, 3, 8});
  struct Order {
    bool nchw, column_major;
    std::vector<int64_t> want;
  };
  for (const Order& order :
       {Order{false, false, {2, 1}}, Order{true, false, {1, 4}}, Order{true, true, {2, 4}}}) {
    Graph g;
    Attrs a = ops::pool2d_attrs({.ksize = {2, 2}, .strides = {1, 1}});
    a.set("nchw_index", order.nchw);
    a.set("column_major", order.column_major);
    Output in = ops::placeholder(g, DType::f32, x.shape(), "x");
    const int id = g.add_node("MaxPoolWithArgmax", {in}, a, "pool");
    Session session(g);
    const std::vector<Tensor> out = session.run({{in, x}}, {Output{id, 0}, Output{id, 1}});
    EXPECT_EQ(testing::values<float>(out[0]), (std::vector<float>{5, 8}));
    EXPECT_EQ(testing::values<int64_t>(out[1]), order.want)
        << "nchw " << order.nchw << " column_major " << order.column_major;
  }
}

TEST(OpsNnForward, MaxPoolGradRoutesToTheFirstMaximum) {
  Tensor x = values({1, 2, 2, 1}, {3, 3, 1, 3});
  Tensor dy = values({1, 1, 1, 1}, {7});
  Tensor dx = run_once(
      [](Graph& g, const std::vector<Output>& in) {
        Output y = ops::max_pool(g, in[0]);
        return g.add("MaxPoolGrad", {in[0], y, in[1]},
                     {{"ksize", Shape{2, 2}}, {"strides", Shape{2, 2}}});
      },
      {x, dy}, "reference");
  expect_values(dx, {1, 2, 2, 1}, {7, 0, 0, 0});
}

// Positions count the whole window, padding included; with relu a window whose maximum is not
// positive records none, and its gradient goes nowhere.
TEST(OpsNnForward, WindowArgmaxesRouteTheGradient) {
  // [1,3,3,1] in 2x2 SAME windows: {1 5 / 5 3}, {2 / -1} (column 3 padding), {0 -4}, {-2}.
  Tensor x = values({1, 3, 3, 1}, {1, 5, 2, 5, 3, -1, 0, -4, -2});
  Tensor dy = values({1, 2, 2, 1}, {1, 2, 3, 4});
  for (bool relu : {false, true}) {
    for (const char* impl : {"reference", ""}) {
      Graph g;
      Attrs a = ops::pool2d_attrs({.padding = "SAME"});
      a.set("relu", relu);
      Output in = ops::placeholder(g, DType::f32, x.shape(), "x");
      Output d = ops::placeholder(g, DType::f32, dy.shape(), "dy");
      const int pool = g.add_node(op_names::kMaxPoolWindowArgmax, {in}, a, "pool");
      Attrs ga = ops::pool2d_attrs({.padding = "SAME"});
      ga.set("input_shape", x.shape());
      Output dx = g.add(op_names::kMaxPoolGradWindowArgmax, {d, Output{pool, 1}}, ga, "grad");
      Session session(g, SessionOptions{.kernel_impl = impl});
      const std::vector<Tensor> out =
          session.run({{in, x}, {d, dy}}, {Output{pool, 0}, Output{pool, 1}, dx});
      SCOPED_TRACE(std::string(impl) + (relu ? " relu" : ""));
      EXPECT_EQ(testing::values<float>(out[0]), (std::vector<float>{5, 2, 0, -2}));
      const std::vector<uint8_t> positions =
          relu ? std::vector<uint8_t>{1, 0, 255, 255} : std::vector<uint8_t>{1, 0, 0, 0};
      EXPECT_EQ(testing::values<uint8_t>(out[1]), positions);
      expect_values(out[2], {1, 3, 3, 1},
                    relu ? std::vector<float>{0, 1, 2, 0, 0, 0, 0, 0, 0}
                         : std::vector<float>{0, 1, 2, 0, 0, 0, 3, 0, 4});
    }
  }
}

// --- gradients ---

struct ConvGradCase {
  const char* name;
  Shape x, w;
  ops::Conv2DOptions options;
};

class OpsNnConvGrad : public ::testing::TestWithParam<ConvGradCase> {};

TEST_P(OpsNnConvGrad, MatchesFiniteDifferences) {
  const ConvGradCase& c = GetParam();
  expect_gradients_match(conv(c.options), {random_tensor(c.x, 11), random_tensor(c.w, 12)}, 13);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OpsNnConvGrad,
    ::testing::Values(
        ConvGradCase{"stride1_valid", {2, 5, 5, 3}, {3, 3, 3, 4}, {}},
        ConvGradCase{
            "stride2_same", {1, 6, 5, 2}, {3, 3, 2, 3}, {.strides = {2, 2}, .padding = "SAME"}},
        ConvGradCase{"explicit",
                     {1, 5, 6, 2},
                     {2, 3, 2, 2},
                     {.strides = {2, 1}, .padding = "EXPLICIT", .pads = {1, 0, 2, 1}}},
        ConvGradCase{
            "dilation2", {1, 7, 7, 2}, {3, 3, 2, 2}, {.padding = "SAME", .dilations = {2, 2}}},
        ConvGradCase{"groups2", {1, 5, 5, 4}, {3, 3, 2, 6}, {.padding = "SAME", .groups = 2}},
        ConvGradCase{"depthwise", {1, 5, 5, 3}, {3, 3, 1, 6}, {.padding = "SAME", .groups = 3}}),
    [](const ::testing::TestParamInfo<ConvGradCase>& info) { return info.param.name; });

Attrs conv_attrs(const ops::Conv2DOptions& o) {
  return {{"strides", o.strides},
          {"padding", o.padding},
          {"pads", o.pads},
          {"dilations", o.dilations},
          {"groups", o.groups}};
}

// The backprops are linear too; their own gradients make second derivatives possible.
TEST(OpsNnGrad, ConvBackpropsHaveGradients) {
  ops::Conv2DOptions o{.strides = {2, 1}, .padding = "SAME", .groups = 2};
  Shape x{1, 5, 4, 4}, w{3, 2, 2, 4}, y{1, 3, 4, 4};
  expect_gradients_match(
      [&](Graph& g, const std::vector<Output>& in) {
        Attrs a = conv_attrs(o);
        a.set("input_shape", x);
        return g.add("Conv2DBackpropInput", {in[0], in[1]}, a);
      },
      {random_tensor(y, 21), random_tensor(w, 22)}, 23);
  expect_gradients_match(
      [&](Graph& g, const std::vector<Output>& in) {
        Attrs a = conv_attrs(o);
        a.set("filter_shape", w);
        return g.add("Conv2DBackpropFilter", {in[0], in[1]}, a);
      },
      {random_tensor(x, 24), random_tensor(y, 25)}, 26);
}

TEST(OpsNnGrad, MatMulAllTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "transpose_a " << ta << " transpose_b " << tb);
      Shape a = ta ? Shape{4, 3} : Shape{3, 4};
      Shape b = tb ? Shape{5, 4} : Shape{4, 5};
      expect_gradients_match(
          [=](Graph& g, const std::vector<Output>& in) {
            return ops::matmul(g, in[0], in[1], ta, tb);
          },
          {random_tensor(a, 31), random_tensor(b, 32)}, 33);
    }
}

TEST(OpsNnGrad, BiasAdd) {
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::bias_add(g, in[0], in[1]); },
      {random_tensor({2, 3, 4}, 41), random_tensor({4}, 42)}, 43);
}

TEST(OpsNnGrad, MaxPool) {
  for (const ops::PoolOptions& o :
       {ops::PoolOptions{}, ops::PoolOptions{.ksize = {3, 3}, .strides = {2, 2}, .padding = "SAME"},
        ops::PoolOptions{
            .ksize = {3, 2}, .strides = {1, 2}, .padding = "EXPLICIT", .pads = {1, 2, 0, 1}}}) {
    expect_gradients_match(
        [=](Graph& g, const std::vector<Output>& in) { return ops::max_pool(g, in[0], o); },
        {distinct({2, 5, 6, 2}, 51)}, 52);
  }
}

TEST(OpsNnGrad, AvgPoolBothPaddingCounts) {
  for (bool include : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "count_include_pad " << include);
    for (std::string padding : {"SAME", "EXPLICIT"}) {
      ops::PoolOptions o{.ksize = {3, 3},
                         .strides = {2, 1},
                         .padding = padding,
                         .pads = padding == "SAME" ? std::vector<int64_t>{0, 0, 0, 0}
                                                   : std::vector<int64_t>{1, 2, 2, 0},
                         .count_include_pad = include};
      expect_gradients_match(
          [=](Graph& g, const std::vector<Output>& in) { return ops::avg_pool(g, in[0], o); },
          {random_tensor({2, 5, 4, 3}, 61)}, 62);
      // AvgPoolGrad is linear; its gradient is AvgPool again.
      expect_gradients_match(
          [=](Graph& g, const std::vector<Output>& in) {
            Output y = ops::avg_pool(g, in[0], o);
            return g.add("AvgPoolGrad", {y},
                         {{"ksize", o.ksize},
                          {"strides", o.strides},
                          {"padding", o.padding},
                          {"pads", o.pads},
                          {"count_include_pad", include},
                          {"input_shape", Shape{2, 5, 4, 3}}});
          },
          {random_tensor({2, 5, 4, 3}, 63)}, 64);
    }
  }
}

TEST(OpsNnGrad, GlobalAvgPool) {
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::global_avg_pool(g, in[0]); },
      {random_tensor({2, 3, 4, 5}, 71)}, 72);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) {
        return g.add("GlobalAvgPoolGrad", {in[0]}, {{"input_shape", Shape{2, 3, 4, 5}}});
      },
      {random_tensor({2, 5}, 73)}, 74);
}

}  // namespace
}  // namespace sf
