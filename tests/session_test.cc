#include <gtest/gtest.h>

#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf {
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

}  // namespace
}  // namespace sf
