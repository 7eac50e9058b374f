#include <gtest/gtest.h>

#include <string>

#include "autodiff/gradients.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::expect_gradients_match;
using testing::random_tensor;
using testing::run_once;

using testing::expect_error;

using testing::values;

TEST(OpsArrayTest, IdentityCopiesEveryDtype) {
  Tensor x = Tensor::from_vector<int64_t>({3}, {1, -2, 3});
  Tensor y = run_once(
      [](Graph& g, const std::vector<Output>& in) { return ops::identity(g, in[0]); }, {x});
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{1, -2, 3}));
}

TEST(OpsArrayTest, ReshapeInfersMinusOne) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor y = run_once(
      [](Graph& g, const std::vector<Output>& in) {
        return ops::reshape(g, in[0], {3, -1});
      },
      {x});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(y), values<float>(x));
}

TEST(OpsArrayTest, ReshapeErrorsNameNodeAndShapes) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2, 3}, "x");
  expect_error(
      [&] {
        ops::reshape(g, x, {4, 2}, "r");
      },
      "node 'r' (Reshape): cannot reshape [2,3] (6 elements) to [4,2] (8 elements)");
  expect_error([&] { ops::reshape(g, x, {-1, -1}, "r2"); }, "node 'r2' (Reshape): shape [-1,-1]");
  expect_error([&] { ops::reshape(g, x, {4, -1}, "r3"); }, "cannot reshape [2,3] (6 elements)");
}

TEST(OpsArrayTest, FlattenShapes) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2, 3, 4}, "x");
  EXPECT_EQ(g.type(ops::flatten(g, x)).shape, (Shape{2, 12}));
  EXPECT_EQ(g.type(ops::flatten(g, x, 2)).shape, (Shape{6, 4}));
  EXPECT_EQ(g.type(ops::flatten(g, x, 0)).shape, (Shape{1, 24}));
  EXPECT_EQ(g.type(ops::flatten(g, x, 3)).shape, (Shape{24, 1}));
  EXPECT_EQ(g.type(ops::flatten(g, x, -1)).shape, (Shape{6, 4}));
  expect_error([&] { ops::flatten(g, x, 4, "f"); },
               "node 'f' (Flatten): axis 4 is out of range for input [2,3,4]");
}

TEST(OpsArrayTest, ConcatValuesOnEachAxis) {
  Tensor a = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::from_vector<float>({2, 1}, {5, 6});
  Tensor c = Tensor::from_vector<float>({1, 2}, {7, 8});
  auto concat_on = [](int64_t axis) {
    return [axis](Graph& g, const std::vector<Output>& in) { return ops::concat(g, in, axis); };
  };
  Tensor rows = run_once(concat_on(0), {a, c});
  EXPECT_EQ(rows.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(rows), (std::vector<float>{1, 2, 3, 4, 7, 8}));
  Tensor cols = run_once(concat_on(-1), {a, b});
  EXPECT_EQ(cols.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(cols), (std::vector<float>{1, 2, 5, 3, 4, 6}));
  Tensor ints = run_once(concat_on(0), {Tensor::from_vector<int32_t>({2}, {1, 2}),
                                        Tensor::from_vector<int32_t>({1}, {3})});
  EXPECT_EQ(values<int32_t>(ints), (std::vector<int32_t>{1, 2, 3}));
}

TEST(OpsArrayTest, ConcatErrorsNameShapes) {
  Graph g;
  Output a = ops::placeholder(g, DType::f32, {2, 3}, "a");
  Output b = ops::placeholder(g, DType::f32, {3, 4}, "b");
  Output i = ops::placeholder(g, DType::i32, {2, 3}, "i");
  expect_error(
      [&] {
        ops::concat(g, {a, b}, 1, "cat");
      },
      "node 'cat' (Concat): input 1 [3,4] vs input 0 [2,3]: shapes must match except "
      "on axis 1");
  expect_error(
      [&] {
        ops::concat(g, {a, b}, 2, "cat2");
      },
      "node 'cat2' (Concat): axis 2 is out of range for input [2,3]");
  expect_error([&] { ops::concat(g, {a, i}, 0, "cat3"); }, "dtypes differ");
}

TEST(OpsArrayTest, CastBetweenDtypes) {
  Tensor f = Tensor::from_vector<float>({4}, {1.7f, -1.7f, 0.0f, 200.0f});
  auto cast_to = [](DType dtype) {
    return [dtype](Graph& g, const std::vector<Output>& in) { return ops::cast(g, in[0], dtype); };
  };
  EXPECT_EQ(values<int32_t>(run_once(cast_to(DType::i32), {f})),
            (std::vector<int32_t>{1, -1, 0, 200}));
  Tensor small = Tensor::from_vector<float>({2}, {2.5f, 200.0f});
  EXPECT_EQ(values<uint8_t>(run_once(cast_to(DType::u8), {small})), (std::vector<uint8_t>{2, 200}));
  Tensor i = Tensor::from_vector<int64_t>({2}, {-3, 5});
  EXPECT_EQ(values<float>(run_once(cast_to(DType::f32), {i})), (std::vector<float>{-3, 5}));
  EXPECT_EQ(values<int32_t>(run_once(cast_to(DType::i32), {i})), (std::vector<int32_t>{-3, 5}));
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2}, "x");
  expect_error(
      [&] {
        g.add("Cast", {x}, {{"dtype", std::string("f16")}}, "c");
      },
      "node 'c' (Cast): ");
}

TEST(OpsArrayTest, Gradients) {
  auto input = random_tensor({2, 3, 4}, 11);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::identity(g, in[0]); }, {input}, 12);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) {
        return ops::reshape(g, in[0], {4, -1});
      },
      {input}, 13);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::flatten(g, in[0], 2); }, {input},
      14);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::cast(g, in[0], DType::f32); },
      {input}, 15);
}

TEST(OpsArrayTest, ConcatGradients) {
  std::vector<Tensor> rows{random_tensor({1, 3}, 21), random_tensor({2, 3}, 22),
                           random_tensor({3, 3}, 23)};
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::concat(g, in, 0); }, rows, 24);
  std::vector<Tensor> cols{random_tensor({2, 2, 1}, 25), random_tensor({2, 2, 3}, 26)};
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::concat(g, in, 2); }, cols, 27);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::concat(g, in, -1); }, cols, 28);
  std::vector<Tensor> middle{random_tensor({2, 1, 2}, 29), random_tensor({2, 2, 2}, 30)};
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) { return ops::concat(g, in, 1); }, middle, 31);
}

// Slice's gradient is dy placed back into zeros of x's shape (StridedSliceGrad).
TEST(OpsArrayTest, SliceGradient) {
  auto slice_of = [](int64_t axis, int64_t begin, int64_t end) {
    return [=](Graph& g, const std::vector<Output>& in) {
      return ops::slice(g, in[0], axis, begin, end);
    };
  };
  expect_gradients_match(slice_of(1, 1, 3), {random_tensor({2, 4, 3}, 41)}, 42);
  expect_gradients_match(slice_of(-1, 0, 2), {random_tensor({3, 2, 5}, 43)}, 44);
  expect_gradients_match(slice_of(0, 2, 3), {random_tensor({3, 2}, 45)}, 46);
}

// Gradient graphs must stay valid when a new batch size re-infers every shape.
TEST(OpsArrayTest, FlattenGradientFollowsBatchSize) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2, 3, 2}, "x");
  Output loss = ops::reduce_sum(g, ops::flatten(g, x), {});
  Output dx = gradients(g, loss, {x})[0];
  Session session(g);
  Tensor grad = session.run({{x, random_tensor({5, 3, 2}, 1)}}, {dx})[0];
  EXPECT_EQ(grad.shape(), (Shape{5, 3, 2}));
  for (float v : values<float>(grad)) EXPECT_EQ(v, 1.0f);
}

}  // namespace
}  // namespace sf
