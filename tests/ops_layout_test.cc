// Transpose, Pad, StridedSlice (ONNX Slice) and Gather: hand-checked values, shape errors and
// finite-difference gradients (StridedSliceGrad, GatherGrad, and their own gradients).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "autodiff/gradients.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::expect_gradients_match;
using testing::random_tensor;
using testing::run_once;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// 1..n in shape order.
Tensor iota(Shape shape) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  std::iota(v.begin(), v.end(), 1.0f);
  return Tensor::from_vector(std::move(shape), v);
}

using testing::values;

using testing::error_of;

Output f32(Graph& g, Shape shape) { return ops::placeholder(g, DType::f32, std::move(shape)); }

testing::BuildFn slice_of(std::vector<int64_t> starts, std::vector<int64_t> ends,
                          std::vector<int64_t> axes = {}, std::vector<int64_t> steps = {}) {
  return [=](Graph& g, const std::vector<Output>& in) {
    return ops::strided_slice(g, in[0], starts, ends, axes, steps);
  };
}

testing::BuildFn pad_of(std::vector<int64_t> pads, std::string mode, double value = 0.0) {
  return [=](Graph& g, const std::vector<Output>& in) {
    return ops::pad(g, in[0], pads, mode, value);
  };
}

// --- Transpose ---

TEST(OpsLayoutTest, TransposeMovesAxes) {
  Tensor x = iota({2, 3, 4});
  Tensor y = run_once(
      [](Graph& g, const std::vector<Output>& in) {
        return ops::transpose(g, in[0], {2, 0, 1});
      },
      {x});
  ASSERT_EQ(y.shape(), (Shape{4, 2, 3}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k)
        EXPECT_EQ(y.data<float>()[(k * 2 + i) * 3 + j], x.data<float>()[(i * 3 + j) * 4 + k]);
  // No perm reverses the axes, as in ONNX.
  Tensor r =
      run_once([](Graph& g, const std::vector<Output>& in) { return ops::transpose(g, in[0], {}); },
               {Tensor::from_vector<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<int32_t>(r), (std::vector<int32_t>{1, 4, 2, 5, 3, 6}));
}

TEST(OpsLayoutTest, TransposeRejectsBadPermutations) {
  EXPECT_EQ(error_of([](Graph& g) {
              ops::transpose(g, f32(g, {2, 3, 4}), {0, 0, 1}, "t");
            }),
            "node 't' (Transpose): x [2,3,4]: perm [0,0,1] is not a permutation of the 3 axes");
  EXPECT_EQ(error_of([](Graph& g) {
              ops::transpose(g, f32(g, {2, 3}), {1, 2}, "t");
            }),
            "node 't' (Transpose): x [2,3]: perm [1,2] is not a permutation of the 2 axes");
  EXPECT_EQ(error_of([](Graph& g) {
              ops::transpose(g, f32(g, {2, 3}), {0}, "t");
            }),
            "node 't' (Transpose): x [2,3]: perm [0] is not a permutation of the 2 axes");
}

TEST(OpsLayoutTest, TransposeGradient) {
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) {
        return ops::transpose(g, in[0], {1, 2, 0});
      },
      {random_tensor({2, 3, 4}, 1)}, 2);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::transpose(g, in[0], {}); },
      {random_tensor({3, 2}, 3)}, 4);
}

// --- Pad ---

TEST(OpsLayoutTest, PadModes) {
  // x = [[1,2,3],[4,5,6]]; one row before, two columns before and one after.
  Tensor x = iota({2, 3});
  const std::vector<int64_t> pads{1, 2, 0, 1};
  Tensor c = run_once(pad_of(pads, "constant", 9), {x});
  ASSERT_EQ(c.shape(), (Shape{3, 6}));
  EXPECT_EQ(values<float>(c), (std::vector<float>{9, 9, 9, 9, 9, 9,  //
                                                  9, 9, 1, 2, 3, 9,  //
                                                  9, 9, 4, 5, 6, 9}));
  // reflect mirrors about the edge element, like numpy.pad(mode="reflect").
  EXPECT_EQ(values<float>(run_once(pad_of(pads, "reflect"), {x})),
            (std::vector<float>{6, 5, 4, 5, 6, 5,  //
                                3, 2, 1, 2, 3, 2,  //
                                6, 5, 4, 5, 6, 5}));
  EXPECT_EQ(values<float>(run_once(pad_of(pads, "edge"), {x})),
            (std::vector<float>{1, 1, 1, 2, 3, 3,  //
                                1, 1, 1, 2, 3, 3,  //
                                4, 4, 4, 5, 6, 6}));
  // Integer tensors pad too, with the value converted.
  Tensor i = run_once(pad_of({1, 2}, "constant", 7), {Tensor::from_vector<int64_t>({2}, {1, 2})});
  EXPECT_EQ(values<int64_t>(i), (std::vector<int64_t>{7, 1, 2, 7, 7}));
}

TEST(OpsLayoutTest, PadErrors) {
  EXPECT_EQ(error_of([](Graph& g) {
              ops::pad(g, f32(g, {2, 3}), {1, 1}, "constant", 0, "p");
            }),
            "node 'p' (Pad): pads [1,1] must have 2 * rank = 4 entries (all begins, then all "
            "ends) for x [2,3]");
  EXPECT_EQ(error_of([](Graph& g) {
              ops::pad(g, f32(g, {2, 3}), {0, -1, 0, 0}, "constant", 0, "p");
            }),
            "node 'p' (Pad): pads [0,-1,0,0] must be non-negative");
  EXPECT_EQ(error_of([](Graph& g) {
              ops::pad(g, f32(g, {2, 3}), {0, 3, 0, 0}, "reflect", 0, "p");
            }),
            "node 'p' (Pad): reflect pads [0,3,0,0] must be smaller than axis 1 of x [2,3]");
  EXPECT_EQ(error_of([](Graph& g) {
              ops::pad(g, f32(g, {2}), {1, 1}, "wrap", 0, "p");
            }),
            "node 'p' (Pad): mode must be constant, reflect or edge, got 'wrap'");
}

TEST(OpsLayoutTest, PadGradient) {
  expect_gradients_match(pad_of({1, 0, 2, 0, 3, 1}, "constant", 0.5), {random_tensor({2, 3, 2}, 5)},
                         6);
  expect_gradients_match(pad_of({0, 0}, "constant"), {random_tensor({3}, 7)}, 8);
  // Reflect and edge padding have no gradient; asking for one is an error, not a wrong zero.
  Graph g;
  Output x = f32(g, {4});
  Output loss = ops::reduce_sum(g, ops::pad(g, x, {1, 1}, "reflect", 0, "p"), {});
  try {
    gradients(g, loss, {x});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "node 'p' (Pad): no gradient for mode 'reflect' (only constant)");
  }
}

// --- StridedSlice (ONNX Slice) ---

TEST(OpsLayoutTest, StridedSliceFollowsOnnxSemantics) {
  Tensor x = iota({3, 4});  // [[1..4],[5..8],[9..12]]
  Tensor a = run_once(slice_of({0, 1}, {2, 3}), {x});
  ASSERT_EQ(a.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(a), (std::vector<float>{2, 3, 6, 7}));
  // Reversal: start -1, end "before the beginning", step -1.
  EXPECT_EQ(values<float>(run_once(slice_of({-1}, {kMin}, {1}, {-1}), {x})),
            (std::vector<float>{4, 3, 2, 1, 8, 7, 6, 5, 12, 11, 10, 9}));
  // Ends past the axis clamp; a negative axis counts from the end.
  EXPECT_EQ(values<float>(run_once(slice_of({0}, {100}, {-1}, {3}), {x})),
            (std::vector<float>{1, 4, 5, 8, 9, 12}));
  // A negative step from a start past the end clamps it to the last element.
  Tensor d = run_once(slice_of({10}, {0}, {0}, {-2}), {x});
  ASSERT_EQ(d.shape(), (Shape{1, 4}));
  EXPECT_EQ(values<float>(d), (std::vector<float>{9, 10, 11, 12}));
  Tensor e = run_once(slice_of({-2, 3}, {kMax, -5}, {0, 1}, {1, -2}), {x});
  ASSERT_EQ(e.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(e), (std::vector<float>{8, 6, 12, 10}));
  // An empty range is a zero-length axis, not an error.
  EXPECT_EQ(run_once(slice_of({2}, {1}, {0}), {x}).shape(), (Shape{0, 4}));
  Tensor i = run_once(slice_of({1}, {kMax}, {}, {2}),
                      {Tensor::from_vector<int32_t>({5}, {10, 11, 12, 13, 14})});
  EXPECT_EQ(values<int32_t>(i), (std::vector<int32_t>{11, 13}));
}

TEST(OpsLayoutTest, StridedSliceErrors) {
  auto slice_error = [](std::vector<int64_t> starts, std::vector<int64_t> ends,
                        std::vector<int64_t> axes, std::vector<int64_t> steps) {
    return error_of([&](Graph& g) {
      ops::strided_slice(g, f32(g, {3, 4}), starts, ends, axes, steps, "s");
    });
  };
  EXPECT_EQ(slice_error({0}, {1}, {0}, {0}),
            "node 's' (StridedSlice): x [3,4]: step for axis 0 is 0");
  EXPECT_EQ(slice_error({0, 0}, {1, 1}, {1, -1}, {}),
            "node 's' (StridedSlice): x [3,4]: axis 1 is listed twice");
  EXPECT_EQ(slice_error({0}, {1}, {2}, {}),
            "node 's' (StridedSlice): x [3,4]: axis 2 is out of range for rank 2");
  EXPECT_EQ(slice_error({0, 0}, {1}, {}, {}),
            "node 's' (StridedSlice): x [3,4]: starts [0,0], ends [1], axes [] and steps [] must "
            "have equal lengths");
}

// dx of loss = sum(y * weights) for y = build(x): weights scattered back to x's positions.
Tensor weighted_gradient(const std::function<Output(Graph&, Output)>& build, const Shape& x_shape,
                         const Tensor& x, const Tensor& weights) {
  Graph g;
  Output xp = f32(g, x_shape);
  Output y = build(g, xp);
  std::vector<int64_t> axes(g.type(y).shape.size());
  std::iota(axes.begin(), axes.end(), 0);
  Output loss = ops::reduce_sum(g, ops::mul(g, y, ops::constant(g, weights)), axes);
  Output dx = gradients(g, loss, {xp})[0];
  Session session(g);
  return session.run({{xp, x}}, {dx})[0].clone();
}

TEST(OpsLayoutTest, StridedSliceGradientScattersIntoZeros) {
  // x [3,4]; every row reversed (negative step, end clamped to "before 0"), then every second
  // column of the reversal: y[r] = x[r][3], x[r][1].
  auto slice = [](Graph& g, Output x) {
    return ops::strided_slice(g, x, {-1, 0}, {kMin, kMax}, {1, 0}, {-2, 1});
  };
  Tensor dx = weighted_gradient(slice, {3, 4}, iota({3, 4}), iota({3, 2}));
  ASSERT_EQ(dx.shape(), (Shape{3, 4}));
  EXPECT_EQ(values<float>(dx), (std::vector<float>{0, 2, 0, 1,  //
                                                   0, 4, 0, 3,  //
                                                   0, 6, 0, 5}));
  // An empty slice passes back zeros of x's shape.
  Tensor empty =
      weighted_gradient([](Graph& g, Output x) { return ops::strided_slice(g, x, {2}, {1}, {0}); },
                        {3, 2}, iota({3, 2}), Tensor(DType::f32, {0, 2}));
  EXPECT_EQ(values<float>(empty), std::vector<float>(6, 0.0f));
}

TEST(OpsLayoutTest, StridedSliceGradient) {
  // Negative steps, ends and starts clamped past either end, a negative axis.
  expect_gradients_match(slice_of({-1}, {kMin}, {1}, {-1}), {random_tensor({3, 4}, 31)}, 32);
  expect_gradients_match(slice_of({-2, 3}, {kMax, -5}, {0, 1}, {1, -2}),
                         {random_tensor({3, 4}, 33)}, 34);
  expect_gradients_match(slice_of({10}, {0}, {0}, {-2}), {random_tensor({3, 4}, 35)}, 36);
  expect_gradients_match(slice_of({-100, 1}, {100, kMax}, {}, {1, 3}),
                         {random_tensor({4, 7, 2}, 37)}, 38);
  expect_gradients_match(slice_of({1}, {-1}, {-1}, {}), {random_tensor({2, 3, 5}, 39)}, 40);
  // Random shapes and ranges, any of them out of bounds or backwards.
  std::mt19937 rng(41);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 12; ++round) {
    Shape shape;
    for (int64_t d = pick(1, 4); d > 0; --d) shape.push_back(pick(1, 5));
    const int64_t rank = static_cast<int64_t>(shape.size());
    std::vector<int64_t> axes(static_cast<size_t>(rank));
    std::iota(axes.begin(), axes.end(), 0);
    std::shuffle(axes.begin(), axes.end(), rng);
    axes.resize(static_cast<size_t>(pick(1, rank)));
    std::vector<int64_t> starts, ends, steps;
    for (int64_t axis : axes) {
      const int64_t dim = shape[static_cast<size_t>(axis)];
      int64_t step = pick(1, 3) * (pick(0, 1) ? 1 : -1);
      starts.push_back(pick(-dim - 2, dim + 2));
      ends.push_back(pick(-dim - 2, dim + 2));
      steps.push_back(step);
    }
    // Some axes counted from the end.
    for (int64_t& axis : axes)
      if (pick(0, 1)) axis -= rank;
    SCOPED_TRACE(fmt::format("x {}, starts [{}], ends [{}], axes [{}], steps [{}]",
                             shape_str(shape), fmt::join(starts, ","), fmt::join(ends, ","),
                             fmt::join(axes, ","), fmt::join(steps, ",")));
    expect_gradients_match(slice_of(starts, ends, axes, steps),
                           {random_tensor(shape, 50 + static_cast<uint32_t>(round))},
                           70 + static_cast<uint32_t>(round));
  }
  // StridedSliceGrad is linear; its own gradient is the slice again (second derivatives). x
  // gives its shape only (a constant here: no gradient flows to it).
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) {
        return g.add(op_names::kStridedSliceGrad,
                     {in[0], ops::constant(g, random_tensor({3, 4}, 91))},
                     {{"starts", std::vector<int64_t>{-1}},
                      {"ends", std::vector<int64_t>{kMin}},
                      {"axes", std::vector<int64_t>{1}},
                      {"steps", std::vector<int64_t>{-2}}});
      },
      {random_tensor({3, 2}, 90)}, 92);
}

// The gradient reads x's shape when it runs, so a new input shape re-infers it correctly.
TEST(OpsLayoutTest, StridedSliceGradientFollowsNewShapes) {
  Graph g;
  Output x = f32(g, {2, 6});
  Output loss = ops::reduce_sum(g, ops::strided_slice(g, x, {-1}, {kMin}, {1}, {-2}), {0, 1});
  Output dx = gradients(g, loss, {x})[0];
  Session session(g);
  Tensor grad = session.run({{x, random_tensor({3, 5}, 1)}}, {dx})[0];
  ASSERT_EQ(grad.shape(), (Shape{3, 5}));
  const std::vector<float> row{1, 0, 1, 0, 1};
  std::vector<float> want;
  for (int r = 0; r < 3; ++r) want.insert(want.end(), row.begin(), row.end());
  EXPECT_EQ(values<float>(grad), want);
}

TEST(OpsLayoutTest, StridedSliceGradErrorsNameTheNode) {
  EXPECT_EQ(error_of([](Graph& g) {
              g.add(op_names::kStridedSliceGrad, {f32(g, {2, 2}), f32(g, {3, 4})},
                    {{"starts", std::vector<int64_t>{0}}, {"ends", std::vector<int64_t>{1}}}, "sg");
            }),
            "node 'sg' (StridedSliceGrad): dy [2,2] does not match the slice [1,4] of x [3,4]");
}

// --- Gather ---

TEST(OpsLayoutTest, GatherAlongAxes) {
  Tensor x = iota({3, 2});  // [[1,2],[3,4],[5,6]]
  auto gather_on = [](int64_t axis) {
    return [axis](Graph& g, const std::vector<Output>& in) {
      return ops::gather(g, in[0], in[1], axis);
    };
  };
  Tensor rows = run_once(gather_on(0), {x, Tensor::from_vector<int64_t>({2, 2}, {0, 2, -1, 1})});
  ASSERT_EQ(rows.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values<float>(rows), (std::vector<float>{1, 2, 5, 6, 5, 6, 3, 4}));
  Tensor cols = run_once(gather_on(-1), {x, Tensor::from_vector<int32_t>({1}, {1})});
  ASSERT_EQ(cols.shape(), (Shape{3, 1}));
  EXPECT_EQ(values<float>(cols), (std::vector<float>{2, 4, 6}));
  // A scalar index drops the axis.
  Tensor one = run_once(gather_on(0), {x, Tensor::from_vector<int32_t>({}, {2})});
  ASSERT_EQ(one.shape(), (Shape{2}));
  EXPECT_EQ(values<float>(one), (std::vector<float>{5, 6}));
}

TEST(OpsLayoutTest, GatherErrors) {
  EXPECT_EQ(error_of([](Graph& g) {
              ops::gather(g, f32(g, {3, 2}), f32(g, {2}), 0, "gt");
            }),
            "node 'gt' (Gather): input 'indices' must be i32 or i64, got f32");
  EXPECT_EQ(error_of([](Graph& g) {
              ops::gather(g, f32(g, {3, 2}), ops::placeholder(g, DType::i32, {2}), 2, "gt");
            }),
            "node 'gt' (Gather): axis 2 is out of range for x [3,2]");
  // Index values are data, checked when the kernel runs.
  try {
    run_once([](Graph& g,
                const std::vector<Output>& in) { return ops::gather(g, in[0], in[1], 0, "gt"); },
             {iota({3, 2}), Tensor::from_vector<int64_t>({2}, {0, 3})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "node 'gt' (Gather): index 3 is out of range for axis 0 of x [3,2]");
  }
  EXPECT_EQ(error_of([](Graph& g) {
              g.add(op_names::kGatherGrad,
                    {f32(g, {2, 2}), f32(g, {3, 2}), ops::placeholder(g, DType::i32, {3})},
                    {{"axis", int64_t{0}}}, "gg");
            }),
            "node 'gg' (GatherGrad): dy [2,2] does not match the gather [3,2] from x [3,2]");
}

testing::BuildFn gather_on(int64_t axis) {
  return [axis](Graph& g, const std::vector<Output>& in) {
    return ops::gather(g, in[0], in[1], axis);
  };
}

TEST(OpsLayoutTest, GatherGradientAddsRepeatedIndices) {
  // Rows 0, 0 and -1 (= 2) of x [3,2]: row 0 receives two rows of the weights.
  Tensor indices = Tensor::from_vector<int64_t>({3}, {0, 0, -1});
  Tensor dx = weighted_gradient(
      [&](Graph& g, Output x) { return ops::gather(g, x, ops::constant(g, indices), 0); }, {3, 2},
      iota({3, 2}), iota({3, 2}));
  EXPECT_EQ(values<float>(dx), (std::vector<float>{4, 6, 0, 0, 5, 6}));
}

TEST(OpsLayoutTest, GatherGradient) {
  const Tensor repeated = Tensor::from_vector<int64_t>({2, 3}, {0, 2, -1, 2, 0, 0});
  expect_gradients_match(gather_on(0), {random_tensor({4, 3}, 1), repeated}, 2);
  expect_gradients_match(gather_on(1), {random_tensor({2, 3, 2}, 3), repeated}, 4);
  expect_gradients_match(
      gather_on(-1),
      {random_tensor({2, 3, 4}, 5), Tensor::from_vector<int32_t>({4}, {3, -4, 3, 1})}, 6);
  // A scalar index drops the axis.
  expect_gradients_match(gather_on(1),
                         {random_tensor({2, 5}, 7), Tensor::from_vector<int32_t>({}, {-2})}, 8);
  // Random shapes, axes and indices (repeats likely).
  std::mt19937 rng(9);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 8; ++round) {
    Shape shape;
    for (int64_t d = pick(1, 3); d > 0; --d) shape.push_back(pick(1, 4));
    const int64_t rank = static_cast<int64_t>(shape.size());
    const int64_t axis = pick(-rank, rank - 1);
    const int64_t n = shape[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
    Shape index_shape;
    for (int64_t d = pick(0, 2); d > 0; --d) index_shape.push_back(pick(1, 3));
    std::vector<int64_t> index_values(static_cast<size_t>(num_elements(index_shape)));
    for (int64_t& v : index_values) v = pick(-n, n - 1);
    SCOPED_TRACE(fmt::format("x {}, axis {}, indices {} [{}]", shape_str(shape), axis,
                             shape_str(index_shape), fmt::join(index_values, ",")));
    expect_gradients_match(gather_on(axis),
                           {random_tensor(shape, 20 + static_cast<uint32_t>(round)),
                            Tensor::from_vector<int64_t>(index_shape, index_values)},
                           40 + static_cast<uint32_t>(round));
  }
  // GatherGrad is linear in dy; its own gradient gathers again. x gives its shape only (a
  // constant here: no gradient flows to it).
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) {
        return g.add(op_names::kGatherGrad,
                     {in[0], ops::constant(g, random_tensor({2, 4}, 61)), in[1]},
                     {{"axis", int64_t{1}}});
      },
      {random_tensor({2, 3}, 60), Tensor::from_vector<int32_t>({3}, {1, 1, -1})}, 62);
}

}  // namespace
}  // namespace sf
