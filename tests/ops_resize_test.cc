// Resize (NHWC) against values worked out by hand from the ONNX formulas and against the
// expected outputs of ONNX's own backend tests (onnx/backend/test/data/node/test_resize_*);
// finite-difference gradients (ResizeGrad) in every mode.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::run_once;

// 1..n in shape order.
Tensor iota(Shape shape) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  std::iota(v.begin(), v.end(), 1.0f);
  return Tensor::from_vector(std::move(shape), v);
}

Tensor resize(const Tensor& x, std::vector<int64_t> sizes, ops::ResizeOptions o) {
  return run_once(
      [&](Graph& g, const std::vector<Output>& in) { return ops::resize(g, in[0], sizes, o); },
      {x});
}

void expect_values(const Tensor& t, const Shape& shape, const std::vector<float>& want) {
  ASSERT_EQ(t.shape(), shape);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(t.data<float>()[i], want[i], 1e-5) << "element " << i;
}

// For a separable nearest resize of a square single-channel image: y[r][c] = x[map[r]][map[c]].
std::vector<float> pick(const Tensor& x, const std::vector<int64_t>& map) {
  const int64_t w = x.dim(2);
  std::vector<float> out;
  for (int64_t r : map)
    for (int64_t c : map) out.push_back(x.data<float>()[r * w + c]);
  return out;
}

using testing::error_of;

// x = [[1,2],[3,4]] upsampled to 4x4. Source coordinates per output index i (scale 2):
// half_pixel (i + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25; asymmetric i / 2 = 0, 0.5, 1, 1.5;
// align_corners i / 3 = 0, 1/3, 2/3, 1.
TEST(OpsResizeTest, NearestUpsample2x2Into4x4) {
  Tensor x = iota({1, 2, 2, 1});
  auto nearest = [&](const char* ctm, const char* mode) {
    return resize(x, {4, 4},
                  {.mode = "nearest", .coordinate_transformation_mode = ctm, .nearest_mode = mode});
  };
  // half_pixel rounds -0.25 -> 0 and 1.25 -> 1 in every mode except where ceil/floor differ.
  expect_values(nearest("half_pixel", "round_prefer_floor"), {1, 4, 4, 1}, pick(x, {0, 0, 1, 1}));
  expect_values(nearest("half_pixel", "floor"), {1, 4, 4, 1}, pick(x, {0, 0, 0, 1}));
  expect_values(nearest("half_pixel", "ceil"), {1, 4, 4, 1}, pick(x, {0, 1, 1, 1}));
  // asymmetric hits the ties 0.5 and 1.5: floor wins for round_prefer_floor, ceil otherwise.
  expect_values(nearest("asymmetric", "round_prefer_floor"), {1, 4, 4, 1}, pick(x, {0, 0, 1, 1}));
  expect_values(nearest("asymmetric", "round_prefer_ceil"), {1, 4, 4, 1}, pick(x, {0, 1, 1, 1}));
  expect_values(nearest("align_corners", "round_prefer_floor"), {1, 4, 4, 1},
                pick(x, {0, 0, 1, 1}));
  expect_values(nearest("pytorch_half_pixel", "round_prefer_floor"), {1, 4, 4, 1},
                pick(x, {0, 0, 1, 1}));
}

TEST(OpsResizeTest, LinearUpsample2x2Into4x4) {
  Tensor x = iota({1, 2, 2, 1});
  // x rises by 1 per column and 2 per row, so y[r][c] = 1 + u[c] + 2 u[r], where u is the
  // source coordinate clamped to [0, 1].
  auto bilinear = [](std::vector<double> u) {
    std::vector<float> out;
    for (double r : u)
      for (double c : u) out.push_back(static_cast<float>(1 + c + 2 * r));
    return out;
  };
  auto linear = [&](const char* ctm) {
    return resize(x, {4, 4}, {.mode = "linear", .coordinate_transformation_mode = ctm});
  };
  // ONNX test_resize_upsample_scales_linear: [[1,1.25,1.75,2],[1.5,1.75,2.25,2.5],...].
  expect_values(linear("half_pixel"), {1, 4, 4, 1}, bilinear({0, 0.25, 0.75, 1}));
  expect_values(linear("pytorch_half_pixel"), {1, 4, 4, 1}, bilinear({0, 0.25, 0.75, 1}));
  expect_values(linear("asymmetric"), {1, 4, 4, 1}, bilinear({0, 0.5, 1, 1}));
  // ONNX test_resize_upsample_scales_linear_align_corners: [[1,1.333,1.667,2],...].
  expect_values(linear("align_corners"), {1, 4, 4, 1}, bilinear({0, 1 / 3.0, 2 / 3.0, 1}));
}

// The 4x4 -> 8x8 nearest cases of ONNX's backend tests; the index maps are read off their
// expected outputs (1..16 input, so value v sits at row (v-1)/4, column (v-1)%4).
TEST(OpsResizeTest, MatchesOnnxNearestBackendTests) {
  Tensor x = iota({1, 4, 4, 1});
  // test_resize_upsample_sizes_nearest_ceil_half_pixel
  expect_values(resize(x, {8, 8}, {.nearest_mode = "ceil"}), {1, 8, 8, 1},
                pick(x, {0, 1, 1, 2, 2, 3, 3, 3}));
  // test_resize_upsample_sizes_nearest_floor_align_corners
  expect_values(
      resize(x, {8, 8},
             {.coordinate_transformation_mode = "align_corners", .nearest_mode = "floor"}),
      {1, 8, 8, 1}, pick(x, {0, 0, 0, 1, 1, 2, 2, 3}));
  // test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric
  expect_values(
      resize(x, {8, 8},
             {.coordinate_transformation_mode = "asymmetric", .nearest_mode = "round_prefer_ceil"}),
      {1, 8, 8, 1}, pick(x, {0, 1, 1, 2, 2, 3, 3, 3}));
  // test_resize_downsample_sizes_nearest: [1,2,4] from a 2x4 input resized to 1x3.
  expect_values(resize(iota({1, 2, 4, 1}), {1, 3}, {}), {1, 1, 3, 1}, {1, 2, 4});
  // test_resize_downsample_sizes_linear_pytorch_half_pixel: 4x4 -> 3x1; a single output
  // column maps to source 0 under pytorch_half_pixel (half_pixel would give 1.5).
  expect_values(
      resize(x, {3, 1}, {.mode = "linear", .coordinate_transformation_mode = "pytorch_half_pixel"}),
      {1, 3, 1, 1}, {1.6666666f, 7, 12.333333f});
  expect_values(resize(x, {3, 1}, {.mode = "linear"}), {1, 3, 1, 1},
                {1.6666666f + 1.5f, 7 + 1.5f, 12.333333f + 1.5f});
}

TEST(OpsResizeTest, KeepsBatchAndChannels) {
  // Two images, two channels; channel 1 is channel 0 times 10, image 1 is image 0 plus 100.
  std::vector<float> v;
  for (int b = 0; b < 2; ++b)
    for (int p = 1; p <= 4; ++p)
      for (int c = 0; c < 2; ++c) v.push_back(static_cast<float>((100 * b + p) * (c ? 10 : 1)));
  Tensor y = resize(Tensor::from_vector<float>({2, 2, 2, 2}, v), {3, 3},
                    {.mode = "linear", .coordinate_transformation_mode = "align_corners"});
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3, 2}));
  // align_corners 2 -> 3: sources 0, 0.5, 1; the centre is the mean of the four corners.
  const float* p = y.data<float>();
  EXPECT_FLOAT_EQ(p[(0 * 9 + 4) * 2 + 0], 2.5f);
  EXPECT_FLOAT_EQ(p[(0 * 9 + 4) * 2 + 1], 25.0f);
  EXPECT_FLOAT_EQ(p[(1 * 9 + 4) * 2 + 0], 102.5f);
  EXPECT_FLOAT_EQ(p[(1 * 9 + 8) * 2 + 1], 1040.0f);
}

// Cubic weights sum to 1, with edge taps clamped or (exclude_outside) dropped and the rest
// renormalized: a constant image stays constant, up and down, at any scale.
TEST(OpsResizeTest, CubicKeepsAConstantImage) {
  Tensor x(DType::f32, {1, 5, 4, 2});
  std::fill(x.data<float>(), x.data<float>() + x.numel(), 3.25f);
  for (bool exclude : {false, true})
    for (std::vector<int64_t> sizes : {std::vector<int64_t>{9, 7}, std::vector<int64_t>{2, 3}}) {
      Tensor y = resize(x, sizes, {.mode = "cubic", .exclude_outside = exclude});
      for (int64_t i = 0; i < y.numel(); ++i)
        ASSERT_NEAR(y.data<float>()[i], 3.25f, 1e-5) << "exclude " << exclude << " at " << i;
    }
}

// With the model's scales (not out / in) the coordinates follow the fractional scale: 4 pixels
// scaled by 0.6 give 2 (floor 2.4), whose half-pixel centres map back to 0.333 and 2.0.
TEST(OpsResizeTest, GivenScalesPlaceTheSamples) {
  Tensor x(DType::f32, {1, 1, 4, 1});
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = static_cast<float>(i * 10);
  Tensor y = resize(x, {1, 2}, {.mode = "linear", .scales = {1.0, 0.6}});
  EXPECT_NEAR(y.data<float>()[0], 10.0f * (0.5 / 0.6 - 0.5), 1e-4);
  EXPECT_NEAR(y.data<float>()[1], 10.0f * (1.5 / 0.6 - 0.5), 1e-4);
}

TEST(OpsResizeTest, CropAndResizeExtrapolatesOutsideTheInput) {
  // One row 0 10 20 cropped from w = 0 to 1.5 * (3 - 1) = 3 in 4 samples: the last is past the
  // input and takes the extrapolation value.
  Tensor x = Tensor::from_vector<float>({1, 1, 3, 1}, {0, 10, 20});
  Tensor y = run_once(
      [](Graph& g, const std::vector<Output>& in) {
        return g.add("Resize", {in[0]},
                     {{"sizes", std::vector<int64_t>{1, 4}},
                      {"mode", std::string("linear")},
                      {"coordinate_transformation_mode", std::string("tf_crop_and_resize")},
                      {"roi", std::vector<double>{0, 0, 0, 1.5}},
                      {"extrapolation_value", 7.0}});
      },
      {x});
  EXPECT_EQ(testing::values<float>(y), (std::vector<float>{0, 10, 20, 7}));
}

// Resize is linear in x for every mode, so its gradient is exact up to rounding.
TEST(OpsResizeTest, GradientsMatchFiniteDifferences) {
  struct Case {
    Shape x;
    std::vector<int64_t> sizes;
    ops::ResizeOptions o;
  };
  const std::vector<Case> cases = {
      {{1, 2, 3, 2}, {4, 6}, {}},
      {{2, 5, 4, 1}, {2, 3}, {.nearest_mode = "ceil"}},
      {{1, 3, 3, 2}, {5, 7}, {.mode = "linear"}},
      {{1, 4, 5, 1}, {3, 2}, {.mode = "linear", .coordinate_transformation_mode = "align_corners"}},
      {{1, 3, 4, 1}, {6, 3}, {.mode = "linear", .scales = {2.0, 0.8}}},
      {{1, 4, 3, 2}, {7, 5}, {.mode = "cubic"}},
      {{1, 5, 4, 1}, {3, 6}, {.mode = "cubic", .exclude_outside = true}},
  };
  uint32_t seed = 200;
  for (const Case& c : cases) {
    SCOPED_TRACE("x " + shape_str(c.x) + ", mode " + c.o.mode);
    testing::expect_gradients_match(
        [&](Graph& g, const std::vector<Output>& in) {
          return ops::resize(g, in[0], c.sizes, c.o);
        },
        {testing::random_tensor(c.x, seed)}, seed + 1);
    seed += 2;
  }
  // Positions cropped past the input take the extrapolation value and pass nothing back.
  testing::expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) {
        return g.add("Resize", {in[0]},
                     {{"sizes", std::vector<int64_t>{3, 4}},
                      {"mode", std::string("linear")},
                      {"coordinate_transformation_mode", std::string("tf_crop_and_resize")},
                      {"roi", std::vector<double>{0.2, 0, 0.9, 1.5}},
                      {"extrapolation_value", 7.0}});
      },
      {testing::random_tensor({1, 3, 3, 2}, 220)}, 221);
}

TEST(OpsResizeTest, AttributeErrorsNameTheNode) {
  auto resize_error = [](Shape x, std::vector<int64_t> sizes, ops::ResizeOptions o) {
    return error_of(
        [&](Graph& g) { ops::resize(g, ops::placeholder(g, DType::f32, x), sizes, o, "rs"); });
  };
  EXPECT_EQ(resize_error({1, 2, 2, 1}, {4}, {}),
            "node 'rs' (Resize): sizes must be 2 positive ints [out_h, out_w], got [4]");
  EXPECT_EQ(resize_error({1, 2, 2, 1}, {4, 0}, {}),
            "node 'rs' (Resize): sizes must be 2 positive ints [out_h, out_w], got [4,0]");
  EXPECT_EQ(resize_error({2, 2, 1}, {4, 4}, {}),
            "node 'rs' (Resize): input 'x' must have rank 4, got [2,2,1]");
  EXPECT_EQ(resize_error({1, 2, 2, 1}, {4, 4}, {.mode = "lanczos"}),
            "node 'rs' (Resize): mode must be nearest, linear or cubic, got 'lanczos'");
  EXPECT_EQ(resize_error({1, 2, 2, 1}, {4, 4}, {.coordinate_transformation_mode = "tf_crop"}),
            "node 'rs' (Resize): coordinate_transformation_mode must be half_pixel, asymmetric, "
            "align_corners, pytorch_half_pixel, tf_half_pixel_for_nn or tf_crop_and_resize, got "
            "'tf_crop'");
  EXPECT_EQ(
      resize_error({1, 2, 2, 1}, {4, 4}, {.coordinate_transformation_mode = "tf_crop_and_resize"}),
      "node 'rs' (Resize): tf_crop_and_resize needs roi [h_start, w_start, h_end, w_end] (finite), "
      "got []");
  EXPECT_EQ(resize_error({1, 2, 2, 1}, {4, 4}, {.scales = {2.0, -1.0}}),
            "node 'rs' (Resize): scales must be empty or 2 positive numbers [scale_h, scale_w], "
            "got [2,-1]");
  EXPECT_EQ(resize_error({1, 2, 2, 1}, {4, 4}, {.nearest_mode = "round"}),
            "node 'rs' (Resize): nearest_mode must be round_prefer_floor, round_prefer_ceil, floor "
            "or ceil, got 'round'");
}

}  // namespace
}  // namespace sf
