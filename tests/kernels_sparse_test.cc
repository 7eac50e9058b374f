// The sparse kernels (kernels/sparse) against the reference kernels on frozen weights of every
// sparsity, from dense to empty, and the run-time choice between the sparse and dense paths.
#include <gtest/gtest.h>

#include <random>

#include "graph/graph.h"
#include "kernels/kernel.h"
#include "kernels/sparse/block_product.h"
#include "kernels/sparse/sparse_accumulate.h"
#include "kernels/sparse/sparse_kernels.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using sparse::SparseKernel;
using testing::expect_impl_matches_reference;
using testing::random_tensor;

constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-4;

// FusedMatMul of an [m, k] input with constant `weights` ([k, n], or [n, k] with transpose_b)
// and a bias: the sparse kernel against the reference.
void expect_fused_matmul_matches_reference(int64_t m, const Tensor& weights, bool transpose_b,
                                           const char* activation, double atol) {
  const int64_t k = weights.dim(transpose_b ? 1 : 0), n = weights.dim(transpose_b ? 0 : 1);
  expect_impl_matches_reference(
      [&](Graph& g, const std::vector<Output>& in) {
        return g.add("FusedMatMul", {in[0], ops::constant(g, weights), in[2]},
                     {{"transpose_a", false},
                      {"transpose_b", transpose_b},
                      {"activation", std::string(activation)}});
      },
      {random_tensor({m, k}, 1, -4.0f, 4.0f), weights, random_tensor({n}, 2)}, "sparse_only",
      kRtol, atol);
}

// Random weights with about `sparsity` of them exactly zero.
Tensor sparse_tensor(const Shape& shape, double sparsity, uint32_t seed) {
  Tensor t = random_tensor(shape, seed);
  std::mt19937 rng(seed + 1000);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (u(rng) < sparsity) t.data<float>()[i] = 0.0f;
  return t;
}

// Zeros every `every`-th column of a row-major [rows, cols] tensor: all-zero outputs.
Tensor with_zero_columns(Tensor t, int64_t every) {
  const int64_t cols = t.shape().back();
  for (int64_t i = 0; i < t.numel(); ++i)
    if ((i % cols) % every == 0) t.data<float>()[i] = 0.0f;
  return t;
}

Tensor single_nonzero(const Shape& shape, int64_t at) {
  Tensor t(DType::f32, shape);
  t.fill_zero();
  t.data<float>()[at % t.numel()] = 0.75f;
  return t;
}

// ---- MatMul ----------------------------------------------------------------------------------

struct MatMulCase {
  const char* name;
  int64_t m, k, n;
};

class SparseMatMul : public ::testing::TestWithParam<MatMulCase> {
 protected:
  // Every weight pattern worth checking for this shape.
  std::vector<std::pair<std::string, Tensor>> weight_patterns(const Shape& w) const {
    return {{"dense", random_tensor(w, 3)},
            {"half", sparse_tensor(w, 0.5, 4)},
            {"90%", sparse_tensor(w, 0.9, 5)},
            {"99%", sparse_tensor(w, 0.99, 6)},
            {"zero_outputs", with_zero_columns(sparse_tensor(w, 0.7, 7), 3)},
            {"single", single_nonzero(w, 7 * w[0] + 5)},
            {"empty", sparse_tensor(w, 1.0, 8)}};
  }
};

TEST_P(SparseMatMul, FusedMatchesReference) {
  const MatMulCase& c = GetParam();
  for (bool tb : {false, true})
    for (const auto& [pattern, weights] : weight_patterns(tb ? Shape{c.n, c.k} : Shape{c.k, c.n}))
      for (const char* activation : {"none", "relu", "relu6"}) {
        SCOPED_TRACE(::testing::Message() << pattern << " transpose_b " << tb << " " << activation);
        expect_fused_matmul_matches_reference(c.m, weights, tb, activation, kAtol);
      }
}

TEST_P(SparseMatMul, PlainMatchesReference) {
  const MatMulCase& c = GetParam();
  for (const auto& [pattern, weights] : weight_patterns({c.k, c.n})) {
    SCOPED_TRACE(pattern);
    expect_impl_matches_reference(
        [&](Graph& g, const std::vector<Output>& in) {
          return ops::matmul(g, in[0], ops::constant(g, weights));
        },
        {random_tensor({c.m, c.k}, 1), weights}, "sparse_only", kRtol, kAtol);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SparseMatMul,
    ::testing::Values(MatMulCase{"size1", 1, 1, 1}, MatMulCase{"k1", 3, 1, 7},
                      MatMulCase{"n1", 5, 13, 1}, MatMulCase{"primes_batch1", 1, 31, 17},
                      MatMulCase{"primes", 7, 37, 11}, MatMulCase{"vector_width_pm1", 17, 33, 15},
                      MatMulCase{"batch2", 2, 64, 9}, MatMulCase{"fc2", 64, 1024, 10},
                      // more rows than one transposed block (128), the last block partial
                      MatMulCase{"rows_over_block", 131, 29, 6},
                      // K past 16-bit indices
                      MatMulCase{"wide_k", 2, 70001, 3}),
    [](const ::testing::TestParamInfo<MatMulCase>& info) { return info.param.name; });

// ---- Block-sparse MatMul ----------------------------------------------------------------------

// W [k, n] pruned in blocks of `block` adjacent outputs (the last of each row shorter when
// `block` does not divide n): about `sparsity` of the blocks zero, and the rows k that
// `zero_row_every` divides all zero.
Tensor block_sparse_weights(int64_t k, int64_t n, int64_t block, double sparsity, uint32_t seed,
                            int64_t zero_row_every = 0) {
  Tensor t = random_tensor({k, n}, seed);
  std::mt19937 rng(seed + 1000);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  float* w = t.data<float>();
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t n0 = 0; n0 < n; n0 += block) {
      const bool zero = u(rng) < sparsity || (zero_row_every > 0 && kk % zero_row_every == 0);
      if (zero) std::fill_n(w + kk * n + n0, std::min(block, n - n0), 0.0f);
    }
  return t;
}

// One nonzero block: row k / 2 of the first strip.
Tensor single_block(int64_t k, int64_t n, int64_t block) {
  Tensor t(DType::f32, {k, n});
  t.fill_zero();
  for (int64_t i = 0; i < std::min(block, n); ++i) t.data<float>()[k / 2 * n + i] = 0.5f - 0.1f * i;
  return t;
}

Tensor transposed(const Tensor& w) {
  Tensor t(DType::f32, {w.dim(1), w.dim(0)});
  for (int64_t i = 0; i < w.dim(0); ++i)
    for (int64_t j = 0; j < w.dim(1); ++j)
      t.data<float>()[j * w.dim(0) + i] = w.data<float>()[i * w.dim(1) + j];
  return t;
}

// The form the sparse MatMul kernel runs for `weights` ("block16", "" for CSR, "dense").
std::string matmul_form(int64_t m, const Tensor& weights, bool transpose_b,
                        const std::string& impl) {
  Graph g;
  const int64_t k = transpose_b ? weights.dim(1) : weights.dim(0);
  Output a = ops::placeholder(g, DType::f32, {m, k});
  Output y = ops::matmul(g, a, ops::constant(g, weights), false, transpose_b, "fc");
  Session session(g, SessionOptions{.kernel_impl = impl});
  session.set_profiling(true);
  session.run({{a, random_tensor({m, k}, 1)}}, {y});
  for (const NodeProfile& p : session.profile())
    if (p.name == "fc") {
      const size_t colon = p.impl.find(':');
      return colon == std::string::npos ? "" : p.impl.substr(colon + 1);
    }
  return "?";
}

struct BlockCase {
  const char* name;
  int64_t m, k, n, block;
};

class SparseBlockMatMul : public ::testing::TestWithParam<BlockCase> {};

// Block-pruned weights run as blocks and agree with the reference, for every batch size and
// for n not a multiple of the block; all-zero rows, a single block and an empty layer too.
TEST_P(SparseBlockMatMul, FusedMatchesReference) {
  const BlockCase& c = GetParam();
  // Sums of thousands of terms, added in another order than the reference's.
  const double atol = c.k > 1000 ? 1e-2 : kAtol;
  const std::vector<std::pair<std::string, Tensor>> patterns = {
      {"blocks_80%", block_sparse_weights(c.k, c.n, c.block, 0.8, 3)},
      {"blocks_50%_zero_rows", block_sparse_weights(c.k, c.n, c.block, 0.5, 4, 3)},
      {"blocks_95%", block_sparse_weights(c.k, c.n, c.block, 0.95, 5)},
      {"single_block", single_block(c.k, c.n, c.block)},
      {"empty", block_sparse_weights(c.k, c.n, c.block, 1.0, 6)}};
  for (bool tb : {false, true})
    for (const auto& [pattern, w] : patterns) {
      SCOPED_TRACE(::testing::Message() << pattern << " transpose_b " << tb);
      const Tensor weights = tb ? transposed(w) : w;
      if (pattern != "empty") {
        EXPECT_EQ(matmul_form(c.m, weights, tb, "sparse_only").rfind("block", 0), 0u);
      }
      for (const char* activation : {"none", "relu"})
        expect_fused_matmul_matches_reference(c.m, weights, tb, activation, atol);
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SparseBlockMatMul,
                         ::testing::Values(BlockCase{"batch1_block16", 1, 70, 37, 16},
                                           BlockCase{"batch2_block16", 2, 70, 37, 16},
                                           BlockCase{"batch7_block8", 7, 70, 37, 8},
                                           BlockCase{"batch64_block4", 64, 70, 37, 4},
                                           BlockCase{"batch1_block4", 1, 33, 10, 4},
                                           BlockCase{"batch7_block16", 7, 33, 48, 16},
                                           BlockCase{"batch64_block8", 64, 40, 20, 8},
                                           // more rows than one chunk (128), the last chunk partial
                                           BlockCase{"rows_over_chunk_block16", 131, 29, 32, 16},
                                           // K past 16-bit indices
                                           BlockCase{"wide_k_block16", 2, 70001, 16, 16}),
                         [](const ::testing::TestParamInfo<BlockCase>& info) {
                           return info.param.name;
                         });

// The AVX-512 / AVX2 strip loops this CPU runs agree with the portable ones and with the sum they
// compute, for each width and every group of rows.
TEST(SparseBlockProduct, BestMatchesPortableAndTheSum) {
  const int64_t k = 300;
  const Tensor a = random_tensor({70, k}, 1);
  const std::vector<uint16_t> index = {0, 7, 299, 3, 150, 1, 2, 250, 9};
  const Tensor values = random_tensor({static_cast<int64_t>(index.size()) * 16}, 2);
  for (int64_t block : sparse::kBlockWidths)
    for (int64_t rows : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 64, 70})
      for (int64_t count : {0, 1, 2, 3, 5, 9}) {
        SCOPED_TRACE(::testing::Message()
                     << "block " << block << " rows " << rows << " count " << count);
        std::vector<float> best(static_cast<size_t>(rows * block)), portable(best.size());
        sparse::best_block_strip<uint16_t>(block)(index.data(), values.data<float>(), count,
                                                  a.data<float>(), k, rows, best.data());
        sparse::portable_block_strip<uint16_t>(block)(index.data(), values.data<float>(), count,
                                                      a.data<float>(), k, rows, portable.data());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t i = 0; i < block; ++i) {
            double sum = 0.0;
            for (int64_t b = 0; b < count; ++b)
              sum += static_cast<double>(a.data<float>()[r * k + index[static_cast<size_t>(b)]]) *
                     values.data<float>()[b * block + i];
            const size_t at = static_cast<size_t>(r * block + i);
            ASSERT_NEAR(best[at], portable[at], 1e-5) << r << " " << i;
            ASSERT_NEAR(portable[at], sum, 1e-5) << r << " " << i;
          }
      }
}

// ---- Conv2D ----------------------------------------------------------------------------------

struct ConvCase {
  const char* name;
  Shape x, w;
  ops::Conv2DOptions options;
};

Attrs conv_attrs(const ops::Conv2DOptions& o, const std::string& activation) {
  return {{"strides", o.strides},     {"padding", o.padding}, {"pads", o.pads},
          {"dilations", o.dilations}, {"groups", o.groups},   {"activation", activation}};
}

class SparseConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(SparseConv, FusedMatchesReference) {
  const ConvCase& c = GetParam();
  const Shape& w = c.w;
  // Zero output channels: every third one.
  Tensor zero_channels = sparse_tensor(w, 0.6, 13);
  for (int64_t i = 0; i < zero_channels.numel(); ++i)
    if ((i % w[3]) % 3 == 1) zero_channels.data<float>()[i] = 0.0f;
  const std::vector<std::pair<std::string, Tensor>> patterns = {
      {"dense", random_tensor(w, 10)},
      {"90%", sparse_tensor(w, 0.9, 11)},
      {"zero_channels", zero_channels},
      {"single", single_nonzero(w, num_elements(w) / 2 + 1)},
      {"empty", sparse_tensor(w, 1.0, 12)}};
  for (const auto& [pattern, weights] : patterns)
    for (const char* activation : {"none", "relu", "relu6"}) {
      SCOPED_TRACE(::testing::Message() << pattern << " " << activation);
      expect_impl_matches_reference(
          [&](Graph& g, const std::vector<Output>& in) {
            return g.add("FusedConv2D", {in[0], ops::constant(g, weights), in[2]},
                         conv_attrs(c.options, activation));
          },
          {random_tensor(c.x, 14, -3.0f, 3.0f), weights, random_tensor({w[3]}, 15)}, "sparse_only",
          kRtol, 1e-3);
    }
}

// FusedConv2DAdd (a residual conv) adds its fourth input before the activation.
TEST_P(SparseConv, FusedAddMatchesReference) {
  const ConvCase& c = GetParam();
  Graph shapes;
  const Shape y = shapes
                      .type(ops::conv2d(shapes, ops::placeholder(shapes, DType::f32, c.x),
                                        ops::placeholder(shapes, DType::f32, c.w), c.options))
                      .shape;
  const Tensor weights = sparse_tensor(c.w, 0.9, 11);
  for (const char* activation : {"none", "relu6"}) {
    SCOPED_TRACE(activation);
    expect_impl_matches_reference(
        [&](Graph& g, const std::vector<Output>& in) {
          return g.add("FusedConv2DAdd", {in[0], ops::constant(g, weights), in[2], in[3]},
                       conv_attrs(c.options, activation));
        },
        {random_tensor(c.x, 14, -3.0f, 3.0f), weights, random_tensor({c.w[3]}, 15),
         random_tensor(y, 16, -3.0f, 3.0f)},
        "sparse_only", kRtol, 1e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SparseConv,
    ::testing::Values(
        ConvCase{"size1", {1, 1, 1, 1}, {1, 1, 1, 1}, {}},
        ConvCase{"same3x3_odd_channels", {2, 7, 7, 3}, {3, 3, 3, 5}, {.padding = "SAME"}},
        ConvCase{"stride2_same_primes",
                 {1, 13, 11, 5},
                 {5, 5, 5, 7},
                 {.strides = {2, 2}, .padding = "SAME"}},
        ConvCase{"valid_stride21", {3, 7, 13, 16}, {3, 3, 16, 17}, {.strides = {2, 1}}},
        ConvCase{"valid_stride3_leftover", {1, 11, 10, 2}, {2, 3, 2, 4}, {.strides = {3, 3}}},
        ConvCase{"explicit_uneven",
                 {2, 9, 8, 4},
                 {3, 2, 4, 6},
                 {.strides = {2, 2}, .padding = "EXPLICIT", .pads = {1, 2, 0, 3}}},
        ConvCase{
            "dilation2", {1, 13, 13, 8}, {3, 3, 8, 16}, {.padding = "SAME", .dilations = {2, 3}}},
        ConvCase{"dilation_stride",
                 {1, 15, 12, 3},
                 {3, 2, 3, 5},
                 {.strides = {2, 3}, .padding = "SAME", .dilations = {2, 2}}},
        ConvCase{"pointwise", {2, 7, 7, 17}, {1, 1, 17, 33}, {}},
        ConvCase{"window_larger_than_image", {2, 2, 3, 3}, {5, 5, 3, 4}, {.padding = "SAME"}},
        ConvCase{"wide_image", {1, 5, 150, 2}, {3, 3, 2, 3}, {.padding = "SAME"}},
        ConvCase{"mnist_conv1", {2, 28, 28, 1}, {5, 5, 1, 32}, {.padding = "SAME"}},
        ConvCase{"mnist_conv2", {1, 14, 14, 32}, {5, 5, 32, 64}, {.padding = "SAME"}}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// Grouped and depthwise convolutions are left to the dense kernels.
TEST(SparseSelection, GroupedConvIsNotSparse) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {1, 7, 7, 6});
  Output y = g.add("FusedConv2D",
                   {x, ops::constant(g, sparse_tensor({3, 3, 1, 6}, 0.9, 1)),
                    ops::constant(g, random_tensor({6}, 2))},
                   conv_attrs({.padding = "SAME", .groups = 6}, "none"), "dw");
  Session session(g);
  session.run({{x, random_tensor({1, 7, 7, 6}, 3)}}, {y});
  EXPECT_NE(session.kernel_choices()["dw"], "sparse");
}

// A pruned 1x1 conv runs oneDNN's dense kernel, which beats the sparse one at any sparsity
// (sparse_conv_can_pay); a 3x3 conv as pruned takes the sparse path.
TEST(SparseSelection, PointwiseConvIsNotSparse) {
  for (const int64_t k : {1, 3}) {
    Graph g;
    Output x = ops::placeholder(g, DType::f32, {1, 14, 14, 16});
    Output y = g.add("FusedConv2D",
                     {x, ops::constant(g, sparse_tensor({k, k, 16, 32}, 0.95, 1)),
                      ops::constant(g, random_tensor({32}, 2))},
                     conv_attrs({.padding = "SAME"}, "relu"), "conv");
    Session session(g);
    session.run({{x, random_tensor({1, 14, 14, 16}, 3)}}, {y});
    SCOPED_TRACE(k);
    if (k == 1)
      EXPECT_NE(session.kernel_choices()["conv"], "sparse");
    else
      EXPECT_EQ(session.kernel_choices()["conv"], "sparse");
  }
}

// Profiles say which path a sparse kernel ran: its own, or the dense fallback.
TEST(SparseSelection, ProfileNamesThePathThatRan) {
  for (double sparsity : {0.95, 0.0}) {
    Graph g;
    Output x = ops::placeholder(g, DType::f32, {1, 256});
    Output y = g.add("FusedMatMul",
                     {x, ops::constant(g, sparse_tensor({256, 128}, sparsity, 4)),
                      ops::constant(g, random_tensor({128}, 5))},
                     {{"transpose_a", false},
                      {"transpose_b", false},
                      {"activation", std::string("none")}},
                     "fc");
    Session session(g);
    session.set_profiling(true);
    session.run({{x, random_tensor({1, 256}, 6)}}, {y});
    std::string impl;
    for (const NodeProfile& p : session.profile())
      if (p.name == "fc") impl = p.impl;
    EXPECT_EQ(impl, sparsity > 0.5 ? "sparse" : "sparse:dense") << sparsity;
  }
}

// ---- The run-time choice ---------------------------------------------------------------------

// One node with frozen weights, its kernel created as a session would create it.
struct NodeUnderTest {
  Graph g;
  int node = -1;
  std::vector<Tensor> inputs;

  std::unique_ptr<Kernel> create(const std::string& impl) const {
    const Node& n = g.node(node);
    KernelSpec spec{n, {}, {false, true, false}};
    for (const Tensor& t : inputs) spec.inputs.push_back(TensorType{t.dtype(), t.shape()});
    const KernelDef& def = KernelRegistry::global().select(spec, impl);
    EXPECT_EQ(def.impl, impl);
    return def.create(spec);
  }

  Tensor compute(Kernel& kernel, const Tensor& weights) const {
    const Node& n = g.node(node);
    KernelContext ctx{n, {inputs[0], weights, inputs[2]}, {Tensor(DType::f32, n.outputs[0].shape)}};
    kernel.compute(ctx);
    return ctx.outputs[0];
  }
};

NodeUnderTest fused_matmul(int64_t m, int64_t k, int64_t n) {
  NodeUnderTest t;
  t.inputs = {random_tensor({m, k}, 1), random_tensor({k, n}, 2), random_tensor({n}, 3)};
  Output a = ops::placeholder(t.g, DType::f32, {m, k});
  Output w = ops::constant(t.g, t.inputs[1]);
  Output b = ops::placeholder(t.g, DType::f32, {n});
  t.node = t.g.add("FusedMatMul", {a, w, b}, {{"activation", std::string("relu")}}).node;
  return t;
}

NodeUnderTest mnist_conv2() {
  NodeUnderTest t;
  t.inputs = {random_tensor({1, 14, 14, 32}, 1), random_tensor({5, 5, 32, 64}, 2),
              random_tensor({64}, 3)};
  Output x = ops::placeholder(t.g, DType::f32, t.inputs[0].shape());
  Output w = ops::constant(t.g, t.inputs[1]);
  Output b = ops::placeholder(t.g, DType::f32, {64});
  t.node = t.g.add("FusedConv2D", {x, w, b}, conv_attrs({.padding = "SAME"}, "relu")).node;
  return t;
}

void expect_near_tensors(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i], 1e-3 + 1e-4 * std::abs(b.data<float>()[i]))
        << "at " << i;
}

// Sparsity just above the crossover runs sparse, just below runs dense, and a new weight buffer
// is measured again; both paths agree with the reference.
void expect_choice_follows_threshold(const NodeUnderTest& t) {
  std::unique_ptr<Kernel> kernel = t.create("sparse");
  auto* sparse_kernel = dynamic_cast<SparseKernel*>(kernel.get());
  ASSERT_NE(sparse_kernel, nullptr);
  std::unique_ptr<Kernel> reference = t.create("reference");
  const double threshold = sparse_kernel->threshold();
  ASSERT_GT(threshold, 0.0);
  ASSERT_LE(threshold, 1.0);
  const Shape& w = t.inputs[1].shape();
  const std::vector<std::pair<double, SparseKernel::Path>> cases = {
      {std::min(1.0, threshold + 0.03), SparseKernel::Path::Sparse},
      {std::max(0.0, threshold - 0.05), SparseKernel::Path::Dense},
      {1.0, SparseKernel::Path::Sparse},
      {0.0, SparseKernel::Path::Dense}};
  uint32_t seed = 20;
  // Kept alive so that every case has a new buffer (the decision is keyed on its address).
  std::vector<Tensor> all_weights;
  for (const auto& [sparsity, path] : cases) {
    SCOPED_TRACE(::testing::Message() << "sparsity " << sparsity);
    all_weights.push_back(sparse_tensor(w, sparsity, seed++));
    const Tensor& weights = all_weights.back();
    const Tensor y = t.compute(*kernel, weights);
    EXPECT_EQ(sparse_kernel->path(), path) << "measured " << sparse_kernel->weight_sparsity();
    expect_near_tensors(y, t.compute(*reference, weights));
    // The same buffer again keeps the decision.
    t.compute(*kernel, weights);
    EXPECT_EQ(sparse_kernel->path(), path);
  }
}

TEST(SparseSelection, MatMulBatch1FollowsThreshold) {
  expect_choice_follows_threshold(fused_matmul(1, 300, 40));
}
TEST(SparseSelection, MatMulBatchFollowsThreshold) {
  expect_choice_follows_threshold(fused_matmul(16, 300, 40));
}
TEST(SparseSelection, ConvFollowsThreshold) { expect_choice_follows_threshold(mnist_conv2()); }

// With no impl requested, frozen weights go to the sparse kernels and fed ones to oneDNN.
TEST(SparseSelection, SessionPicksSparseForFrozenWeightsOnly) {
  Graph g;
  Output a = ops::placeholder(g, DType::f32, {1, 64}, "a");
  Output fed = ops::placeholder(g, DType::f32, {64, 8}, "fed");
  Output frozen = ops::matmul(g, a, ops::constant(g, sparse_tensor({64, 8}, 0.95, 1)), false, false,
                              "frozen_fc");
  Output dense = ops::matmul(g, a, fed, false, false, "fed_fc");
  Session session(g);
  session.run({{a, random_tensor({1, 64}, 2)}, {fed, random_tensor({64, 8}, 3)}}, {frozen, dense});
  auto choices = session.kernel_choices();
  EXPECT_EQ(choices["frozen_fc"], "sparse");
  EXPECT_EQ(choices["fed_fc"], "onednn");
}

// The AVX-512 / AVX2 loop this CPU runs agrees with the portable one, at every chunk tail.
TEST(SparseAccumulate, BestMatchesPortable) {
  const Tensor src = random_tensor({4000}, 1);
  const std::vector<uint32_t> index = {0, 7, 100, 3, 50, 1000, 2};
  const std::vector<float> values = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.75f, 3.0f};
  for (int64_t len : {1, 15, 16, 17, 31, 48, 127, 128, 129, 255, 300}) {
    for (int64_t count : {0, 1, 2, 3, 5, 7}) {
      std::vector<float> best(static_cast<size_t>(len)), portable(static_cast<size_t>(len));
      sparse::best_accumulate<uint32_t>()(src.data<float>(), index.data(), 3, values.data(), count,
                                          len, best.data());
      sparse::portable_accumulate<uint32_t>()(src.data<float>(), index.data(), 3, values.data(),
                                              count, len, portable.data());
      for (int64_t i = 0; i < len; ++i)
        ASSERT_NEAR(best[static_cast<size_t>(i)], portable[static_cast<size_t>(i)], 1e-5)
            << "len " << len << " count " << count << " at " << i;
    }
  }
}

}  // namespace
}  // namespace sf
