#include "runtime/session.h"

#include <gtest/gtest.h>
#include <omp.h>

#include "core/error.h"
#include "ops/ops.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

TEST(SessionTest, ArenaSharesMemoryBetweenTensorsNotAliveTogether) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {1024}, "x");
  Output y = x;
  for (int i = 0; i < 10; ++i) y = ops::relu(g, y);
  Session session(g);
  Tensor input = testing::random_tensor({1024}, 1);
  session.run({{x, input}}, {y});
  // A chain of ten 4 KiB tensors needs two slots at a time, not ten.
  EXPECT_LE(session.arena_bytes(), 2u * 4096u);
}

TEST(SessionTest, ReshapeSharesItsInputsBufferAndKeepsItAlive) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {4, 256}, "x");
  Output a = ops::relu(g, x);
  Output r = ops::reshape(g, a, {1024});
  // A later tensor of the same size must not take the shared buffer while r is still read.
  Output b = ops::relu(g, ops::relu(g, ops::reshape(g, x, {1024})));
  Output y = ops::add(g, r, b);
  Session session(g);
  const Tensor input = testing::random_tensor({4, 256}, 7, -1.0f, 1.0f);
  const std::vector<Tensor> out = session.run({{x, input}}, {y, r, a});
  const float* in = input.data<float>();
  for (int64_t i = 0; i < 1024; ++i) {
    const float relu = std::max(0.0f, in[i]);
    ASSERT_EQ(out[0].data<float>()[i], relu + relu) << i;
    ASSERT_EQ(out[1].data<float>()[i], relu) << i;
  }
  EXPECT_EQ(out[1].shape(), (Shape{1024}));
  EXPECT_EQ(out[2].shape(), (Shape{4, 256}));
  EXPECT_EQ(out[1].data<float>(), out[2].data<float>()) << "the reshape is a view of its input";
}

TEST(SessionTest, RepeatedRunsReuseThePlan) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {8, 16}, "x");
  Output y = ops::relu(g, ops::add(g, x, x));
  Session session(g);
  Tensor input = testing::random_tensor({8, 16}, 2);
  session.run({{x, input}}, {y});
  size_t bytes = session.arena_bytes();
  for (int i = 0; i < 20; ++i) session.run({{x, input}}, {y});
  EXPECT_EQ(session.arena_bytes(), bytes);
}

TEST(SessionTest, NewBatchSizeReinfersShapes) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {4, 3}, "x");
  Output y = ops::relu(g, x);
  Session session(g);
  Tensor input = testing::random_tensor({7, 3}, 3);
  Tensor out = session.run({{x, input}}, {y})[0];
  EXPECT_EQ(out.shape(), (Shape{7, 3}));
  for (int64_t i = 0; i < out.numel(); ++i)
    EXPECT_EQ(out.data<float>()[i], std::max(0.0f, input.data<float>()[i]));
}

TEST(SessionTest, UnfedPlaceholderIsAnError) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2}, "x");
  Output y = ops::relu(g, x, "r");
  Session session(g);
  try {
    session.run({}, {y});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "node 'r' (Relu): input 'x' was not fed");
  }
}

TEST(SessionTest, WrongFeedDtypeIsAnError) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2}, "x");
  Session session(g);
  EXPECT_THROW(session.run({{x, Tensor(DType::i32, {2})}}, {x}), Error);
}

TEST(SessionTest, UninitializedVariableIsAnError) {
  Graph g;
  Output y = ops::relu(g, ops::variable(g, DType::f32, {2}, "w"));
  Session session(g);
  try {
    session.run({}, {y});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("variable 'w' has no value"), std::string::npos);
  }
}

// An inference plan of few FLOPs runs on one thread, says so, gives the same result, and leaves
// the caller's thread count as it was; a large plan, a forced kernel and a graph with
// variables keep the session's threads.
TEST(SessionTest, SmallInferencePlansRunOnOneThread) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {1, 8, 8, 4}, "x");  // other batches re-plan
  ops::Conv2DOptions same;
  same.padding = "SAME";
  // 2 * 8 * 8 * 8 * (3 * 3 * 4) = 36,864 FLOPs an image.
  Output y = ops::conv2d(g, x, ops::constant(g, testing::random_tensor({3, 3, 4, 8}, 1), "w"),
                         same, "conv");
  Session session(g, SessionOptions{.threads = 2});
  Session forced(g, SessionOptions{.threads = 2, .kernel_impl = "reference"});
  const Tensor small = testing::random_tensor({1, 8, 8, 4}, 2);
  const Tensor small_y = session.run({{x, small}}, {y})[0].clone();
  EXPECT_TRUE(session.ran_on_one_thread());
  EXPECT_EQ(omp_get_max_threads(), 2);
  testing::expect_close(forced.run({{x, small}}, {y})[0], small_y, {}, "one-thread conv");
  EXPECT_FALSE(forced.ran_on_one_thread());
  const int64_t large_batch =
      static_cast<int64_t>(Session::kOneThreadPlanMaxFlops / 36864.0) + 1;
  session.run({{x, testing::random_tensor({large_batch, 8, 8, 4}, 3)}}, {y});
  EXPECT_FALSE(session.ran_on_one_thread());
  // The small plan again, from the plan cache.
  session.run({{x, small}}, {y});
  EXPECT_TRUE(session.ran_on_one_thread());

  Graph trained;
  Output tx = ops::placeholder(trained, DType::f32, {1, 8, 8, 4}, "x");
  Output ty = ops::conv2d(trained, tx, ops::variable(trained, DType::f32, {3, 3, 4, 8}, "w"),
                          same, "conv");
  Session training(trained, SessionOptions{.threads = 2});
  training.variables().set("w", testing::random_tensor({3, 3, 4, 8}, 1));
  training.run({{tx, small}}, {ty});
  EXPECT_FALSE(training.ran_on_one_thread());
}

}  // namespace
}  // namespace sf
