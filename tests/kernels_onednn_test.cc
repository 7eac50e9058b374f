// Every oneDNN kernel against the reference kernel over a shape set with sizes 1, primes, odd
// channel counts, strides, padding, dilation and groups.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <oneapi/dnnl/dnnl.hpp>

#include "cpu/cpu_features.h"
#include "graph/graph.h"
#include "kernels/onednn/gemm.h"
#include "kernels/onednn/onednn_common.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::expect_impl_matches_reference;
using testing::random_tensor;

// Sums of up to ~1000 products of values in [-1, 1] in float.
constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-3;

struct ConvCase {
  const char* name;
  Shape x, w;
  ops::Conv2DOptions options;
};

Attrs conv_attrs(const ops::Conv2DOptions& o) {
  return {{"strides", o.strides},
          {"padding", o.padding},
          {"pads", o.pads},
          {"dilations", o.dilations},
          {"groups", o.groups}};
}

TEST(OneDnnRunner, NamesTheImplementationWithoutItsIsa) {
  EXPECT_EQ(onednn::implementation_name("brgconv:avx512_core"), "brgconv");
  EXPECT_EQ(onednn::implementation_name("jit_1x1:avx512_core"), "jit_1x1");
  EXPECT_EQ(onednn::implementation_name("x64:gemm:jit"), "gemm");
  EXPECT_EQ(onednn::implementation_name("x64:gemm_s8u8s32:jit"), "gemm_s8u8s32");
  EXPECT_EQ(onednn::implementation_name("ref:any"), "ref");
}

class OneDnnConv : public ::testing::TestWithParam<ConvCase> {
 protected:
  // The forward output shape, from the op's own shape function.
  Shape y_shape() const {
    Graph g;
    const ConvCase& c = GetParam();
    return g
        .type(ops::conv2d(g, ops::placeholder(g, DType::f32, c.x),
                          ops::placeholder(g, DType::f32, c.w), c.options))
        .shape;
  }
};

TEST_P(OneDnnConv, ForwardMatchesReference) {
  const ConvCase& c = GetParam();
  expect_impl_matches_reference(
      [&](Graph& g, const std::vector<Output>& in) {
        return ops::conv2d(g, in[0], in[1], c.options);
      },
      {random_tensor(c.x, 1), random_tensor(c.w, 2)}, "onednn", kRtol, kAtol);
}

TEST_P(OneDnnConv, BackpropInputMatchesReference) {
  const ConvCase& c = GetParam();
  expect_impl_matches_reference(
      [&](Graph& g, const std::vector<Output>& in) {
        Attrs a = conv_attrs(c.options);
        a.set("input_shape", c.x);
        return g.add("Conv2DBackpropInput", {in[0], in[1]}, a);
      },
      {random_tensor(y_shape(), 3), random_tensor(c.w, 4)}, "onednn", kRtol, kAtol);
}

TEST_P(OneDnnConv, BackpropFilterMatchesReference) {
  const ConvCase& c = GetParam();
  expect_impl_matches_reference(
      [&](Graph& g, const std::vector<Output>& in) {
        Attrs a = conv_attrs(c.options);
        a.set("filter_shape", c.w);
        return g.add("Conv2DBackpropFilter", {in[0], in[1]}, a);
      },
      {random_tensor(c.x, 5), random_tensor(y_shape(), 6)}, "onednn", kRtol, kAtol);
}

// The inference kernel with bias and activation inside the primitive, in each layout it can
// choose, against the composed reference.
TEST_P(OneDnnConv, FusedForwardMatchesReferenceInEveryLayout) {
  const ConvCase& c = GetParam();
  const Shape bias{c.w[3]};
  for (const char* activation : {"none", "relu", "relu6"}) {
    for (const char* impl : {"onednn", "onednn_nhwc", "onednn_blocked"}) {
      SCOPED_TRACE(std::string(impl) + " " + activation);
      expect_impl_matches_reference(
          [&](Graph& g, const std::vector<Output>& in) {
            Attrs a = conv_attrs(c.options);
            a.set("activation", std::string(activation));
            return g.add("FusedConv2D", {in[0], in[1], in[2]}, a);
          },
          {random_tensor(c.x, 7), random_tensor(c.w, 8), random_tensor(bias, 9)}, impl, kRtol,
          kAtol);
    }
  }
}

// The conv that also adds a tensor of its output's shape (a residual, or a split conv's partial
// sum) before the activation. Where oneDNN has no fit (gemm-based convs) the composed kernel
// runs; AddRunsInsideTheConvolution checks that the usual shapes get oneDNN.
TEST_P(OneDnnConv, FusedAddForwardMatchesReferenceInEveryLayout) {
  const ConvCase& c = GetParam();
  const Shape bias{c.w[3]};
  for (const char* activation : {"none", "relu"}) {
    for (const char* impl : {"onednn", "onednn_nhwc", "onednn_blocked"}) {
      SCOPED_TRACE(std::string(impl) + " " + activation);
      expect_impl_matches_reference(
          [&](Graph& g, const std::vector<Output>& in) {
            Attrs a = conv_attrs(c.options);
            a.set("activation", std::string(activation));
            return g.add("FusedConv2DAdd", {in[0], in[1], in[2], in[3]}, a);
          },
          {random_tensor(c.x, 7), random_tensor(c.w, 8), random_tensor(bias, 9),
           random_tensor(y_shape(), 10)},
          impl, kRtol, kAtol, /*allow_fallback=*/true);
    }
  }
}

TEST(OneDnnFusedConv, AddRunsInsideTheConvolution) {
  if (!testing::onednn_jit_covers_all()) GTEST_SKIP() << "oneDNN may decline outside x86-64";
  for (const Shape& w : {Shape{1, 1, 64, 128}, Shape{3, 3, 64, 64}}) {
    expect_impl_matches_reference(
        [&](Graph& g, const std::vector<Output>& in) {
          Attrs a = conv_attrs({.padding = "SAME"});
          a.set("activation", std::string("relu"));
          return g.add("FusedConv2DAdd", {in[0], in[1], in[2], in[3]}, a);
        },
        {random_tensor({2, 13, 13, 64}, 7), random_tensor(w, 8), random_tensor({w[3]}, 9),
         random_tensor({2, 13, 13, w[3]}, 10)},
        "onednn", kRtol, kAtol);
  }
}

// A conv made for one thread says so in the profile, and leaves the session's thread count as
// it found it.
TEST(OneDnnFusedConv, OneThreadConvolutionSaysSoAndRestoresTheThreadCount) {
  Graph g;
  const Output x = ops::placeholder(g, DType::f32, {1, 7, 7, 16}, "x");
  Attrs a = conv_attrs({.padding = "SAME"});
  a.set("activation", std::string("relu"));
  const Output y = g.add("FusedConv2D",
                         {x, ops::constant(g, random_tensor({1, 1, 16, 16}, 1)),
                          ops::constant(g, random_tensor({16}, 2))},
                         a, "conv");
  Session session(g, {.threads = 2, .kernel_impl = "onednn_1thread"});
  session.set_profiling(true);
  const int threads = omp_get_max_threads();
  session.run({{x, random_tensor({1, 7, 7, 16}, 3)}}, {y});
  EXPECT_EQ(omp_get_max_threads(), threads);
  ASSERT_EQ(session.profile().size(), 1u);
  EXPECT_NE(session.profile()[0].impl.find(":1thread"), std::string::npos)
      << session.profile()[0].impl;
}

// The layout is measured once per problem: the fire modules of SqueezeNet, each with the same
// shapes, must not land on different convolutions by measurement noise.
TEST(OneDnnFusedConv, IdenticalNodesRunTheSameConvolution) {
  Graph g;
  const Output x = ops::placeholder(g, DType::f32, {1, 27, 27, 32}, "x");
  std::vector<Output> ys;
  for (int i = 0; i < 6; ++i) {
    Attrs a = conv_attrs({.padding = "SAME"});
    a.set("activation", std::string("relu"));
    ys.push_back(g.add("FusedConv2D",
                       {x, ops::constant(g, random_tensor({3, 3, 32, 128}, 20 + i)),
                        ops::constant(g, random_tensor({128}, 30 + i))},
                       a));
  }
  Session session(g, {.threads = 2, .kernel_impl = "onednn"});
  session.set_profiling(true);
  session.run({{x, random_tensor({1, 27, 27, 32}, 11)}}, ys);
  std::vector<std::string> impls;
  for (const NodeProfile& p : session.profile())
    if (p.op == "FusedConv2D") impls.push_back(p.impl);
  ASSERT_EQ(impls.size(), 6u);
  for (const std::string& impl : impls) EXPECT_EQ(impl, impls[0]);
  EXPECT_NE(impls[0], "onednn");  // names oneDNN's implementation
}

// The fp32 and int8 convs keep their measured choice per problem: a key measured once answers
// the same from then on; a measurement that found nothing is not remembered.
TEST(MeasuredChoice, MeasuresAProblemOnceAndRemembersOnlyAnAnswer) {
  int measured = 0;
  auto answering = [&measured](std::optional<size_t> answer) {
    return [&measured, answer] {
      ++measured;
      return answer;
    };
  };
  // The choices live as long as the process: keys of their own each time the test runs.
  static int runs = 0;
  const std::string problem = "test/problem/" + std::to_string(++runs);
  EXPECT_EQ(onednn::measured_choice(problem, answering(std::nullopt)), std::nullopt);
  EXPECT_EQ(onednn::measured_choice(problem, answering(2)), 2u);
  EXPECT_EQ(onednn::measured_choice(problem, answering(5)), 2u);
  EXPECT_EQ(onednn::measured_choice(problem + "/other", answering(5)), 5u);
  EXPECT_EQ(measured, 3);
}

// Winograd exists for 3x3 stride-1 layers; its transforms round differently from a direct
// convolution, within the same tolerance. oneDNN implements it for AVX-512 only.
TEST(OneDnnFusedConv, WinogradMatchesReference) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx512 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core);
  if ((isa & avx512) != avx512) GTEST_SKIP() << "oneDNN's ISA lacks avx512_core: no Winograd";
  for (const char* activation : {"none", "relu"}) {
    SCOPED_TRACE(activation);
    expect_impl_matches_reference(
        [&](Graph& g, const std::vector<Output>& in) {
          Attrs a = conv_attrs({.padding = "SAME"});
          a.set("activation", std::string(activation));
          return g.add("FusedConv2D", {in[0], in[1], in[2]}, a);
        },
        {random_tensor({1, 14, 13, 32}, 7), random_tensor({3, 3, 32, 48}, 8),
         random_tensor({48}, 9)},
        "onednn_winograd", kRtol, kAtol);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OneDnnConv,
    ::testing::Values(
        ConvCase{"size1", {1, 1, 1, 1}, {1, 1, 1, 1}, {}},
        ConvCase{"same3x3_odd_channels", {2, 7, 7, 3}, {3, 3, 3, 5}, {.padding = "SAME"}},
        ConvCase{"stride2_same_primes",
                 {1, 13, 11, 5},
                 {5, 5, 5, 7},
                 {.strides = {2, 2}, .padding = "SAME"}},
        ConvCase{"valid_stride21", {3, 7, 13, 16}, {3, 3, 16, 17}, {.strides = {2, 1}}},
        ConvCase{"explicit_uneven",
                 {2, 9, 8, 4},
                 {3, 2, 4, 6},
                 {.strides = {2, 2}, .padding = "EXPLICIT", .pads = {1, 2, 0, 3}}},
        ConvCase{
            "dilation2", {1, 13, 13, 8}, {3, 3, 8, 16}, {.padding = "SAME", .dilations = {2, 2}}},
        ConvCase{"groups2", {2, 7, 7, 6}, {3, 3, 3, 10}, {.padding = "SAME", .groups = 2}},
        ConvCase{"depthwise16", {2, 9, 9, 16}, {3, 3, 1, 16}, {.padding = "SAME", .groups = 16}},
        ConvCase{
            "depthwise_multiplier2", {1, 7, 7, 3}, {3, 3, 1, 6}, {.padding = "SAME", .groups = 3}},
        ConvCase{"pointwise", {2, 7, 7, 17}, {1, 1, 17, 33}, {}},
        ConvCase{"mnist_conv1", {2, 28, 28, 1}, {5, 5, 1, 32}, {.padding = "SAME"}},
        ConvCase{"mnist_conv2", {2, 14, 14, 32}, {5, 5, 32, 64}, {.padding = "SAME"}}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

struct MatMulCase {
  const char* name;
  int64_t m, k, n;
};

class OneDnnMatMul : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(OneDnnMatMul, AllTransposesMatchReference) {
  const MatMulCase& c = GetParam();
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "transpose_a " << ta << " transpose_b " << tb);
      Shape a = ta ? Shape{c.k, c.m} : Shape{c.m, c.k};
      Shape b = tb ? Shape{c.n, c.k} : Shape{c.k, c.n};
      expect_impl_matches_reference(
          [=](Graph& g, const std::vector<Output>& in) {
            return ops::matmul(g, in[0], in[1], ta, tb);
          },
          {random_tensor(a, 7), random_tensor(b, 8)}, "onednn", kRtol, kAtol);
    }
}

// Frozen weights (a Const input, packed once) and fed weights, with each activation.
TEST_P(OneDnnMatMul, FusedMatchesReference) {
  const MatMulCase& c = GetParam();
  for (bool tb : {false, true})
    for (bool frozen : {false, true})
      for (const char* activation : {"none", "relu", "relu6"}) {
        SCOPED_TRACE(::testing::Message()
                     << "transpose_b " << tb << " frozen " << frozen << " " << activation);
        const Tensor weights = random_tensor(tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, 9);
        expect_impl_matches_reference(
            [&](Graph& g, const std::vector<Output>& in) {
              Output b = frozen ? ops::constant(g, weights) : in[1];
              return g.add("FusedMatMul", {in[0], b, in[2]},
                           {{"transpose_a", false},
                            {"transpose_b", tb},
                            {"activation", std::string(activation)}});
            },
            {random_tensor({c.m, c.k}, 7), weights, random_tensor({c.n}, 10)}, "onednn", kRtol,
            kAtol);
      }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OneDnnMatMul,
    ::testing::Values(MatMulCase{"size1", 1, 1, 1}, MatMulCase{"primes", 7, 13, 5},
                      MatMulCase{"vector_width_pm1", 17, 15, 33}, MatMulCase{"outer", 13, 1, 7},
                      MatMulCase{"fc2", 64, 1024, 10},
                      MatMulCase{"few_rows_long_b", 3, 40, 50}),
    [](const ::testing::TestParamInfo<MatMulCase>& info) { return info.param.name; });

// How an fp32 MatMul runs: with b transposed, a product of few rows with a large b (a dense
// layer's input gradient) as (b x a^T)^T, its output transposed back, the others on the matmul
// primitive; with b as stored, on oneDNN's sgemm. Each matches the reference.
TEST(OneDnnMatMulForms, EachProductRunsInItsFormAndMatchesTheReference) {
  struct Product {
    Shape a, b;
    bool ta, tb;
    const char* impl;
  };
  for (const Product& p : {Product{{3, 40}, {50, 40}, false, true, "onednn:swapped"},
                           Product{{1, 17}, {33, 17}, false, true, "onednn:swapped"},
                           Product{{64, 1024}, {10, 1024}, false, true, "onednn"},  // short b
                           Product{{64, 10}, {1024, 10}, false, true, "onednn"},    // K of 10
                           Product{{3, 40}, {40, 50}, false, false, "onednn:sgemm"},
                           Product{{40, 3}, {40, 50}, true, false, "onednn:sgemm"},
                           Product{{1, 1}, {1, 1}, false, false, "onednn:sgemm"}}) {
    SCOPED_TRACE(fmt::format("{}{} x {}{}", shape_str(p.a), p.ta ? "^T" : "", shape_str(p.b),
                             p.tb ? "^T" : ""));
    Graph g;
    const Output a = ops::placeholder(g, DType::f32, p.a, "a");
    const Output b = ops::placeholder(g, DType::f32, p.b, "b");
    const Output y = ops::matmul(g, a, b, p.ta, p.tb, "y");
    Session session(g, {.threads = 2, .kernel_impl = "onednn"});
    session.set_profiling(true);
    session.run({{a, random_tensor(p.a, 1)}, {b, random_tensor(p.b, 2)}}, {y});
    ASSERT_EQ(session.profile().size(), 1u);
    EXPECT_EQ(session.profile()[0].impl, p.impl);
    expect_impl_matches_reference(
        [&](Graph& graph, const std::vector<Output>& in) {
          return ops::matmul(graph, in[0], in[1], p.ta, p.tb);
        },
        {random_tensor(p.a, 3), random_tensor(p.b, 4)}, "onednn", kRtol, kAtol);
  }
}

struct PoolCase {
  const char* name;
  Shape x;
  ops::PoolOptions options;
};

class OneDnnPool : public ::testing::TestWithParam<PoolCase> {
 protected:
  // Values on a coarse grid, so windows hold ties and MaxPoolGrad's first-maximum rule counts.
  static Tensor tied(const Shape& shape, uint32_t seed) {
    Tensor t = random_tensor(shape, seed);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = std::round(t.data<float>()[i] * 2.0f) / 2.0f;
    return t;
  }
  // MaxPoolGrad of the case's pooling (with the Relu gradient folded in when `relu`) on `impl`.
  static void expect_max_pool_grad_matches_reference(const std::string& impl, bool relu,
                                                     double rtol, double atol) {
    const PoolCase& c = GetParam();
    Graph shape_graph;
    const Shape y =
        shape_graph
            .type(ops::max_pool(shape_graph, ops::placeholder(shape_graph, DType::f32, c.x),
                                c.options))
            .shape;
    expect_impl_matches_reference(
        [&](Graph& g, const std::vector<Output>& in) {
          Output pooled = ops::max_pool(g, in[0], c.options);
          return g.add("MaxPoolGrad", {in[0], pooled, in[1]},
                       {{"ksize", c.options.ksize},
                        {"strides", c.options.strides},
                        {"padding", c.options.padding},
                        {"pads", c.options.pads},
                        {"relu", relu}});
        },
        {tied(c.x, 10), random_tensor(y, 11)}, impl, rtol, atol);
  }
};

TEST_P(OneDnnPool, MaxPoolMatchesReference) {
  const PoolCase& c = GetParam();
  expect_impl_matches_reference(
      [&](Graph& g, const std::vector<Output>& in) { return ops::max_pool(g, in[0], c.options); },
      {tied(c.x, 9)}, "onednn", kRtol, kAtol);
}

TEST_P(OneDnnPool, MaxPoolGradMatchesReference) {
  expect_max_pool_grad_matches_reference("onednn", false, kRtol, kAtol);
}

// Our AVX-512 loops (float_loops, chosen over oneDNN for pooling), with and without the Relu
// gradient that training folds into MaxPoolGrad: the same positions get the same values (summed
// in another order where windows overlap).
TEST_P(OneDnnPool, FloatLoopsMaxPoolGradMatchesReference) {
  for (bool relu : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "relu " << relu);
    expect_max_pool_grad_matches_reference("float_loops", relu, 1e-6, 1e-6);
  }
}

TEST_P(OneDnnPool, AvgPoolAndGradMatchReference) {
  const PoolCase& c = GetParam();
  for (bool include : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "count_include_pad " << include);
    ops::PoolOptions o = c.options;
    o.count_include_pad = include;
    expect_impl_matches_reference(
        [&](Graph& g, const std::vector<Output>& in) { return ops::avg_pool(g, in[0], o); },
        {random_tensor(c.x, 12)}, "onednn", kRtol, kAtol);
    // The forward pool runs with reference kernels in one session and oneDNN in the other;
    // both agree (checked above), so AvgPoolGrad sees the same dy.
    expect_impl_matches_reference(
        [&](Graph& g, const std::vector<Output>& in) {
          Output dy = ops::avg_pool(g, in[0], o);
          return g.add("AvgPoolGrad", {dy},
                       {{"ksize", o.ksize},
                        {"strides", o.strides},
                        {"padding", o.padding},
                        {"pads", o.pads},
                        {"count_include_pad", include},
                        {"input_shape", c.x}});
        },
        {random_tensor(c.x, 13)}, "onednn", kRtol, kAtol);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OneDnnPool,
    ::testing::Values(
        PoolCase{"size1", {1, 1, 1, 1}, {.ksize = {1, 1}, .strides = {1, 1}}},
        PoolCase{"k2s2_valid_odd", {2, 7, 7, 3}, {}},
        PoolCase{"k3s2_same_primes",
                 {1, 13, 11, 5},
                 {.ksize = {3, 3}, .strides = {2, 2}, .padding = "SAME"}},
        PoolCase{"explicit_uneven",
                 {2, 9, 8, 17},
                 {.ksize = {3, 3}, .strides = {2, 1}, .padding = "EXPLICIT", .pads = {1, 0, 2, 1}}},
        PoolCase{"mnist_pool1", {2, 28, 28, 32}, {}},
        PoolCase{"k2s2_same_odd_channels80",
                 {2, 7, 9, 80},
                 {.ksize = {2, 2}, .strides = {2, 2}, .padding = "SAME"}},
        PoolCase{"k3s3_tiles_channels33", {1, 9, 6, 33}, {.ksize = {3, 3}, .strides = {3, 3}}}),
    [](const ::testing::TestParamInfo<PoolCase>& info) { return info.param.name; });

TEST(OneDnnGlobalAvgPool, MatchesReference) {
  for (const Shape& x : {Shape{1, 13, 13, 1000}, Shape{2, 7, 5, 17}, Shape{3, 1, 1, 8}}) {
    SCOPED_TRACE(shape_str(x));
    expect_impl_matches_reference(
        [](Graph& g, const std::vector<Output>& in) { return g.add("GlobalAvgPool", {in[0]}); },
        {random_tensor(x, 11)}, "onednn", kRtol, kAtol);
  }
}

TEST(OneDnnTranspose, PermutationsMatchReference) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{1, 3, 17, 19}, {0, 2, 3, 1}},  // NCHW -> NHWC, as ONNX imports start
      {{2, 5, 7, 3}, {0, 3, 1, 2}},    // NHWC -> NCHW
      {{7, 13}, {1, 0}},
      {{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}},
      {{1}, {0}}};
  for (const auto& [shape, perm] : cases) {
    SCOPED_TRACE(shape_str(shape));
    expect_impl_matches_reference(
        [&](Graph& g, const std::vector<Output>& in) {
          return g.add("Transpose", {in[0]}, {{"perm", perm}});
        },
        {random_tensor(shape, 11)}, "onednn", 0, 0);
  }
}

// The AVX-512 NCHW -> NHWC transpose of RGB images, over widths that leave 0..15 pixels after
// the last full vector.
TEST(Avx512Transpose, RgbPlanesToPixelsMatchReference) {
  if (!cpu_features().avx512f) GTEST_SKIP() << "no AVX-512: the kernel declines";
  for (const Shape& shape : {Shape{1, 3, 224, 224}, Shape{2, 3, 5, 17}, Shape{1, 3, 1, 1},
                             Shape{3, 3, 7, 31}, Shape{1, 3, 2, 16}}) {
    SCOPED_TRACE(shape_str(shape));
    expect_impl_matches_reference(
        [&](Graph& g, const std::vector<Output>& in) {
          return g.add("Transpose", {in[0]}, {{"perm", std::vector<int64_t>{0, 2, 3, 1}}});
        },
        {random_tensor(shape, 11)}, "avx512", 0, 0);
  }
}

// Convs of single-channel images (a first conv's), which our AVX-512 loops take over from
// oneDNN in training: outputs in and beyond one, two and four vectors, ragged last vectors,
// strides, dilations and an unpadded 7x7.
struct SingleChannelCase {
  Shape x, w;
  ops::Conv2DOptions options;
};

const std::vector<SingleChannelCase>& single_channel_cases() {
  static const std::vector<SingleChannelCase> cases = {
      {{2, 28, 28, 1}, {5, 5, 1, 32}, {.padding = "SAME"}},
      {{1, 13, 11, 1}, {3, 3, 1, 20}, {.strides = {2, 2}, .padding = "SAME"}},
      {{2, 12, 12, 1}, {3, 5, 1, 7}, {.padding = "SAME", .dilations = {2, 2}}},
      {{3, 15, 14, 1}, {7, 7, 1, 83}, {}},
      {{1, 6, 3, 1}, {1, 1, 1, 16}, {}},
      {{8, 28, 28, 1}, {5, 5, 1, 8}, {.padding = "SAME"}},
  };
  return cases;
}

// The filter gradient: runs of up to six taps per filter row, 32 outputs at a time, the last
// vectors masked.
TEST(FloatLoopsConvFilterGrad, SingleChannelMatchesReference) {
  for (const SingleChannelCase& c : single_channel_cases()) {
    SCOPED_TRACE(shape_str(c.w));
    Graph shape_graph;
    const Shape y = shape_graph
                        .type(ops::conv2d(shape_graph,
                                          ops::placeholder(shape_graph, DType::f32, c.x),
                                          ops::placeholder(shape_graph, DType::f32, c.w),
                                          c.options))
                        .shape;
    expect_impl_matches_reference(
        [&](Graph& g, const std::vector<Output>& in) {
          Attrs a = conv_attrs(c.options);
          a.set("filter_shape", c.w);
          return g.add("Conv2DBackpropFilter", {in[0], in[1]}, a);
        },
        {random_tensor(c.x, 16), random_tensor(y, 17)}, "float_loops", kRtol, kAtol);
  }
}

// The forward pass (the filter a variable): four output pixels at a time, up to four vectors of
// outputs, each activation, against the reference to float rounding.
TEST(FloatLoopsSingleChannelConv, MatchesReferenceForEveryActivation) {
  for (const SingleChannelCase& c : single_channel_cases())
    for (const char* activation : {"none", "relu", "relu6"}) {
      SCOPED_TRACE(shape_str(c.w) + " " + activation);
      const Shape bias = {c.w[3]};
      expect_impl_matches_reference(
          [&](Graph& g, const std::vector<Output>& in) {
            Attrs a = conv_attrs(c.options);
            a.set("activation", std::string(activation));
            return g.add("FusedConv2D", {in[0], in[1], in[2]}, a);
          },
          {random_tensor(c.x, 7), random_tensor(c.w, 8), random_tensor(bias, 9)},
          "float_loops", 1e-5, 1e-5);
    }
}

// The sgemm wrapper data parallelism forms gradients from factors with: rows of a column slice
// of a transposed matrix (lda wider than m), alpha and beta, against plain loops in double.
TEST(OneDnnGemm, MatchesPlainLoopsWithTransposeAndStrides) {
  struct Case {
    bool transpose_a;
    int64_t m, n, k, lda_extra, a_offset;
    float alpha, beta;
  };
  for (const Case& c : std::vector<Case>{{true, 7, 13, 5, 4, 3, 0.5f, 0.0f},
                                         {true, 1, 33, 64, 10, 9, 1.0f, 0.0f},
                                         {false, 6, 17, 11, 2, 1, 2.0f, 1.0f},
                                         {true, 0, 5, 3, 0, 0, 1.0f, 0.0f}}) {
    SCOPED_TRACE(::testing::Message() << "m " << c.m << " n " << c.n << " k " << c.k);
    const int64_t a_rows = c.transpose_a ? c.k : c.m, a_cols = c.transpose_a ? c.m : c.k;
    const int64_t lda = a_cols + c.a_offset + c.lda_extra;
    const Tensor a = random_tensor({a_rows, lda}, 21), b = random_tensor({c.k, c.n}, 22);
    Tensor out = random_tensor({c.m, c.n}, 23);
    const Tensor before = out.clone();
    const float* pa = a.data<float>() + c.a_offset;
    onednn::gemm_f32(c.transpose_a, c.m, c.n, c.k, c.alpha, pa, lda, b.data<float>(), c.n,
                     c.beta, out.data<float>(), c.n, "test");
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0.0;
        for (int64_t p = 0; p < c.k; ++p)
          sum += static_cast<double>(c.transpose_a ? pa[p * lda + i] : pa[i * lda + p]) *
                 b.data<float>()[p * c.n + j];
        const double want = c.alpha * sum + c.beta * before.data<float>()[i * c.n + j];
        EXPECT_NEAR(out.data<float>()[i * c.n + j], want, 1e-4 * (1.0 + std::abs(want)))
            << i << ", " << j;
      }
  }
}

// With no impl requested, the session picks oneDNN for every product and the float_loops
// kernel for max pooling (which keeps its forward and gradient on one definition of the first
// maximum, kernels/float_loop_kernels.cc).
TEST(OneDnnSelection, DenseNodesUseOneDnn) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2, 8, 8, 3}, "x");
  Output w = ops::placeholder(g, DType::f32, {3, 3, 3, 4}, "w");
  Output a = ops::placeholder(g, DType::f32, {2, 64}, "a");
  Output b = ops::placeholder(g, DType::f32, {64, 5}, "b");
  Output pool = ops::max_pool(g, ops::conv2d(g, x, w, {.padding = "SAME"}, "conv"), {}, "pool");
  Output fc = ops::matmul(g, a, b, false, false, "fc");
  Session session(g);
  session.run({{x, random_tensor({2, 8, 8, 3}, 1)},
               {w, random_tensor({3, 3, 3, 4}, 2)},
               {a, random_tensor({2, 64}, 3)},
               {b, random_tensor({64, 5}, 4)}},
              {pool, fc});
  auto choices = session.kernel_choices();
  EXPECT_EQ(choices["conv"], "onednn");
  EXPECT_EQ(choices["pool"], "float_loops");
  EXPECT_EQ(choices["fc"], "onednn");
}

}  // namespace
}  // namespace sf
