// The execution passes that fuse a transformer's decomposed LayerNorm and erf GELU, its
// projections' bias Adds (FusedBatchMatMul) and the Transposes of its attention operands (the
// products' transpose flags): the fused graph computes what the decomposed one does (within
// 1e-5), forms that differ from the exported ones stay unfused, the fused ops refuse gradients
// by name, and the Gelu kernels' erf (portable and AVX-512) stays within a few float roundings
// of std::erf.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "autodiff/gradients.h"
#include "core/error.h"
#include "cpu/cpu_features.h"
#include "graph/graph.h"
#include "kernels/erf_rational.h"
#include "ops/execution_ops.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"
#include "transforms/execution_passes.h"
#if defined(__x86_64__)
#include "kernels/transformer_kernels_avx512.h"
#endif

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// How a decomposed LayerNorm is written.
struct LayerNormForm {
  bool importer_form = false;  // Mul(d, d) and d * (1 / root), as ops_nn.cc writes the ONNX op
  float exponent = 2.0f;
  bool eps_after_sqrt = false;
  int64_t axis = -1;
  bool affine = true;
  bool mean_read_elsewhere = false;
};

// x [.., C] -> LayerNorm(x) written as `form` says; gamma and beta random [C].
Output decomposed_layer_norm(Graph& g, Output x, const LayerNormForm& form, uint32_t seed) {
  const Shape& shape = g.type(x).shape;
  const int64_t channels = shape.back();
  Output mean = ops::reduce_mean(g, x, {form.axis}, true, "mean");
  Output d = ops::sub(g, x, mean, "centered");
  Output square = form.importer_form
                      ? ops::mul(g, d, d, "square")
                      : ops::pow(g, d, ops::scalar(g, form.exponent, "two"), "square");
  Output var = ops::reduce_mean(g, square, {form.axis}, true, "var");
  Output eps = ops::scalar(g, 1e-5f, "eps");
  Output root = form.eps_after_sqrt ? ops::add(g, ops::sqrt(g, var, "root0"), eps, "root")
                                    : ops::sqrt(g, ops::add(g, var, eps, "var_eps"), "root");
  Output y = form.importer_form
                 ? ops::mul(g, d, ops::div(g, ops::scalar(g, 1.0f, "one"), root, "inv"), "norm")
                 : ops::div(g, d, root, "norm");
  if (form.affine) {
    y = ops::mul(g, ops::constant(g, testing::random_tensor({channels}, seed, 0.5f, 1.5f)), y,
                 "scaled");
    y = ops::add(g, y, ops::constant(g, testing::random_tensor({channels}, seed + 1)), "shifted");
  }
  if (form.mean_read_elsewhere) y = ops::add(g, y, mean, "uses_mean");
  return y;
}

enum class GeluForm { kPyTorch, kHalfFirst, kHalfOfSum, kWrongConstant };

Output decomposed_gelu(Graph& g, Output x, GeluForm form) {
  const float root2 = form == GeluForm::kWrongConstant ? 1.5f : 1.41421356f;
  Output e = ops::erf(g, ops::div(g, x, ops::scalar(g, root2, "root2"), "scaled"), "erf");
  Output p = ops::add(g, e, ops::scalar(g, 1.0f, "one"), "plus_one");
  Output half = ops::scalar(g, 0.5f, "half");
  switch (form) {
    case GeluForm::kHalfFirst:
      return ops::mul(g, ops::mul(g, x, half, "half_x"), p, "gelu");
    case GeluForm::kHalfOfSum:
      return ops::mul(g, ops::mul(g, p, half, "half_p"), x, "gelu");
    default:
      return ops::mul(g, ops::mul(g, x, p, "x_p"), half, "gelu");
  }
}

std::map<std::string, int> op_counts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes()) ++counts[n.op];
  return counts;
}

Tensor run_graph(const Graph& g, const std::string& output, const Tensor& x) {
  Session session(g);
  return session.run({{Output{g.id_of("x"), 0}, x}}, {Output{g.id_of(output), 0}})[0].clone();
}

// Optimizes `g` (output node `y`) for execution, checks the fused graph against the original
// on random inputs and returns the fused graph.
Graph expect_fused_matches(const Graph& g, const std::string& y, float scale = 3.0f) {
  std::vector<std::string> names{y};
  Graph fused = optimize_for_execution(g, names);
  const Shape& shape = g.type({g.id_of("x"), 0}).shape;
  for (uint32_t seed : {7u, 8u}) {
    const Tensor x = testing::random_tensor(shape, seed, -scale, scale);
    const Tensor want = run_graph(g, y, x);
    const Tensor got = run_graph(fused, names[0], x);
    EXPECT_EQ(want.shape(), got.shape());
    for (int64_t i = 0; i < want.numel(); ++i)
      EXPECT_NEAR(want.data<float>()[i], got.data<float>()[i],
                  1e-5 * (1.0 + std::fabs(want.data<float>()[i])))
          << "element " << i;
  }
  return fused;
}

TEST(TransformerFusion, LayerNormFormsFuseAndMatchOnRandomShapes) {
  const std::vector<Shape> shapes = {{1, 256}, {2, 7, 33}, {3, 16}, {2, 3, 5, 17}, {4, 1}};
  for (bool importer_form : {false, true})
    for (bool affine : {true, false})
      for (const Shape& shape : shapes) {
        SCOPED_TRACE(shape_str(shape) + (importer_form ? " importer" : " pytorch") +
                     (affine ? " affine" : ""));
        Graph g;
        Output x = ops::placeholder(g, DType::f32, shape, "x");
        LayerNormForm form;
        form.importer_form = importer_form;
        form.affine = affine;
        form.axis = importer_form ? static_cast<int64_t>(shape.size()) - 1 : -1;
        const Output y = decomposed_layer_norm(g, x, form, 3);
        const Graph fused = expect_fused_matches(g, g.node(y.node).name);
        auto counts = op_counts(fused);
        EXPECT_EQ(counts["LayerNorm"], 1);
        EXPECT_EQ(counts["ReduceMean"] + counts["Sqrt"] + counts["Sub"] + counts["Div"], 0);
      }
}

TEST(TransformerFusion, LayerNormVariantsOutsideThePatternStayUnfused) {
  LayerNormForm eps_after_sqrt, first_axis, cube, mean_shared;
  eps_after_sqrt.eps_after_sqrt = true;
  first_axis.axis = 0;
  cube.exponent = 3.0f;
  mean_shared.mean_read_elsewhere = true;
  for (const LayerNormForm& form : {eps_after_sqrt, first_axis, cube, mean_shared}) {
    Graph g;
    Output x = ops::placeholder(g, DType::f32, {4, 6}, "x");
    const Output y = decomposed_layer_norm(g, x, form, 5);
    std::vector<std::string> names{g.node(y.node).name};
    const Graph out = optimize_for_execution(g, names);
    EXPECT_EQ(op_counts(out)["LayerNorm"], 0);
    EXPECT_EQ(op_counts(out)["ReduceMean"], 2);
  }
}

TEST(TransformerFusion, GeluFormsFuseAndMatch) {
  for (GeluForm form : {GeluForm::kPyTorch, GeluForm::kHalfFirst, GeluForm::kHalfOfSum}) {
    for (const Shape& shape : {Shape{1, 128, 17}, Shape{5}, Shape{3, 33}}) {
      Graph g;
      Output x = ops::placeholder(g, DType::f32, shape, "x");
      decomposed_gelu(g, x, form);
      const Graph fused = expect_fused_matches(g, "gelu", 5.0f);
      auto counts = op_counts(fused);
      EXPECT_EQ(counts["Gelu"], 1);
      EXPECT_EQ(counts["Erf"] + counts["Mul"] + counts["Div"], 0);
    }
  }
}

TEST(TransformerFusion, GeluWithAnotherScaleStaysUnfused) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2, 9}, "x");
  decomposed_gelu(g, x, GeluForm::kWrongConstant);
  std::vector<std::string> names{"gelu"};
  const Graph out = optimize_for_execution(g, names);
  EXPECT_EQ(op_counts(out)["Gelu"], 0);
  EXPECT_EQ(op_counts(out)["Erf"], 1);
}

// Self-attention scores as PyTorch exports them: x [batch, seq, width] to sequence-major, q and k
// projections with their biases (added on either side, [N] or [1, 1, N]), heads split by
// Reshape, q to [heads, seq, d] (divided by sqrt(d)) and k to [heads, d, seq] by Transposes,
// then q.k; its transpose times v (halved) is the output y [heads, seq, d] with a bias.
struct AttentionSizes {
  int64_t batch, seq, width, heads;
};

Output attention_scores(Graph& g, const AttentionSizes& s) {
  const int64_t d = s.width / s.heads;
  const int64_t bh = s.batch * s.heads;
  Output x = ops::placeholder(g, DType::f32, {s.batch, s.seq, s.width}, "x");
  Output xt = ops::transpose(g, x, {1, 0, 2}, "x_seq_major");
  const auto projection = [&](uint32_t seed, bool bias_first, Shape bias_shape,
                              const std::string& name) {
    Output w = ops::constant(g, testing::random_tensor({s.width, s.width}, seed));
    Output bias = ops::constant(g, testing::random_tensor(bias_shape, seed + 1));
    Output p = ops::batch_matmul(g, xt, w, false, false, name + "_product");
    return bias_first ? ops::add(g, bias, p, name) : ops::add(g, p, bias, name);
  };
  Output q = projection(11, true, {s.width}, "q");
  Output k = projection(13, false, {1, 1, s.width}, "k");
  Output v = projection(15, true, {s.width}, "v");
  const auto heads = [&](Output o, std::vector<int64_t> perm, const std::string& name) {
    return ops::transpose(g, ops::reshape(g, o, {s.seq, bh, d}, name + "_heads"), perm, name);
  };
  Output root_d = ops::scalar(g, std::sqrt(static_cast<float>(d)), "root_d");
  Output scores = ops::batch_matmul(g, ops::div(g, heads(q, {1, 0, 2}, "qh"), root_d, "q_scaled"),
                                    heads(k, {1, 2, 0}, "kh"), false, false, "scores");
  Output scores_t = ops::transpose(g, scores, {0, 2, 1}, "scores_t");
  Output half_v = ops::mul(g, ops::scalar(g, 0.5f, "half"), heads(v, {1, 0, 2}, "vh"), "half_v");
  Output out = ops::batch_matmul(g, scores_t, half_v, false, false, "out");
  return ops::add(g, out, ops::constant(g, testing::random_tensor({d}, 17)), "y");
}

TEST(TransformerFusion, ProjectionBiasesAndOperandTransposesFoldIntoProductsOnRandomShapes) {
  for (const AttentionSizes& s :
       {AttentionSizes{2, 5, 8, 2}, AttentionSizes{1, 7, 12, 3}, AttentionSizes{3, 4, 16, 4}}) {
    SCOPED_TRACE(shape_str({s.batch, s.seq, s.width, s.heads}));
    Graph g;
    attention_scores(g, s);
    const Graph fused = expect_fused_matches(g, "y", 1.0f);
    auto counts = op_counts(fused);
    // q, k, v and the output's bias; the scores' scale. The output's product has a bias, so v's
    // Mul stays.
    EXPECT_EQ(counts[op_names::kFusedBatchMatMul], 5);
    EXPECT_EQ(counts["BatchMatMul"], 0);
    EXPECT_EQ(counts["Add"] + counts["Div"], 0);
    EXPECT_EQ(counts["Mul"], 1);
    // scores_t went into the flag; kh's [1,2,0] became [1,0,2] and the flag: rows move, no
    // element-wise transpose is left.
    EXPECT_EQ(counts["Transpose"], 4);
    for (const Node& n : fused.nodes()) {
      if (n.op == "Transpose") {
        EXPECT_EQ(n.attrs.get_ints("perm"), (std::vector<int64_t>{1, 0, 2}));
      }
    }
  }
}

TEST(TransformerFusion, ProductsReadElsewhereOrWithOtherAddendsStayUnfused) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {3, 4, 6}, "x");
  Output w = ops::constant(g, testing::random_tensor({6, 5}, 3));
  // Read by the Add and the Relu.
  Output shared = ops::batch_matmul(g, x, w, false, false, "shared");
  Output biased = ops::add(g, shared, ops::constant(g, testing::random_tensor({5}, 4)), "biased");
  // Not a bias over the last axis.
  Output product = ops::batch_matmul(g, x, w, false, false, "product");
  Output rows = ops::add(g, product, ops::constant(g, testing::random_tensor({4, 5}, 5)), "rows");
  // A Transpose read by a product and by a Relu keeps its perm.
  Output xt = ops::transpose(g, x, {0, 2, 1}, "xt");
  Output gram = ops::batch_matmul(g, xt, x, false, false, "gram");  // [3, 6, 6]
  Output y = ops::add(g, ops::add(g, biased, rows), ops::relu(g, shared), "sum");
  Output rest =
      ops::add(g, ops::reduce_sum(g, gram, {1, 2}), ops::reduce_sum(g, ops::relu(g, xt), {1, 2}));
  ops::add(g, ops::reduce_sum(g, y, {1, 2}), rest, "y");
  const Graph fused = expect_fused_matches(g, "y", 1.0f);
  auto counts = op_counts(fused);
  EXPECT_EQ(counts[op_names::kFusedBatchMatMul], 0);
  EXPECT_EQ(counts["BatchMatMul"], 3);
  EXPECT_EQ(counts["Transpose"], 1);
}

TEST(TransformerFusion, ScalarScaledOperandsBecomeTheProductsAlphaWhenReadByItAlone) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {3, 4, 6}, "x");
  Output w = ops::constant(g, testing::random_tensor({6, 5}, 3));
  Output third = ops::scalar(g, 3.0f, "three");
  // Scalar first, and both operands scaled: alpha 0.25 * 3.
  Output both =
      ops::batch_matmul(g, ops::mul(g, ops::scalar(g, 0.25f, "quarter"), x),
                        ops::div(g, w, ops::scalar(g, 1.0f / 3, "third")), false, false, "both");
  // Read by the product and by a Relu.
  Output shared = ops::div(g, x, third, "shared");
  Output kept = ops::batch_matmul(g, shared, w, false, false, "kept");
  // Not a scalar.
  Output rows = ops::mul(g, x, ops::constant(g, testing::random_tensor({4, 1}, 4)), "rows");
  Output by_rows = ops::batch_matmul(g, rows, w, false, false, "by_rows");
  Output sum = ops::add(g, ops::add(g, both, kept), by_rows);
  ops::add(g, ops::reduce_sum(g, sum, {1, 2}), ops::reduce_sum(g, ops::relu(g, shared), {1, 2}),
           "y");
  const Graph fused = expect_fused_matches(g, "y", 1.0f);
  auto counts = op_counts(fused);
  EXPECT_EQ(counts[op_names::kFusedBatchMatMul], 1);
  EXPECT_EQ(counts["BatchMatMul"], 2);
  EXPECT_EQ(counts["Div"] + counts["Mul"], 2);
  for (const Node& n : fused.nodes()) {
    if (n.op == op_names::kFusedBatchMatMul) {
      EXPECT_FLOAT_EQ(static_cast<float>(n.attrs.get_float("alpha")), 0.75f);
    }
  }
}

TEST(TransformerFusion, FusedOpsRefuseGradientsByName) {
  for (const char* op : {"LayerNorm", "Gelu", op_names::kFusedBatchMatMul}) {
    Graph g;
    Output x = ops::placeholder(g, DType::f32, {2, 4}, "x");
    Output gamma = ops::constant(g, testing::random_tensor({4}, 1));
    Output beta = ops::constant(g, testing::random_tensor({4}, 2));
    const std::string fused_op = op;
    Output y =
        fused_op == "Gelu" ? ops::gelu(g, x, "fused")
        : fused_op == "LayerNorm"
            ? ops::layer_norm(g, x, gamma, beta, 1e-5, "fused")
            : ops::fused_batch_matmul(g, x, ops::constant(g, testing::random_tensor({4, 4}, 3)),
                                      beta, false, false, "fused");
    Output loss = ops::reduce_sum(g, y, {0, 1}, false, "loss");
    try {
      gradients(g, loss, {x});
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      const std::string want = "node 'fused' (" + fused_op + ")";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("inference graphs"), std::string::npos) << e.what();
    }
  }
}

// The largest relative error of `erf` (float in, float out) against std::erf in double over
// [-6, 6] in steps of 1/1024, zero and tiny values.
template <typename Erf>
double worst_relative_error(Erf erf) {
  std::vector<float> x;
  for (float v = -6.0f; v <= 6.0f; v += 1.0f / 1024) x.push_back(v);
  for (float v : {0.0f, 1e-30f, -1e-30f, 1e-6f}) x.push_back(v);
  std::vector<float> y(x.size());
  erf(x, y);
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::erf(static_cast<double>(x[i]));
    worst = std::max(worst, std::fabs(y[i] - want) / std::max(std::fabs(want), 1e-30));
  }
  return worst;
}

TEST(TransformerFusion, RationalErfStaysCloseToStdErf) {
  EXPECT_LT(worst_relative_error([](const std::vector<float>& x, std::vector<float>& y) {
              for (size_t i = 0; i < x.size(); ++i) y[i] = erf_rational::erf(x[i]);
            }),
            6e-7);
#if defined(__x86_64__)
  if (!cpu_features().avx512f) GTEST_SKIP() << "no AVX-512";
  EXPECT_LT(worst_relative_error([](const std::vector<float>& x, std::vector<float>& y) {
              erf_avx512(x.data(), y.data(), static_cast<int64_t>(x.size()));
            }),
            6e-7);
#endif
}

}  // namespace
}  // namespace sf
