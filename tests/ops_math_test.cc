#include <gtest/gtest.h>

#include <cmath>
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

using BinaryFn = Output (*)(Graph&, Output, Output, const std::string&);

testing::BuildFn binary(BinaryFn fn) {
  return [fn](Graph& g, const std::vector<Output>& in) { return fn(g, in[0], in[1], ""); };
}

TEST(OpsMathTest, BroadcastingValues) {
  Tensor a = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from_vector<float>({3}, {10, 20, 30});
  EXPECT_EQ(values<float>(run_once(binary(ops::add), {a, b})),
            (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(values<float>(run_once(binary(ops::sub), {a, b})),
            (std::vector<float>{-9, -18, -27, -6, -15, -24}));
  Tensor col = Tensor::from_vector<float>({2, 1}, {2, 4});
  EXPECT_EQ(values<float>(run_once(binary(ops::div), {a, col})),
            (std::vector<float>{0.5f, 1, 1.5f, 1, 1.25f, 1.5f}));
  Tensor s = Tensor::scalar_f32(3);
  EXPECT_EQ(values<float>(run_once(binary(ops::mul), {s, a})),
            (std::vector<float>{3, 6, 9, 12, 15, 18}));
  // [2,1,2] * [3,1] -> [2,3,2]
  Tensor x = Tensor::from_vector<float>({2, 1, 2}, {1, 2, 3, 4});
  Tensor y = Tensor::from_vector<float>({3, 1}, {1, 10, 100});
  Tensor z = run_once(binary(ops::mul), {x, y});
  EXPECT_EQ(z.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values<float>(z), (std::vector<float>{1, 2, 10, 20, 100, 200, 3, 4, 30, 40, 300, 400}));
}

TEST(OpsMathTest, IntegerArithmetic) {
  Tensor a = Tensor::from_vector<int32_t>({2, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::from_vector<int32_t>({2}, {10, -1});
  EXPECT_EQ(values<int32_t>(run_once(binary(ops::add), {a, b})),
            (std::vector<int32_t>{11, 1, 13, 3}));
  EXPECT_EQ(values<int32_t>(run_once(binary(ops::mul), {a, b})),
            (std::vector<int32_t>{10, -2, 30, -4}));
}

TEST(OpsMathTest, ShapeErrorsNameNodeAndShapes) {
  Graph g;
  Output a = ops::placeholder(g, DType::f32, {2, 3}, "a");
  Output b = ops::placeholder(g, DType::f32, {4}, "b");
  Output i = ops::placeholder(g, DType::i32, {2, 3}, "i");
  expect_error([&] { ops::add(g, a, b, "sum"); },
               "node 'sum' (Add): shapes do not broadcast: a [2,3] vs b [4]");
  expect_error([&] { ops::mul(g, a, i, "prod"); },
               "node 'prod' (Mul): dtypes differ: a f32[2,3] vs b i32[2,3]");
  expect_error(
      [&] {
        ops::add_n(g, {a, a, b}, "n");
      },
      "node 'n' (AddN): input 2 is f32[4], input 0 is f32[2,3]");
  expect_error([&] { ops::reduce_sum(g, a, {2}, false, "r"); },
               "node 'r' (ReduceSum): axes [2] are out of range or repeated for rank 2 input "
               "[2,3]");
  expect_error([&] { ops::reduce_mean(g, a, {0, -2}, false, "m"); }, "node 'm' (ReduceMean)");
  expect_error([&] { ops::sum_to(g, a, {2}, "st"); },
               "node 'st' (SumTo): cannot sum [2,3] down to [2]");
  expect_error(
      [&] {
        ops::broadcast_to(g, a, {3, 3}, "bt");
      },
      "node 'bt' (BroadcastTo): x [2,3] does not broadcast to [3,3]");
}

TEST(OpsMathTest, SumsAndReductions) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto build = [](auto fn) {
    return [fn](Graph& g, const std::vector<Output>& in) { return fn(g, in[0]); };
  };
  Tensor all = run_once(build([](Graph& g, Output x) { return ops::reduce_sum(g, x, {}); }), {x});
  EXPECT_EQ(all.shape(), Shape{});
  EXPECT_EQ(values<float>(all), (std::vector<float>{21}));
  Tensor rows =
      run_once(build([](Graph& g, Output x) { return ops::reduce_sum(g, x, {-1}, true); }), {x});
  EXPECT_EQ(rows.shape(), (Shape{2, 1}));
  EXPECT_EQ(values<float>(rows), (std::vector<float>{6, 15}));
  Tensor cols =
      run_once(build([](Graph& g, Output x) { return ops::reduce_mean(g, x, {0}); }), {x});
  EXPECT_EQ(values<float>(cols), (std::vector<float>{2.5f, 3.5f, 4.5f}));
  Tensor mean = run_once(build([](Graph& g, Output x) { return ops::reduce_mean(g, x, {}); }), {x});
  EXPECT_FLOAT_EQ(values<float>(mean)[0], 3.5f);
  Tensor to_col = run_once(build([](Graph& g, Output x) {
                             return ops::sum_to(g, x, {2, 1});
                           }),
                           {x});
  EXPECT_EQ(values<float>(to_col), (std::vector<float>{6, 15}));
  Tensor to_row = run_once(build([](Graph& g, Output x) { return ops::sum_to(g, x, {3}); }), {x});
  EXPECT_EQ(values<float>(to_row), (std::vector<float>{5, 7, 9}));
  Tensor up = run_once(build([](Graph& g, Output x) {
                         return ops::broadcast_to(g, x, {2, 2, 3});
                       }),
                       {x});
  EXPECT_EQ(values<float>(up), (std::vector<float>{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}));
  Tensor neg = run_once(build([](Graph& g, Output x) { return ops::neg(g, x); }), {x});
  EXPECT_EQ(values<float>(neg), (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  Tensor n = run_once([](Graph& g, const std::vector<Output>& in) { return ops::add_n(g, in); },
                      {x, x, x});
  EXPECT_EQ(values<float>(n), (std::vector<float>{3, 6, 9, 12, 15, 18}));
}

TEST(OpsMathTest, BinaryGradientsWithBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> cases = {{{2, 3}, {2, 3}}, {{2, 3}, {3}},
                                                      {{3}, {2, 3}},    {{2, 1, 4}, {3, 1}},
                                                      {{2, 3}, {}},     {{}, {2, 3}}};
  uint32_t seed = 100;
  for (const auto& [sa, sb] : cases) {
    SCOPED_TRACE(shape_str(sa) + " op " + shape_str(sb));
    Tensor a = random_tensor(sa, seed++);
    Tensor b = random_tensor(sb, seed++);
    // Divisors stay away from zero so that finite differences are accurate.
    Tensor divisor = random_tensor(sb, seed++, 0.5f, 1.5f);
    expect_gradients_match(binary(ops::add), {a, b}, seed++);
    expect_gradients_match(binary(ops::sub), {a, b}, seed++);
    expect_gradients_match(binary(ops::mul), {a, b}, seed++);
    expect_gradients_match(binary(ops::div), {a, divisor}, seed++);
  }
}

TEST(OpsMathTest, OtherGradients) {
  Tensor x = random_tensor({2, 3, 2}, 200);
  expect_gradients_match([](Graph& g, const std::vector<Output>& in) { return ops::neg(g, in[0]); },
                         {x}, 201);
  expect_gradients_match([](Graph& g, const std::vector<Output>& in) { return ops::add_n(g, in); },
                         {x, random_tensor({2, 3, 2}, 202), random_tensor({2, 3, 2}, 203)}, 204);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) {
        return ops::sum_to(g, in[0], {3, 1});
      },
      {x}, 205);
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) {
        return ops::broadcast_to(g, in[0], {2, 2, 3});
      },
      {random_tensor({2, 1, 3}, 206)}, 207);
  // An AddN with a repeated input gets the sum of both gradients.
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) {
        return ops::add_n(g, {in[0], in[0]});
      },
      {x}, 208);
}

TEST(OpsMathTest, ReductionGradients) {
  Tensor x = random_tensor({2, 3, 2}, 300);
  const std::vector<std::pair<std::vector<int64_t>, bool>> cases = {
      {{}, false}, {{1}, true}, {{1}, false}, {{0, 2}, false}, {{-1}, true}};
  uint32_t seed = 301;
  for (const auto& [axes, keep] : cases) {
    SCOPED_TRACE("axes " + shape_str(axes) + (keep ? " keep_dims" : ""));
    std::vector<int64_t> a = axes;
    bool k = keep;
    expect_gradients_match(
        [a, k](Graph& g, const std::vector<Output>& in) { return ops::reduce_sum(g, in[0], a, k); },
        {x}, seed++);
    expect_gradients_match(
        [a, k](Graph& g, const std::vector<Output>& in) {
          return ops::reduce_mean(g, in[0], a, k);
        },
        {x}, seed++);
  }
}

// The gradient graph of a broadcast add and a mean over the batch stays valid, and correct,
// when a new batch size re-infers its shapes.
TEST(OpsMathTest, GradientsFollowBatchSize) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2, 3}, "x");
  Output b = ops::placeholder(g, DType::f32, {3}, "b");
  Output loss = ops::reduce_mean(g, ops::mul(g, ops::add(g, x, b), x), {});
  std::vector<Output> grads = gradients(g, loss, {x, b});
  Session session(g);
  Tensor xv = random_tensor({4, 3}, 1);
  Tensor bv = random_tensor({3}, 2);
  std::vector<Tensor> out = session.run({{x, xv}, {b, bv}}, grads);
  ASSERT_EQ(out[0].shape(), (Shape{4, 3}));
  ASSERT_EQ(out[1].shape(), (Shape{3}));
  for (int c = 0; c < 3; ++c) {
    double db = 0;
    for (int r = 0; r < 4; ++r) {
      float xi = xv.data<float>()[r * 3 + c];
      db += xi / 12.0;
      EXPECT_NEAR(out[0].data<float>()[r * 3 + c], (2 * xi + bv.data<float>()[c]) / 12.0, 1e-6);
    }
    EXPECT_NEAR(out[1].data<float>()[c], db, 1e-6);
  }
}

}  // namespace
}  // namespace sf
