// Ops of attention and sequence models as exporters write them: Einsum (attention scores, an
// implicit output, a summed letter), Gelu decomposed around Erf, and a bool mask from Cast
// feeding Where; each against values computed here.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>

#include "onnx/importer.h"
#include "support/onnx_models.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using namespace testing;

Tensor einsum(const std::string& equation, const Tensor& a, const Shape& b_shape,
              const std::vector<float>& b) {
  onnx::ModelProto m = new_onnx_model(12);
  add_input(m, "a", a.shape());
  add_init(m, "b", b_shape, b);
  set_string(add_node(m, "Einsum", {"a", "b"}, {"y"}, "einsum"), "equation", equation);
  add_output(m, "y");
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  return run_model(import_onnx_bytes(bytes, "einsum.onnx"), a);
}

TEST(OnnxTransformerOps, EinsumAttentionScores) {
  const int64_t B = 2, H = 3, Q = 4, K = 5, D = 6;
  const Tensor q = random_tensor({B, H, Q, D}, 1);
  const std::vector<float> k = random_values(B * H * K * D, 2);
  const Tensor y = einsum("bhqd, bhkd -> bhqk", q, {B, H, K, D}, k);
  ASSERT_EQ(y.shape(), (Shape{B, H, Q, K}));
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < Q; ++i)
      for (int64_t j = 0; j < K; ++j) {
        double want = 0;
        for (int64_t d = 0; d < D; ++d)
          want +=
              q.data<float>()[(bh * Q + i) * D + d] * k[static_cast<size_t>((bh * K + j) * D + d)];
        EXPECT_NEAR(y.data<float>()[(bh * Q + i) * K + j], want, 1e-5);
      }
}

TEST(OnnxTransformerOps, EinsumImplicitOutputAndSummedLetter) {
  // "xij,jk": x appears once in the inputs, so the implicit output is "ikx" (alphabetical);
  // in "xij,jk->ki" x is summed first and the result transposed.
  const int64_t X = 2, I = 3, J = 4, Kd = 5;
  const Tensor a = random_tensor({X, I, J}, 3);
  const std::vector<float> b = random_values(J * Kd, 4);
  auto at = [&](int64_t x, int64_t i, int64_t k) {
    double s = 0;
    for (int64_t j = 0; j < J; ++j)
      s += a.data<float>()[(x * I + i) * J + j] * b[static_cast<size_t>(j * Kd + k)];
    return s;
  };
  const Tensor implicit = einsum("xij,jk", a, {J, Kd}, b);
  ASSERT_EQ(implicit.shape(), (Shape{I, Kd, X}));
  const Tensor summed = einsum("xij,jk->ki", a, {J, Kd}, b);
  ASSERT_EQ(summed.shape(), (Shape{Kd, I}));
  for (int64_t i = 0; i < I; ++i)
    for (int64_t k = 0; k < Kd; ++k) {
      EXPECT_NEAR(summed.data<float>()[k * I + i], at(0, i, k) + at(1, i, k), 1e-5);
      for (int64_t x = 0; x < X; ++x)
        EXPECT_NEAR(implicit.data<float>()[(i * Kd + k) * X + x], at(x, i, k), 1e-5);
    }
}

TEST(OnnxTransformerOps, EinsumRefusesDiagonalsByName) {
  const Tensor a = random_tensor({3, 3}, 5);
  expect_error(
      [&] {
        einsum("ii,ij->j", a, {3, 2}, random_values(6, 6));
      },
      "node 'einsum' (Einsum): repeated letter 'i' in 'ii' (a diagonal) is not supported");
}

TEST(OnnxTransformerOps, GeluAsExportedMatchesTheFormula) {
  onnx::ModelProto m = new_onnx_model(13);
  add_input(m, "x", {2, 7});
  add_init(m, "sqrt2", {}, {std::sqrt(2.0f)});
  add_init(m, "one", {}, {1.0f});
  add_init(m, "half", {}, {0.5f});
  add_node(m, "Div", {"x", "sqrt2"}, {"scaled"});
  add_node(m, "Erf", {"scaled"}, {"erf"});
  add_node(m, "Add", {"erf", "one"}, {"shifted"});
  add_node(m, "Mul", {"x", "shifted"}, {"product"});
  add_node(m, "Mul", {"product", "half"}, {"y"});
  add_output(m, "y");
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  const Tensor x = random_tensor({2, 7}, 7, -3, 3);
  const Tensor y = run_model(import_onnx_bytes(bytes, "gelu.onnx"), x);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.data<float>()[i];
    EXPECT_NEAR(y.data<float>()[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-6);
  }
}

TEST(OnnxTransformerOps, CastToBoolIsNonzeroAndFeedsWhere) {
  onnx::ModelProto m = new_onnx_model(13);
  add_input(m, "x", {4});
  add_init(m, "fill", {}, {-1.0f});
  set_int(add_node(m, "Cast", {"x"}, {"mask"}), "to", onnx::TensorProto::BOOL);
  add_node(m, "Where", {"mask", "x", "fill"}, {"y"});
  add_output(m, "y");
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  const Tensor y = run_model(import_onnx_bytes(bytes, "mask.onnx"),
                             Tensor::from_vector<float>({4}, {0, 0.5f, -2, 0}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{-1, 0.5f, -2, -1}));
}

}  // namespace
}  // namespace sf
