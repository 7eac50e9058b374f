// ConvTranspose2D: ONNX output sizes, hand-checked values, the adjoint identity
// <conv_transpose(x, w), y> == <x, conv2d(y, w)> against the Conv2D reference kernel, and
// finite-difference gradients for x and the filter.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::random_tensor;
using testing::run_once;

Tensor iota(Shape shape) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  std::iota(v.begin(), v.end(), 1.0f);
  return Tensor::from_vector(std::move(shape), v);
}

std::vector<float> values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

using testing::error_of;

testing::BuildFn conv_transpose(const ops::ConvTranspose2DOptions& o) {
  return [o](Graph& g, const std::vector<Output>& in) {
    return ops::conv_transpose2d(g, in[0], in[1], o);
  };
}

Shape output_shape(Shape x, Shape w, const ops::ConvTranspose2DOptions& o) {
  Graph g;
  return g
      .type(ops::conv_transpose2d(g, ops::placeholder(g, DType::f32, std::move(x)),
                                  ops::placeholder(g, DType::f32, std::move(w)), o))
      .shape;
}

double dot(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double sum = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    sum += static_cast<double>(a.data<float>()[i]) * b.data<float>()[i];
  return sum;
}

struct Geometry {
  Shape x, w;
  ops::ConvTranspose2DOptions o;
};

// Strides, pads, dilations, output_padding and groups, alone and together; the last one's
// output_padding is at or past the stride (the dilation allows it): rows no input reaches.
const std::vector<Geometry> kGeometries = {
    {{1, 3, 3, 2}, {3, 3, 4, 2}, {}},
    {{2, 3, 4, 3}, {3, 2, 2, 3}, {.strides = {2, 3}, .pads = {1, 0, 0, 2}}},
    {{1, 4, 3, 2},
     {2, 3, 3, 2},
     {.strides = {2, 2}, .dilations = {1, 2}, .output_padding = {1, 1}}},
    {{1, 3, 3, 4}, {3, 3, 3, 4}, {.strides = {2, 1}, .pads = {1, 1, 1, 1}, .groups = 2}},
    {{2, 2, 3, 6}, {2, 2, 1, 6}, {.strides = {3, 2}, .dilations = {2, 1}, .groups = 6}},
    {{1, 3, 2, 2},
     {2, 2, 2, 2},
     {.strides = {1, 2}, .pads = {0, 1, 1, 0}, .dilations = {3, 3}, .output_padding = {2, 2}}},
};

TEST(OpsConvTransposeTest, OutputSizesFollowOnnx) {
  // (in - 1) * stride - pads + dilation * (k - 1) + output_padding + 1
  EXPECT_EQ(output_shape({2, 3, 3, 4}, {3, 3, 5, 4}, {}), (Shape{2, 5, 5, 5}));
  EXPECT_EQ(output_shape({1, 3, 3, 1}, {3, 3, 2, 1}, {.strides = {3, 2}}), (Shape{1, 9, 7, 2}));
  EXPECT_EQ(output_shape({1, 3, 3, 1}, {3, 3, 2, 1},
                         {.strides = {2, 2}, .pads = {1, 1, 0, 1}, .output_padding = {1, 0}}),
            (Shape{1, 6, 6, 2}));
  EXPECT_EQ(output_shape({1, 3, 3, 1}, {3, 3, 2, 1}, {.dilations = {2, 1}}), (Shape{1, 7, 5, 2}));
  // groups multiply the per-group output channels.
  EXPECT_EQ(output_shape({1, 2, 2, 6}, {1, 1, 2, 6}, {.groups = 3}), (Shape{1, 2, 2, 6}));
}

TEST(OpsConvTransposeTest, HandCheckedValues) {
  // Stride 2 with a 2x2 kernel of ones copies each pixel into its own 2x2 block.
  Tensor x = iota({1, 2, 2, 1});
  Tensor ones = Tensor::from_vector<float>({2, 2, 1, 1}, {1, 1, 1, 1});
  Tensor y = run_once(conv_transpose({.strides = {2, 2}}), {x, ones});
  ASSERT_EQ(y.shape(), (Shape{1, 4, 4, 1}));
  EXPECT_EQ(values(y), (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  // Stride 1: the full 2-D convolution of [[1,2],[3,4]] with the kernel [[1,2],[3,4]].
  Tensor k = iota({2, 2, 1, 1});
  EXPECT_EQ(values(run_once(conv_transpose({}), {x, k})),
            (std::vector<float>{1, 4, 4, 6, 20, 16, 9, 24, 16}));
  // Pads crop the full result: pads [1,0,0,1] drop the first row and the last column.
  Tensor cropped = run_once(conv_transpose({.pads = {1, 0, 0, 1}}), {x, k});
  ASSERT_EQ(cropped.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_EQ(values(cropped), (std::vector<float>{6, 20, 9, 24}));
  // output_padding adds a row that no input reaches.
  Tensor extra = run_once(conv_transpose({.strides = {2, 1}, .output_padding = {1, 0}}), {x, ones});
  ASSERT_EQ(extra.shape(), (Shape{1, 5, 3, 1}));
  EXPECT_EQ(values(extra), (std::vector<float>{1, 3, 2, 1, 3, 2, 3, 7, 4, 3, 7, 4, 0, 0, 0}));
}

// Expected outputs of ONNX's backend tests (onnx/backend/test/data/node/test_convtranspose_*),
// single-image NCHW there, so NHWC here is the same order per channel.
TEST(OpsConvTransposeTest, MatchesOnnxBackendTests) {
  // test_convtranspose_dilations: dilations [2,2].
  Tensor x = Tensor::from_vector<float>({1, 3, 3, 1}, {3, 8, 1, 9, 5, 7, 3, 2, 6});
  Tensor w = Tensor::from_vector<float>({2, 2, 1, 1}, {7, 2, 1, 9});
  Tensor y = run_once(conv_transpose({.dilations = {2, 2}}), {x, w});
  ASSERT_EQ(y.shape(), (Shape{1, 5, 5, 1}));
  EXPECT_EQ(values(y), (std::vector<float>{21, 56, 13, 16, 2,  63, 35, 67, 10, 14, 24, 22, 76,
                                           76, 21, 9,  5,  88, 45, 63, 3,  2,  33, 18, 54}));
  // test_convtranspose_pads: strides [3,2], ONNX pads [1,2,1,2] (= top 1, left 2, bottom 1,
  // right 2), two identical output channels of a 3x3 filter of ones.
  Tensor x2 = Tensor::from_vector<float>({1, 3, 3, 1}, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  Tensor ones = Tensor::from_vector<float>({3, 3, 2, 1}, std::vector<float>(18, 1.0f));
  Tensor y2 = run_once(conv_transpose({.strides = {3, 2}, .pads = {1, 1, 2, 2}}), {x2, ones});
  ASSERT_EQ(y2.shape(), (Shape{1, 7, 3, 2}));
  const std::vector<float> want{1, 1, 3, 1, 1, 3, 7, 4, 9, 7, 4, 9, 7, 4, 9, 13, 7, 15, 13, 7, 15};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(y2.data<float>()[2 * i], want[i]) << i;
    EXPECT_EQ(y2.data<float>()[2 * i + 1], want[i]) << i;
  }
}

// ConvTranspose2D is the adjoint of Conv2D with the same filter, strides, dilations and pads
// (where output_padding stays below the stride: past it, Conv2D reads rows x never had).
TEST(OpsConvTransposeTest, IsTheAdjointOfConv2D) {
  uint32_t seed = 1;
  for (const Geometry& c : kGeometries) {
    if (c.o.output_padding[0] >= c.o.strides[0] || c.o.output_padding[1] >= c.o.strides[1])
      continue;
    Tensor x = random_tensor(c.x, seed++);
    Tensor w = random_tensor(c.w, seed++);
    Tensor y = run_once(conv_transpose(c.o), {x, w});
    Tensor r = random_tensor(y.shape(), seed++);
    ops::Conv2DOptions conv{.strides = c.o.strides,
                            .padding = "EXPLICIT",
                            .pads = c.o.pads,
                            .dilations = c.o.dilations,
                            .groups = c.o.groups};
    Tensor back = run_once(
        [&](Graph& g, const std::vector<Output>& in) { return ops::conv2d(g, in[0], in[1], conv); },
        {r, w}, "reference");
    ASSERT_EQ(back.shape(), x.shape()) << "case with x " << shape_str(c.x);
    EXPECT_NEAR(dot(y, r), dot(x, back), 1e-4) << "case with x " << shape_str(c.x);
  }
}

TEST(OpsConvTransposeTest, GradientsMatchFiniteDifferences) {
  uint32_t seed = 100;
  for (const Geometry& c : kGeometries) {
    SCOPED_TRACE("x " + shape_str(c.x) + ", filter " + shape_str(c.w));
    testing::expect_gradients_match(
        conv_transpose(c.o), {random_tensor(c.x, seed), random_tensor(c.w, seed + 1)}, seed + 2);
    seed += 3;
  }
}

TEST(OpsConvTransposeTest, ShapeErrorsNameTheNode) {
  auto ct_error = [](Shape x, Shape w, ops::ConvTranspose2DOptions o) {
    return error_of([&](Graph& g) {
      ops::conv_transpose2d(g, ops::placeholder(g, DType::f32, x),
                            ops::placeholder(g, DType::f32, w), o, "up");
    });
  };
  EXPECT_EQ(ct_error({1, 4, 4, 8}, {3, 3, 2, 4}, {}),
            "node 'up' (ConvTranspose2D): filter [3,3,2,4] expects 4 input channels, x [1,4,4,8] "
            "has 8");
  EXPECT_EQ(ct_error({1, 4, 4, 6}, {3, 3, 2, 6}, {.groups = 4}),
            "node 'up' (ConvTranspose2D): x [1,4,4,6] has 6 channels, not divisible by groups 4");
  EXPECT_EQ(ct_error({1, 4, 4, 1}, {3, 3, 1, 1}, {.strides = {2, 2}, .output_padding = {2, 0}}),
            "node 'up' (ConvTranspose2D): output_padding [2,0] must be smaller than the stride "
            "or dilation on each axis");
  EXPECT_EQ(ct_error({1, 1, 1, 1}, {1, 1, 1, 1}, {.pads = {1, 0, 0, 0}}),
            "node 'up' (ConvTranspose2D): x [1,1,1,1], filter [1,1,1,1]: pads [1,0,0,0] leave an "
            "empty output (height 0)");
  EXPECT_EQ(ct_error({1, 4, 4, 1}, {3, 3, 1, 1}, {.strides = {0, 1}}),
            "node 'up' (ConvTranspose2D): x [1,4,4,1], filter [3,3,1,1]: strides must be 2 "
            "positive ints, got [0,1]");
}

}  // namespace
}  // namespace sf
