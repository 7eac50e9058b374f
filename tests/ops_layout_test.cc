// Transpose, Pad, StridedSlice (ONNX Slice) and Gather: hand-checked values, shape errors and
// finite-difference gradients where the op has one.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "autodiff/gradients.h"
#include "ops/ops.h"
#include "support/testing.h"

namespace sf {
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

std::string error_of(const std::function<void(Graph&)>& build) {
  Graph g;
  try {
    build(g);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

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
}

}  // namespace
}  // namespace sf
