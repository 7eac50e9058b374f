// Comparisons, mask logic and Where (logic_ops.cc): values with broadcasting for each dtype, the
// dtype and shape errors, and Where's gradient by central differences.
#include <gtest/gtest.h>

#include <limits>

#include "ops/op_names.h"
#include "ops/ops.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::expect_error;
using testing::expect_gradients_match;
using testing::random_tensor;
using testing::run_once;
using testing::values;

Tensor apply(const char* op, const Tensor& a, const Tensor& b) {
  return run_once(
      [op](Graph& g, const std::vector<Output>& in) {
        return g.add(op, {in[0], in[1]});
      },
      {a, b});
}

TEST(OpsLogicTest, ComparisonsBroadcastToMasks) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = Tensor::from_vector<float>({2, 3}, {1, 2, 3, nan, 5, -6});
  Tensor b = Tensor::from_vector<float>({3}, {2, 2, 2});
  const std::vector<std::pair<const char*, std::vector<uint8_t>>> cases = {
      {op_names::kEqual, {0, 1, 0, 0, 0, 0}},          {op_names::kLess, {1, 0, 0, 0, 0, 1}},
      {op_names::kGreater, {0, 0, 1, 0, 1, 0}},        {op_names::kLessOrEqual, {1, 1, 0, 0, 0, 1}},
      {op_names::kGreaterOrEqual, {0, 1, 1, 0, 1, 0}},
  };
  for (const auto& [op, want] : cases) {
    Tensor y = apply(op, a, b);
    ASSERT_EQ(y.dtype(), DType::u8) << op;
    EXPECT_EQ(y.shape(), (Shape{2, 3})) << op;
    EXPECT_EQ(values<uint8_t>(y), want) << op;  // NaN compares false, as in NumPy
  }
  // Integers compare exactly, beyond float's 24-bit mantissa.
  Tensor big = Tensor::from_vector<int64_t>({2}, {(int64_t{1} << 40) + 1, -7});
  Tensor other = Tensor::from_vector<int64_t>({2}, {int64_t{1} << 40, -7});
  EXPECT_EQ(values<uint8_t>(apply(op_names::kGreater, big, other)), (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(values<uint8_t>(apply(op_names::kEqual, big, other)), (std::vector<uint8_t>{0, 1}));
}

TEST(OpsLogicTest, MaskLogic) {
  Tensor a = Tensor::from_vector<uint8_t>({2, 2}, {0, 0, 1, 1});
  Tensor b = Tensor::from_vector<uint8_t>({2}, {0, 1});
  EXPECT_EQ(values<uint8_t>(apply(op_names::kAnd, a, b)), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(values<uint8_t>(apply(op_names::kOr, a, b)), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(values<uint8_t>(apply(op_names::kXor, a, b)), (std::vector<uint8_t>{0, 1, 1, 0}));
  Tensor not_a = run_once(
      [](Graph& g, const std::vector<Output>& in) { return g.add(op_names::kNot, {in[0]}); }, {a});
  EXPECT_EQ(values<uint8_t>(not_a), (std::vector<uint8_t>{1, 1, 0, 0}));
}

TEST(OpsLogicTest, WhereBroadcastsAllThree) {
  Tensor condition = Tensor::from_vector<uint8_t>({2, 1}, {1, 0});
  Tensor x = Tensor::from_vector<int32_t>({3}, {1, 2, 3});
  Tensor y = Tensor::from_vector<int32_t>({}, {-1});
  Tensor z = run_once(
      [](Graph& g, const std::vector<Output>& in) { return ops::where(g, in[0], in[1], in[2]); },
      {condition, x, y});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int32_t>(z), (std::vector<int32_t>{1, 2, 3, -1, -1, -1}));
}

TEST(OpsLogicTest, WhereGradientGoesToTheChosenSide) {
  Tensor condition = Tensor::from_vector<uint8_t>({2, 3}, {1, 0, 1, 0, 0, 1});
  expect_gradients_match(
      [&](Graph& g, const std::vector<Output>& in) {
        return ops::where(g, ops::constant(g, condition), in[0], in[1]);
      },
      {random_tensor({2, 3}, 1), random_tensor({3}, 2)}, 3);
}

TEST(OpsLogicTest, ErrorsNameTheNode) {
  expect_error(
      [] {
        Graph g;
        g.add(op_names::kLess,
              {ops::placeholder(g, DType::f32, {2}), ops::placeholder(g, DType::i32, {2})}, {},
              "lt");
      },
      "node 'lt' (Less): dtypes differ");
  expect_error(
      [] {
        Graph g;
        g.add(op_names::kAnd,
              {ops::placeholder(g, DType::f32, {2}), ops::placeholder(g, DType::u8, {2})}, {},
              "and");
      },
      "node 'and' (And): input 'mask' must be u8, got f32");
  expect_error(
      [] {
        Graph g;
        ops::where(g, ops::placeholder(g, DType::u8, {2}), ops::placeholder(g, DType::f32, {3}),
                   ops::placeholder(g, DType::f32, {3}), "w");
      },
      "node 'w' (Where): shapes do not broadcast: [2] vs [3]");
}

}  // namespace
}  // namespace sf
