// Maximum, Minimum, ReduceMax, ReduceMin and Round: values on random shapes (broadcasting,
// empty and size-1 dimensions) against loops written here, NaN and tie behaviour, gradients by
// finite differences, and shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>

#include "autodiff/gradients.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::expect_gradients_match;
using testing::run_once;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using testing::values;

using BinaryFn = Output (*)(Graph&, Output, Output, const std::string&);

testing::BuildFn binary(BinaryFn fn) {
  return [fn](Graph& g, const std::vector<Output>& in) { return fn(g, in[0], in[1], ""); };
}

using ReduceFn = Output (*)(Graph&, Output, std::vector<int64_t>, bool, const std::string&);

testing::BuildFn reduction(ReduceFn fn, std::vector<int64_t> axes, bool keep_dims) {
  return [fn, axes, keep_dims](Graph& g, const std::vector<Output>& in) {
    return fn(g, in[0], axes, keep_dims, "");
  };
}

// The row-major index of each dimension of element `flat` of `shape`.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

// The element of `in` (right-aligned, size-1 dimensions stretched) read for output index `at`.
int64_t broadcast_source(const std::vector<int64_t>& at, const Shape& in) {
  const size_t lead = at.size() - in.size();
  int64_t flat = 0;
  for (size_t d = 0; d < in.size(); ++d) flat = flat * in[d] + (in[d] == 1 ? 0 : at[lead + d]);
  return flat;
}

// A shape of rank 0..4 with dimensions 0..3, zero rarely.
Shape random_shape(std::mt19937& rng) {
  Shape s(static_cast<size_t>(std::uniform_int_distribution<int>(0, 4)(rng)));
  for (int64_t& d : s)
    d = std::uniform_int_distribution<int>(0, 12)(rng) == 0 ? 0
                                                            : static_cast<int64_t>(1 + rng() % 3);
  return s;
}

template <typename T>
Tensor random_values(const Shape& shape, DType dtype, std::mt19937& rng) {
  Tensor t(dtype, shape);
  std::uniform_int_distribution<int> dist(-1000, 1000);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<T>()[i] = static_cast<T>(dist(rng)) / static_cast<T>(std::is_integral_v<T> ? 1 : 7);
  return t;
}

// NumPy's broadcast of two shapes, written out here rather than taken from ops/broadcast.h.
Shape numpy_broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 1; i <= out.size(); ++i) {
    const int64_t da = i <= a.size() ? a[a.size() - i] : 1,
                  db = i <= b.size() ? b[b.size() - i] : 1;
    out[out.size() - i] = da == 1 ? db : da;
  }
  return out;
}

// Values k / 10 + offset for random integers k: two tensors with different offsets (0.05 apart
// modulo 0.1) never tie, nor come within a finite-difference step of each other.
Tensor grid_tensor(const Shape& shape, uint32_t seed, float offset) {
  Tensor t(DType::f32, shape);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> k(-20, 20);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = static_cast<float>(k(rng)) / 10 + offset;
  return t;
}

// Distinct values 0.1 apart in random order: no ties within any reduction.
Tensor distinct_tensor(const Shape& shape, uint32_t seed) {
  Tensor t(DType::f32, shape);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) / 10 - 1;
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

template <typename T>
void expect_binary_matches_loops(DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    // Each input keeps a suffix of the output's dimensions, some of them set to 1.
    const Shape out = random_shape(rng);
    Shape sa(out.begin() + static_cast<int64_t>(rng() % (out.size() + 1)), out.end());
    Shape sb(out.begin() + static_cast<int64_t>(rng() % (out.size() + 1)), out.end());
    for (int64_t& d : sa) d = rng() % 3 == 0 ? 1 : d;
    for (int64_t& d : sb) d = rng() % 3 == 0 ? 1 : d;
    SCOPED_TRACE(shape_str(sa) + " vs " + shape_str(sb));
    const Tensor a = random_values<T>(sa, dtype, rng), b = random_values<T>(sb, dtype, rng);
    const Tensor hi = run_once(binary(ops::maximum), {a, b});
    const Tensor lo = run_once(binary(ops::minimum), {a, b});
    ASSERT_EQ(hi.dtype(), dtype);
    ASSERT_EQ(hi.shape(), numpy_broadcast(sa, sb));
    ASSERT_EQ(lo.shape(), hi.shape());
    for (int64_t o = 0; o < hi.numel(); ++o) {
      const std::vector<int64_t> at = unravel(o, hi.shape());
      const T x = a.data<T>()[broadcast_source(at, sa)], y = b.data<T>()[broadcast_source(at, sb)];
      EXPECT_EQ(hi.data<T>()[o], std::max(x, y)) << "element " << o;
      EXPECT_EQ(lo.data<T>()[o], std::min(x, y)) << "element " << o;
    }
  }
}

TEST(OpsExtremumTest, MaximumMinimumBroadcastOnRandomShapes) {
  expect_binary_matches_loops<float>(DType::f32, 1);
  expect_binary_matches_loops<int32_t>(DType::i32, 2);
  expect_binary_matches_loops<int64_t>(DType::i64, 3);
}

TEST(OpsExtremumTest, MaximumMinimumValuesAndEmptyShapes) {
  Tensor a = Tensor::from_vector<float>({2, 3}, {1, 5, -3, 4, 0, 6});
  Tensor col = Tensor::from_vector<float>({2, 1}, {2, 4});
  EXPECT_EQ(values<float>(run_once(binary(ops::maximum), {a, col})),
            (std::vector<float>{2, 5, 2, 4, 4, 6}));
  EXPECT_EQ(values<float>(run_once(binary(ops::minimum), {col, a})),
            (std::vector<float>{1, 2, -3, 4, 0, 4}));
  Tensor empty(DType::f32, {0, 3});
  Tensor row = Tensor::from_vector<float>({3}, {1, 2, 3});
  EXPECT_EQ(run_once(binary(ops::maximum), {empty, row}).shape(), (Shape{0, 3}));
  EXPECT_EQ(run_once(binary(ops::minimum), {Tensor::scalar_f32(1), empty}).shape(), (Shape{0, 3}));
}

// NaN propagates from either side (NumPy's maximum/minimum, ONNX Max/Min).
TEST(OpsExtremumTest, MaximumMinimumPropagateNaN) {
  Tensor a = Tensor::from_vector<float>({3}, {kNaN, 1, kNaN});
  Tensor b = Tensor::from_vector<float>({3}, {1, kNaN, kNaN});
  for (BinaryFn fn : {&ops::maximum, &ops::minimum})
    for (float v : values<float>(run_once(binary(fn), {a, b}))) EXPECT_TRUE(std::isnan(v));
  Tensor inf = Tensor::from_vector<float>({2}, {-kInf, kInf});
  EXPECT_EQ(values<float>(run_once(binary(ops::maximum), {inf, Tensor::scalar_f32(0)})),
            (std::vector<float>{0, kInf}));
}

TEST(OpsExtremumTest, ReductionsMatchLoopsOnRandomShapes) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const Shape shape = random_shape(rng);
    std::vector<int64_t> axes;  // empty: all axes
    const int64_t rank = static_cast<int64_t>(shape.size());
    for (int64_t d = 0; d < rank; ++d)
      if (rng() % 2) axes.push_back(rng() % 2 ? d : d - rank);  // negative counts from the end
    const bool keep = rng() % 2;
    SCOPED_TRACE(shape_str(shape) + " axes " + shape_str(axes) + (keep ? " keep_dims" : ""));
    const Tensor x = random_values<float>(shape, DType::f32, rng);
    const Tensor hi = run_once(reduction(ops::reduce_max, axes, keep), {x});
    const Tensor lo = run_once(reduction(ops::reduce_min, axes, keep), {x});
    std::vector<bool> reduced(shape.size(), axes.empty());
    for (int64_t a : axes) reduced[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
    Shape kept = shape, want;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (reduced[d]) kept[d] = 1;
      if (!reduced[d] || keep) want.push_back(kept[d]);
    }
    ASSERT_EQ(hi.shape(), want);
    ASSERT_EQ(lo.shape(), want);
    // An empty reduction gives -inf for the max and +inf for the min.
    std::vector<float> max_want(static_cast<size_t>(hi.numel()), -kInf);
    std::vector<float> min_want(static_cast<size_t>(hi.numel()), kInf);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const size_t o = static_cast<size_t>(broadcast_source(unravel(i, shape), kept));
      max_want[o] = std::max(max_want[o], x.data<float>()[i]);
      min_want[o] = std::min(min_want[o], x.data<float>()[i]);
    }
    EXPECT_EQ(values<float>(hi), max_want);
    EXPECT_EQ(values<float>(lo), min_want);
  }
}

TEST(OpsExtremumTest, ReductionValuesNaNAndEmptyAxes) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, 7, 3, -4, -5, -6});
  EXPECT_EQ(values<float>(run_once(reduction(ops::reduce_max, {1}, false), {x})),
            (std::vector<float>{7, -4}));
  Tensor cols = run_once(reduction(ops::reduce_min, {0}, true), {x});
  EXPECT_EQ(cols.shape(), (Shape{1, 3}));
  EXPECT_EQ(values<float>(cols), (std::vector<float>{-4, -5, -6}));
  Tensor all = run_once(reduction(ops::reduce_max, {}, false), {x});
  EXPECT_EQ(all.shape(), Shape{});
  EXPECT_EQ(values<float>(all), (std::vector<float>{7}));
  // A NaN element makes its reduction NaN, wherever it is; other rows are unaffected.
  Tensor with_nan = Tensor::from_vector<float>({2, 3}, {kNaN, 1, 2, 3, 4, 5});
  for (ReduceFn fn : {&ops::reduce_max, &ops::reduce_min}) {
    std::vector<float> y = values<float>(run_once(reduction(fn, {1}, false), {with_nan}));
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_FALSE(std::isnan(y[1]));
  }
  Tensor nan_last = Tensor::from_vector<float>({3}, {1, 2, kNaN});
  EXPECT_TRUE(
      std::isnan(values<float>(run_once(reduction(ops::reduce_min, {}, false), {nan_last}))[0]));
  Tensor empty(DType::f32, {2, 0});
  EXPECT_EQ(values<float>(run_once(reduction(ops::reduce_max, {1}, false), {empty})),
            (std::vector<float>{-kInf, -kInf}));
  EXPECT_EQ(values<float>(run_once(reduction(ops::reduce_min, {1}, true), {empty})),
            (std::vector<float>{kInf, kInf}));
  EXPECT_EQ(run_once(reduction(ops::reduce_min, {0}, false), {empty}).shape(), (Shape{0}));
}

TEST(OpsExtremumTest, RoundHalfToEven) {
  Tensor x = Tensor::from_vector<float>(
      {12}, {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 0.49f, 0.51f, -1.7f, 1e8f, kInf, -kInf});
  auto round = [](Graph& g, const std::vector<Output>& in) { return ops::round(g, in[0]); };
  std::vector<float> y = values<float>(run_once(round, {x}));
  EXPECT_EQ(y, (std::vector<float>{-2, -2, -0.0f, 0, 2, 2, 0, 1, -2, 1e8f, kInf, -kInf}));
  EXPECT_TRUE(std::signbit(y[2]));
  EXPECT_TRUE(std::isnan(values<float>(run_once(round, {Tensor::scalar_f32(kNaN)}))[0]));
  EXPECT_EQ(run_once(round, {Tensor(DType::f32, {0, 2})}).shape(), (Shape{0, 2}));
}

TEST(OpsExtremumTest, MaximumMinimumGradientsWithBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{3}, {2, 3}},   {{2, 1, 4}, {3, 1}},
      {{2, 3}, {}},     {{}, {2, 3}},  {{1, 3}, {2, 1}}};
  uint32_t seed = 100;
  for (const auto& [sa, sb] : cases) {
    SCOPED_TRACE(shape_str(sa) + " op " + shape_str(sb));
    Tensor a = grid_tensor(sa, seed++, 0.05f);
    Tensor b = grid_tensor(sb, seed++, 0.0f);
    expect_gradients_match(binary(ops::maximum), {a, b}, seed++);
    expect_gradients_match(binary(ops::minimum), {a, b}, seed++);
  }
}

TEST(OpsExtremumTest, ReductionGradients) {
  const std::vector<std::pair<std::vector<int64_t>, bool>> cases = {
      {{}, false}, {{1}, true}, {{1}, false}, {{0, 2}, false}, {{-1}, true}};
  uint32_t seed = 300;
  for (const Shape& shape : {Shape{2, 3, 2}, Shape{1, 4, 1}}) {
    Tensor x = distinct_tensor(shape, seed++);
    for (const auto& [axes, keep] : cases) {
      SCOPED_TRACE(shape_str(shape) + " axes " + shape_str(axes) + (keep ? " keep_dims" : ""));
      expect_gradients_match(reduction(ops::reduce_max, axes, keep), {x}, seed++);
      expect_gradients_match(reduction(ops::reduce_min, axes, keep), {x}, seed++);
    }
  }
}

// d sum(f(inputs)) / d inputs, evaluated at `values`.
std::vector<std::vector<float>> gradients_of_sum(const testing::BuildFn& f,
                                                 const std::vector<Tensor>& inputs) {
  Graph g;
  std::vector<Output> in;
  Feeds feeds;
  for (const Tensor& v : inputs) {
    in.push_back(ops::placeholder(g, DType::f32, v.shape()));
    feeds.emplace_back(in.back(), v);
  }
  Output loss = ops::reduce_sum(g, f(g, in), {});
  std::vector<Output> grads = gradients(g, loss, in);
  Session session(g);  // after the gradient nodes: a session plans the graph as it is
  std::vector<std::vector<float>> out;
  for (const Tensor& t : session.run(feeds, grads)) out.push_back(values<float>(t));
  return out;
}

TEST(OpsExtremumTest, TiesGoToTheFirstInputOfMaximumAndMinimum) {
  Tensor a = Tensor::from_vector<float>({3}, {1, 2, 3});
  Tensor b = Tensor::from_vector<float>({3}, {1, 5, 0});
  auto hi = gradients_of_sum(
      [](Graph& g, const std::vector<Output>& in) { return ops::maximum(g, in[0], in[1]); },
      {a, b});
  EXPECT_EQ(hi[0], (std::vector<float>{1, 0, 1}));
  EXPECT_EQ(hi[1], (std::vector<float>{0, 1, 0}));
  auto lo = gradients_of_sum(
      [](Graph& g, const std::vector<Output>& in) { return ops::minimum(g, in[0], in[1]); },
      {a, b});
  EXPECT_EQ(lo[0], (std::vector<float>{1, 1, 0}));
  EXPECT_EQ(lo[1], (std::vector<float>{0, 0, 1}));
  // A broadcast b collects the gradient of every element it wins.
  auto bcast = gradients_of_sum(
      [](Graph& g, const std::vector<Output>& in) { return ops::maximum(g, in[0], in[1]); },
      {a, Tensor::scalar_f32(2)});
  EXPECT_EQ(bcast[0], (std::vector<float>{0, 1, 1}));
  EXPECT_EQ(bcast[1], (std::vector<float>{1}));
}

TEST(OpsExtremumTest, ReductionTiesShareTheGradient) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, 3, 3, 2, 2, 2});
  auto hi = gradients_of_sum(
      [](Graph& g, const std::vector<Output>& in) { return ops::reduce_max(g, in[0], {1}); }, {x});
  EXPECT_EQ(hi[0], (std::vector<float>{0, 0.5f, 0.5f, 1.0f / 3, 1.0f / 3, 1.0f / 3}));
  auto lo = gradients_of_sum(
      [](Graph& g, const std::vector<Output>& in) { return ops::reduce_min(g, in[0], {0}, true); },
      {x});
  EXPECT_EQ(lo[0], (std::vector<float>{1, 0, 0, 0, 1, 1}));
  // The NaN that made the result NaN gets its gradient.
  auto nan = gradients_of_sum(
      [](Graph& g, const std::vector<Output>& in) { return ops::reduce_max(g, in[0], {}); },
      {Tensor::from_vector<float>({3}, {1, kNaN, 2})});
  EXPECT_EQ(nan[0], (std::vector<float>{0, 1, 0}));
}

using testing::expect_error;

TEST(OpsExtremumTest, ErrorsNameTheNode) {
  Graph g;
  Output a = ops::placeholder(g, DType::f32, {2, 3}, "a");
  Output b = ops::placeholder(g, DType::f32, {4}, "b");
  Output i = ops::placeholder(g, DType::i32, {2, 3}, "i");
  expect_error([&] { ops::maximum(g, a, b, "mx"); },
               "node 'mx' (Maximum): shapes do not broadcast: a [2,3] vs b [4]");
  expect_error([&] { ops::minimum(g, a, i, "mn"); },
               "node 'mn' (Minimum): dtypes differ: a f32[2,3] vs b i32[2,3]");
  expect_error([&] { ops::reduce_max(g, a, {2}, false, "r"); },
               "node 'r' (ReduceMax): axes [2] are out of range or repeated for rank 2 input "
               "[2,3]");
  expect_error([&] { ops::reduce_min(g, i, {0}, false, "ri"); }, "node 'ri' (ReduceMin)");
  expect_error([&] { ops::round(g, i, "rd"); }, "node 'rd' (Round)");
  // Round is not differentiable: a gradient through it is an error, not a silent zero.
  Output loss = ops::reduce_sum(g, ops::round(g, a, "round"), {});
  expect_error([&] { gradients(g, loss, {a}); }, "node 'round' (Round): op has no gradient");
}

}  // namespace
}  // namespace sf
