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

// Both outputs of SoftmaxCrossEntropy for the given logits and labels.
std::vector<Tensor> run_loss(const Tensor& logits, const Tensor& labels) {
  Graph g;
  Output x = ops::placeholder(g, logits.dtype(), logits.shape(), "logits");
  Output l = ops::placeholder(g, labels.dtype(), labels.shape(), "labels");
  Output loss = ops::softmax_cross_entropy(g, x, l, "loss");
  Session session(g);
  std::vector<Tensor> out = session.run({{x, logits}, {l, labels}}, {loss, {loss.node, 1}});
  return {out[0].clone(), out[1].clone()};
}

TEST(OpsLossTest, HandCheckedLossAndProbabilities) {
  Tensor logits = Tensor::from_vector<float>({2, 2}, {0, 0, 0, std::log(3.0f)});
  std::vector<Tensor> out = run_loss(logits, Tensor::from_vector<int32_t>({2}, {0, 1}));
  EXPECT_EQ(out[0].shape(), Shape{});
  EXPECT_NEAR(*out[0].data<float>(), (std::log(2.0) - std::log(0.75)) / 2, 1e-6);
  const float* p = out[1].data<float>();
  EXPECT_NEAR(p[0], 0.5, 1e-6);
  EXPECT_NEAR(p[1], 0.5, 1e-6);
  EXPECT_NEAR(p[2], 0.25, 1e-6);
  EXPECT_NEAR(p[3], 0.75, 1e-6);
  // The same labels as i64 indices and as one-hot probabilities give the same loss.
  std::vector<Tensor> wide = run_loss(logits, Tensor::from_vector<int64_t>({2}, {0, 1}));
  std::vector<Tensor> soft = run_loss(logits, Tensor::from_vector<float>({2, 2}, {1, 0, 0, 1}));
  EXPECT_FLOAT_EQ(*wide[0].data<float>(), *out[0].data<float>());
  EXPECT_FLOAT_EQ(*soft[0].data<float>(), *out[0].data<float>());
}

TEST(OpsLossTest, LargeLogitsStayFinite) {
  Tensor logits = Tensor::from_vector<float>({1, 3}, {1000, 0, -1000});
  std::vector<Tensor> out = run_loss(logits, Tensor::from_vector<int32_t>({1}, {1}));
  EXPECT_NEAR(*out[0].data<float>(), 1000.0, 1e-3);
  EXPECT_NEAR(out[1].data<float>()[0], 1.0, 1e-6);
}

TEST(OpsLossTest, ShapeErrorsNameNodeAndShapes) {
  Graph g;
  Output logits = ops::placeholder(g, DType::f32, {64, 10}, "logits");
  Output labels = ops::placeholder(g, DType::i32, {32}, "labels");
  Output probs = ops::placeholder(g, DType::f32, {64, 5}, "probs");
  Output bytes = ops::placeholder(g, DType::u8, {64}, "bytes");
  Output flat = ops::placeholder(g, DType::f32, {64}, "flat");
  auto expect_error = [&](Output l, const std::string& want) {
    try {
      ops::softmax_cross_entropy(g, logits, l, "loss");
      ADD_FAILURE() << "expected: " << want;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  };
  expect_error(labels,
               "node 'loss' (SoftmaxCrossEntropy): labels [32] vs logits [64,10]: batch sizes "
               "differ");
  expect_error(probs,
               "node 'loss' (SoftmaxCrossEntropy): labels [64,5] vs logits [64,10]: probability "
               "labels must have the same shape");
  expect_error(flat,
               "node 'loss' (SoftmaxCrossEntropy): labels [64] vs logits [64,10]: probability "
               "labels must have the same shape");
  expect_error(bytes,
               "node 'loss' (SoftmaxCrossEntropy): labels must be i32 or i64 class indices or "
               "f32 probabilities, got u8[64]");
  Output flat_logits = ops::placeholder(g, DType::f32, {64}, "flat_logits");
  EXPECT_THROW(ops::softmax_cross_entropy(g, flat_logits, labels, "loss2"), Error);
}

TEST(OpsLossTest, OutOfRangeLabelNamesNodeAndLabel) {
  Tensor logits = random_tensor({2, 3}, 1);
  try {
    run_loss(logits, Tensor::from_vector<int32_t>({2}, {0, 3}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "node 'loss' (SoftmaxCrossEntropy): label 3 at row 1 is out of range for 3 "
                 "classes");
  }
  EXPECT_THROW(run_loss(logits, Tensor::from_vector<int64_t>({2}, {-1, 0})), Error);
}

TEST(OpsLossTest, GradientsForEachLabelKind) {
  auto loss = [](Graph& g, const std::vector<Output>& in) {
    return ops::softmax_cross_entropy(g, in[0], in[1]);
  };
  Tensor logits = random_tensor({4, 3}, 10, -2, 2);
  expect_gradients_match(loss, {logits, testing::random_labels(4, 3, 11)}, 12);
  expect_gradients_match(loss, {logits, Tensor::from_vector<int64_t>({4}, {2, 0, 1, 2})}, 13);
  // Probability labels have no gradient of their own, so they enter as a constant.
  Tensor soft = random_tensor({4, 3}, 14, 0, 1);
  expect_gradients_match(
      [soft](Graph& g, const std::vector<Output>& in) {
        return ops::softmax_cross_entropy(g, in[0], ops::constant(g, soft));
      },
      {logits}, 15);
  // Gradient through the probabilities output as well as the loss.
  expect_gradients_match(
      [](Graph& g, const std::vector<Output>& in) {
        Output l = ops::softmax_cross_entropy(g, in[0], in[1], "loss");
        return ops::add(g, Output{l.node, 1}, l);
      },
      {logits, testing::random_labels(4, 3, 16)}, 17);
}

TEST(OpsLossTest, IntegerLabelsGetNoGradient) {
  Graph g;
  Output logits = ops::placeholder(g, DType::f32, {2, 3}, "logits");
  Output labels = ops::placeholder(g, DType::i32, {2}, "labels");
  Output loss = ops::softmax_cross_entropy(g, logits, labels, "loss");
  std::vector<Output> grads = gradients(g, loss, {logits, labels});
  EXPECT_TRUE(grads[0].valid());
  EXPECT_FALSE(grads[1].valid());
}

}  // namespace
}  // namespace sf
