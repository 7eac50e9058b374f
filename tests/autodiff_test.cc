#include <gtest/gtest.h>

#include "autodiff/gradients.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// y = sum(x * x + x): a value used on two paths gets the sum of both gradients, 2x + 1.
TEST(AutodiffTest, GradientsFromSeveralPathsAreSummed) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {5}, "x");
  Output y = ops::reduce_sum(g, ops::add(g, ops::mul(g, x, x), x), {0});
  Output dx = gradients(g, y, {x})[0];
  Session session(g);
  Tensor input = testing::random_tensor({5}, 4);
  Tensor grad = session.run({{x, input}}, {dx})[0];
  for (int i = 0; i < 5; ++i)
    EXPECT_NEAR(grad.data<float>()[i], 2 * input.data<float>()[i] + 1, 1e-6);
}

TEST(AutodiffTest, UnrelatedInputHasNoGradient) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {3}, "x");
  Output z = ops::placeholder(g, DType::f32, {3}, "z");
  Output y = ops::reduce_sum(g, ops::relu(g, x), {0});
  std::vector<Output> grads = gradients(g, y, {x, z});
  EXPECT_TRUE(grads[0].valid());
  EXPECT_FALSE(grads[1].valid());
}

TEST(AutodiffTest, NonScalarLossIsAnError) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {3}, "x");
  EXPECT_THROW(gradients(g, ops::relu(g, x), {x}), Error);
}

TEST(AutodiffTest, DenseLayerGradientMatchesFiniteDifferences) {
  testing::expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) {
        return ops::relu(g, ops::bias_add(g, ops::matmul(g, in[0], in[1]), in[2]));
      },
      {testing::random_tensor({3, 4}, 5), testing::random_tensor({4, 2}, 6),
       testing::random_tensor({2}, 7)},
      8);
}

}  // namespace
}  // namespace sf
