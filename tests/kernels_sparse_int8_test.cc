// The sparse int8 MatMul kernels (kernels/sparse/int8_sparse_matmul_kernel.cc) against the
// integer reference kernels on frozen i8 weights of every sparsity, from dense to empty, in CSR
// and (on VNNI CPUs) block form; and the run-time choice between them and oneDNN's dense kernel.
// The sparse path requantizes with the reference's fixed-point code, so it is exact; the dense
// fallback (oneDNN) may differ from the reference by one unit, as its own tests allow.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <utility>

#include "graph/graph.h"
#include "kernels/kernel.h"
#include "kernels/sparse/int8_sparse_product.h"
#include "kernels/sparse/sparse_kernels.h"
#include "ops/ops.h"
#include "ops/quantized_ops.h"
#include "codec/quant_params.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using sparse::SparseKernel;
using testing::expect_error;
using testing::values;

Tensor random_u8(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, 255);
  Tensor t(DType::u8, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(dist(rng));
  return t;
}

Tensor random_f32(const Shape& shape, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// i8 weights [k, n] with about `sparsity` of their blocks of `block` adjacent outputs exactly zero
// (block 1: single weights), the rest random in -127..127 and never zero.
Tensor pruned_i8(int64_t k, int64_t n, double sparsity, uint32_t seed, int64_t block = 1) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(1, 127);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Tensor t(DType::i8, {k, n});
  int8_t* p = t.data<int8_t>();
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t n0 = 0; n0 < n; n0 += block) {
      const bool zero = u(rng) < sparsity;
      for (int64_t nn = n0; nn < std::min(n, n0 + block); ++nn) {
        const int v = dist(rng);
        p[kk * n + nn] = zero ? int8_t{0} : static_cast<int8_t>(v % 2 ? v : -v);
      }
    }
  return t;
}

// Zeros every `every`-th output column: all-zero rows of the CSR.
Tensor with_zero_outputs(Tensor t, int64_t every) {
  const int64_t cols = t.dim(1);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (i % cols % every == 0) t.data<int8_t>()[i] = 0;
  return t;
}

Tensor single_nonzero(int64_t k, int64_t n, int64_t at) {
  Tensor t(DType::i8, {k, n});
  t.fill_zero();
  t.data<int8_t>()[at % t.numel()] = -77;
  return t;
}

Tensor params_tensor(QuantParams p) {
  return Tensor::from_vector<float>({2}, {p.scale, static_cast<float>(p.zero_point)});
}

// The inputs of QuantizedMatMul(Requantized) but out_params: a, a_params, b, b_scales, bias.
std::vector<Tensor> matmul_inputs(int64_t m, const Tensor& weights, bool per_channel,
                                  int32_t a_zero_point, uint32_t seed) {
  const int64_t n = weights.dim(1);
  return {random_u8({m, weights.dim(0)}, seed), params_tensor({0.02f, a_zero_point}), weights,
          random_f32({per_channel ? n : 1}, seed + 1, 1e-3f, 4e-3f),
          random_f32({n}, seed + 2, -2.0f, 2.0f)};
}

// Output params covering the real values of the accumulators (or their positive part), as
// calibration would choose.
QuantParams covering(const Tensor& acc, const std::vector<Tensor>& inputs, bool relu) {
  const float a_scale = inputs[1].data<float>()[0];
  const Tensor& scales = inputs[3];
  const int64_t n = acc.dim(1);
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < acc.numel(); ++i) {
    const float real = static_cast<float>(acc.data<int32_t>()[i]) * a_scale *
                       scales.data<float>()[scales.numel() == 1 ? 0 : i % n];
    lo = std::min(lo, real);
    hi = std::max(hi, real);
  }
  return choose_quant_params(relu ? 0.0f : lo, hi);
}

// QuantizedMatMul (`activation` empty) or QuantizedMatMulRequantized with every input but a
// frozen, as in a calibrated, frozen model.
struct MatMulNode {
  Graph g;
  Output a, y;

  MatMulNode(const std::vector<Tensor>& inputs, const std::string& activation) {
    a = ops::placeholder(g, DType::u8, inputs[0].shape(), "a");
    const ops::QuantizedConvInputs in{a, ops::constant(g, inputs[1]), ops::constant(g, inputs[2]),
                                      ops::constant(g, inputs[3]), ops::constant(g, inputs[4])};
    y = activation.empty() ? ops::quantized_matmul(g, in, "fc")
                           : ops::quantized_matmul_requantized(g, in, ops::constant(g, inputs[5]),
                                                               *parse_activation(activation), "fc");
  }

  // The output with kernels of `impl`, which must be the one chosen for the node.
  Tensor run(const Tensor& a_value, const std::string& impl) {
    Session session(g, SessionOptions{.kernel_impl = impl});
    const Tensor out = session.run({{a, a_value}}, {y})[0].clone();
    EXPECT_EQ(session.kernel_choices()["fc"], impl);
    return out;
  }
};

// The sparse kernel (forced) equals the reference on QuantizedMatMul and, with output params
// covering its accumulators, on QuantizedMatMulRequantized with each activation.
void expect_sparse_equals_reference(int64_t m, const Tensor& weights) {
  uint32_t seed = 1;
  for (bool per_channel : {true, false})
    for (int32_t zero_point : {0, 93}) {
      SCOPED_TRACE(::testing::Message() << (per_channel ? "per channel" : "per tensor")
                                        << ", a zero point " << zero_point);
      std::vector<Tensor> inputs = matmul_inputs(m, weights, per_channel, zero_point, seed += 10);
      MatMulNode accumulate(inputs, "");
      const Tensor acc = accumulate.run(inputs[0], "reference");
      EXPECT_EQ(values<int32_t>(accumulate.run(inputs[0], "sparse_only")), values<int32_t>(acc));
      inputs.push_back(Tensor());
      for (const char* activation : {"none", "relu", "relu6"}) {
        SCOPED_TRACE(activation);
        const bool relu = std::string(activation) != "none";
        inputs.back() = params_tensor(covering(acc, inputs, relu));
        MatMulNode requantized(inputs, activation);
        EXPECT_EQ(values<uint8_t>(requantized.run(inputs[0], "sparse_only")),
                  values<uint8_t>(requantized.run(inputs[0], "reference")));
      }
    }
}

struct MatMulCase {
  const char* name;
  int64_t m, k, n;
};

class SparseInt8MatMul : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(SparseInt8MatMul, EqualsReference) {
  const MatMulCase& c = GetParam();
  const std::vector<std::pair<const char*, Tensor>> patterns = {
      {"dense", pruned_i8(c.k, c.n, 0.0, 3)},
      {"half", pruned_i8(c.k, c.n, 0.5, 4)},
      {"90%", pruned_i8(c.k, c.n, 0.9, 5)},
      {"99%", pruned_i8(c.k, c.n, 0.99, 6)},
      {"zero_outputs", with_zero_outputs(pruned_i8(c.k, c.n, 0.7, 7), 3)},
      {"single", single_nonzero(c.k, c.n, 7 * c.n + 5)},
      {"empty", pruned_i8(c.k, c.n, 1.0, 8)},
      {"blocks16_90%", pruned_i8(c.k, c.n, 0.9, 9, 16)},
      {"blocks16_60%", pruned_i8(c.k, c.n, 0.6, 10, 16)}};
  for (const auto& [pattern, weights] : patterns) {
    SCOPED_TRACE(pattern);
    expect_sparse_equals_reference(c.m, weights);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SparseInt8MatMul,
    ::testing::Values(MatMulCase{"size1", 1, 1, 1}, MatMulCase{"k1", 3, 1, 7},
                      MatMulCase{"n1", 5, 13, 1}, MatMulCase{"primes_batch1", 1, 31, 17},
                      MatMulCase{"primes", 7, 37, 11}, MatMulCase{"strips_pm1_batch1", 1, 50, 33},
                      MatMulCase{"strips_pm1", 9, 50, 31}, MatMulCase{"batch2", 2, 64, 48},
                      // more rows than one transposed block (64), the last block partial
                      MatMulCase{"rows_over_block", 131, 29, 20},
                      // K past 16-bit indices
                      MatMulCase{"wide_k", 2, 70001, 3}),
    [](const ::testing::TestParamInfo<MatMulCase>& info) { return info.param.name; });

// ---- The run-time choice ---------------------------------------------------------------------

// QuantizedMatMulRequantized with frozen weights, params and bias, its kernel created as a
// session would create it, computed on weights given per call.
struct NodeUnderTest {
  Graph g;
  int node = -1;
  std::vector<Tensor> inputs;

  explicit NodeUnderTest(int64_t m, int64_t k = 300, int64_t n = 48) {
    inputs = matmul_inputs(m, pruned_i8(k, n, 0.0, 2), true, 11, 3);
    inputs.push_back(params_tensor({0.05f, 0}));
    std::vector<Output> in = {ops::placeholder(g, DType::u8, inputs[0].shape())};
    for (size_t i = 1; i < inputs.size(); ++i) in.push_back(ops::constant(g, inputs[i]));
    node = ops::quantized_matmul_requantized(g, {in[0], in[1], in[2], in[3], in[4]}, in[5],
                                             Activation::Relu)
               .node;
  }

  std::unique_ptr<Kernel> create(const std::string& impl) const {
    KernelSpec spec{g.node(node), {}, {false, true, true, true, true, true}};
    for (const Tensor& t : inputs) spec.inputs.push_back(TensorType{t.dtype(), t.shape()});
    const KernelDef& def = KernelRegistry::global().select(spec, impl);
    EXPECT_EQ(def.impl, impl);
    return def.create(spec);
  }

  Tensor compute(Kernel& kernel, const Tensor& weights) const {
    const Node& n = g.node(node);
    KernelContext ctx{n,
                      {inputs[0], inputs[1], weights, inputs[3], inputs[4], inputs[5]},
                      {Tensor(DType::u8, n.outputs[0].shape)}};
    kernel.compute(ctx);
    return ctx.outputs[0];
  }
};

// The form a profile says ran: "sparse", "sparse:block16" or "sparse:dense" (which the dense
// kernel may follow with the implementation it ran, "sparse:dense:brgconv").
std::string form_of(const Session& session, const std::string& node) {
  for (const NodeProfile& p : session.profile())
    if (p.name == node) return p.impl.starts_with("sparse:dense") ? "sparse:dense" : p.impl;
  return "";
}

void expect_within_one(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_LE(std::abs(got.data<uint8_t>()[i] - want.data<uint8_t>()[i]), 1) << "at " << i;
}

// Unstructured sparsity just above the crossover runs sparse (exactly the reference), just below
// runs dense (within one unit), and a new weight buffer is measured again.
void expect_choice_follows_threshold(const NodeUnderTest& t) {
  std::unique_ptr<Kernel> kernel = t.create("sparse");
  auto* sparse_kernel = dynamic_cast<SparseKernel*>(kernel.get());
  ASSERT_NE(sparse_kernel, nullptr);
  std::unique_ptr<Kernel> reference = t.create("reference");
  const double threshold = sparse_kernel->threshold();
  ASSERT_GT(threshold, 0.0);
  ASSERT_LE(threshold, 1.0);
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
    const Shape& w = t.inputs[2].shape();
    all_weights.push_back(pruned_i8(w[0], w[1], sparsity, seed++));
    const Tensor& weights = all_weights.back();
    const Tensor got = t.compute(*kernel, weights);
    EXPECT_EQ(sparse_kernel->path(), path) << "measured " << sparse_kernel->weight_sparsity();
    const Tensor want = t.compute(*reference, weights);
    if (path == SparseKernel::Path::Sparse)
      EXPECT_EQ(values<uint8_t>(got), values<uint8_t>(want));
    else
      expect_within_one(got, want);
    t.compute(*kernel, weights);
    EXPECT_EQ(sparse_kernel->path(), path);
  }
}

TEST(SparseInt8Selection, Batch1FollowsThreshold) {
  expect_choice_follows_threshold(NodeUnderTest(1));
}

TEST(SparseInt8Selection, BatchFollowsThreshold) {
  expect_choice_follows_threshold(NodeUnderTest(16));
}

// Weights whose int32 sums could overflow run dense under "sparse"; "sparse_only" refuses them.
// Here 95% sparse, yet 255 * 70000 * 127 > 2^31.
TEST(SparseInt8Selection, OverflowingSumsRunDense) {
  NodeUnderTest t(1, 1'400'000, 1);
  Tensor& w = t.inputs[2];
  w.fill_zero();
  for (int64_t i = 0; i < w.numel(); i += 20) w.data<int8_t>()[i] = 127;
  std::unique_ptr<Kernel> kernel = t.create("sparse");
  const Tensor got = t.compute(*kernel, w);
  EXPECT_EQ(dynamic_cast<SparseKernel&>(*kernel).path(), SparseKernel::Path::Dense);
  std::unique_ptr<Kernel> reference = t.create("reference");
  expect_within_one(got, t.compute(*reference, w));
  std::unique_ptr<Kernel> forced = t.create("sparse_only");
  expect_error([&] { t.compute(*forced, w); }, "int32 accumulators");
}

// With no impl requested, frozen weights go to the sparse kernel; profiles name the form that
// ran: CSR ("sparse"), blocks of 16 on VNNI CPUs ("sparse:block16"), or the dense fallback.
TEST(SparseInt8Selection, ProfileNamesTheFormThatRan) {
  struct Case {
    const char* name;
    Tensor weights;
    std::string want;
  };
  // Without VNNI, blocks of 16 at 90% are CSR below its crossover: dense.
  const std::vector<Case> cases = {{"unstructured 99.5%", pruned_i8(512, 128, 0.995, 4), "sparse"},
                                   {"blocks of 16, 90%", pruned_i8(512, 128, 0.9, 5, 16),
                                    sparse::has_avx512_vnni() ? "sparse:block16" : "sparse:dense"},
                                   {"dense", pruned_i8(512, 128, 0.0, 6), "sparse:dense"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> inputs = matmul_inputs(1, c.weights, true, 0, 7);
    inputs.push_back(params_tensor({0.05f, 0}));
    MatMulNode node(inputs, "relu");
    Session session(node.g);
    session.set_profiling(true);
    session.run({{node.a, inputs[0]}}, {node.y});
    EXPECT_EQ(session.kernel_choices()["fc"], "sparse");
    EXPECT_EQ(form_of(session, "fc"), c.want);
  }
}

// ---- The loops -------------------------------------------------------------------------------

// The AVX-512 / AVX2 accumulate this CPU runs agrees with the portable one at every chunk tail.
TEST(SparseInt8Loops, BestAccumulateMatchesPortable) {
  const Tensor src = random_u8({30000}, 1);
  const std::vector<uint32_t> index = {0, 7, 100, 3, 50, 99, 2};
  const std::vector<int8_t> weights = {-128, 127, -1, 55, 1, -77, 100};
  for (int64_t len : {1, 15, 16, 17, 31, 63, 64, 65, 127, 200}) {
    for (int64_t count : {0, 1, 2, 3, 5, 7}) {
      std::vector<int32_t> best(static_cast<size_t>(len)), portable(best.size());
      sparse::best_int8_accumulate<uint32_t>()(src.data<uint8_t>(), index.data(), len,
                                               weights.data(), count, len, best.data());
      sparse::portable_int8_accumulate<uint32_t>()(src.data<uint8_t>(), index.data(), len,
                                                   weights.data(), count, len, portable.data());
      EXPECT_EQ(best, portable) << "len " << len << " count " << count;
    }
  }
}

// The run accumulate of the conv kernel (VNNI where the CPU has it) agrees with the portable one
// on offset runs (stride 1) at every chunk tail and count of nonzeros past whole quads.
TEST(SparseInt8Loops, BestRunAccumulateMatchesPortable) {
  const Tensor src = random_u8({30000}, 4);
  const std::vector<uint32_t> offsets = {0, 7001, 100, 3, 50, 20999, 2, 640, 11, 4096};
  const std::vector<int8_t> weights = {-128, 127, -1, 55, 1, -77, 100, -128, 127, 9};
  for (int64_t len : {1, 15, 16, 17, 31, 63, 64, 65, 127, 200, 248}) {
    for (int64_t count : {0, 1, 2, 3, 4, 5, 7, 8, 10}) {
      std::vector<int32_t> best(static_cast<size_t>(len)), portable(best.size());
      sparse::best_int8_run_accumulate()(src.data<uint8_t>(), offsets.data(), 1, weights.data(),
                                         count, len, best.data());
      sparse::portable_int8_accumulate<uint32_t>()(src.data<uint8_t>(), offsets.data(), 1,
                                                   weights.data(), count, len, portable.data());
      EXPECT_EQ(best, portable) << "len " << len << " count " << count;
    }
  }
}

// The conv kernel's quads over runs (VNNI where the CPU has it) agree with the portable version
// and with the sums, at every tail of 16 positions.
TEST(SparseInt8Loops, BestQuadRunsMatchPortableAndTheSum) {
  const Tensor src = random_u8({2000}, 5);
  std::mt19937 rng(6);
  std::uniform_int_distribution<int> value(-128, 127), row(0, 1700);
  for (int64_t quads : {0, 1, 3}) {
    std::vector<uint32_t> rows(static_cast<size_t>(quads * sparse::kQuadDepth));
    std::vector<int8_t> weights(rows.size() * sparse::kQuadBlock);
    for (uint32_t& r : rows) r = static_cast<uint32_t>(row(rng));
    for (int8_t& w : weights) w = static_cast<int8_t>(value(rng));
    for (int64_t len : {1, 15, 16, 17, 40, 248}) {
      std::vector<int32_t> want(static_cast<size_t>(len * sparse::kQuadBlock), 0);
      for (size_t b = 0; b < rows.size(); ++b)
        for (int64_t p = 0; p < len; ++p)
          for (int64_t i = 0; i < sparse::kQuadBlock; ++i)
            want[static_cast<size_t>(p * sparse::kQuadBlock + i)] +=
                weights[b / 4 * 64 + static_cast<size_t>(i) * 4 + b % 4] *
                src.data<uint8_t>()[rows[b] + static_cast<size_t>(p)];
      std::vector<int32_t> best(want.size(), -1), portable(want.size(), -1);
      sparse::best_quad_runs()(rows.data(), weights.data(), quads, src.data<uint8_t>(), len,
                               best.data());
      sparse::portable_quad_runs()(rows.data(), weights.data(), quads, src.data<uint8_t>(), len,
                                   portable.data());
      EXPECT_EQ(best, want) << quads << " quads, len " << len;
      EXPECT_EQ(portable, want) << quads << " quads, len " << len;
    }
  }
}

// The VNNI quad strip (where the CPU has it) agrees with the portable one and with the sums.
TEST(SparseInt8Loops, BestQuadStripMatchesPortableAndTheSum) {
  const Tensor x = random_u8({1000}, 2);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> value(-128, 127), row(0, 999);
  for (int64_t quads : {0, 1, 2, 3, 8}) {
    std::vector<uint32_t> rows(static_cast<size_t>(quads * sparse::kQuadDepth));
    std::vector<int8_t> weights(rows.size() * sparse::kQuadBlock);
    for (uint32_t& r : rows) r = static_cast<uint32_t>(row(rng));
    for (int8_t& w : weights) w = static_cast<int8_t>(value(rng));
    std::vector<int32_t> want(sparse::kQuadBlock, 0);
    for (size_t b = 0; b < rows.size(); ++b)
      for (int64_t i = 0; i < sparse::kQuadBlock; ++i)
        want[static_cast<size_t>(i)] +=
            weights[b / 4 * 64 + static_cast<size_t>(i) * 4 + b % 4] * x.data<uint8_t>()[rows[b]];
    std::vector<int32_t> best(want.size()), portable(want.size());
    sparse::best_quad_strip()(rows.data(), weights.data(), quads, x.data<uint8_t>(), best.data());
    sparse::portable_quad_strip()(rows.data(), weights.data(), quads, x.data<uint8_t>(),
                                  portable.data());
    EXPECT_EQ(best, want) << quads << " quads";
    EXPECT_EQ(portable, want) << quads << " quads";
  }
}

// ---- Conv2D ----------------------------------------------------------------------------------

// A pruned HWIO filter: pruned_i8 of [KH * KW * CI, CO], so blocks run along output channels.
Tensor pruned_filter(const Shape& hwio, double sparsity, uint32_t seed, int64_t block = 1) {
  return pruned_i8(hwio[0] * hwio[1] * hwio[2], hwio[3], sparsity, seed, block).reshaped(hwio);
}

// The inputs of QuantizedConv2D(Requantized) but out_params: x, x_params, w, w_scales, bias.
std::vector<Tensor> conv_inputs(const Shape& x_shape, const Tensor& filter, bool per_channel,
                                int32_t x_zero_point, uint32_t seed) {
  const int64_t channels = filter.dim(3);
  return {random_u8(x_shape, seed), params_tensor({0.02f, x_zero_point}), filter,
          random_f32({per_channel ? channels : 1}, seed + 1, 1e-3f, 4e-3f),
          random_f32({channels}, seed + 2, -2.0f, 2.0f)};
}

// QuantizedConv2D (`activation` empty) or QuantizedConv2DRequantized with every input but x
// frozen.
struct ConvNode {
  Graph g;
  Output x, y;

  ConvNode(const std::vector<Tensor>& inputs, const ops::Conv2DOptions& options,
           const std::string& activation) {
    x = ops::placeholder(g, DType::u8, inputs[0].shape(), "x");
    const ops::QuantizedConvInputs in{x, ops::constant(g, inputs[1]), ops::constant(g, inputs[2]),
                                      ops::constant(g, inputs[3]), ops::constant(g, inputs[4])};
    y = activation.empty()
            ? ops::quantized_conv2d(g, in, options, "conv")
            : ops::quantized_conv2d_requantized(g, in, ops::constant(g, inputs[5]), options,
                                                *parse_activation(activation), "conv");
  }

  Tensor run(const Tensor& x_value, const std::string& impl) {
    Session session(g, SessionOptions{.kernel_impl = impl});
    const Tensor out = session.run({{x, x_value}}, {y})[0].clone();
    EXPECT_EQ(session.kernel_choices()["conv"], impl);
    return out;
  }
};

// The accumulators [.., channels] flattened to [rows, channels], for covering().
Tensor as_rows(const Tensor& acc) { return acc.reshaped({acc.numel() / acc.dim(3), acc.dim(3)}); }

struct ConvCase {
  const char* name;
  Shape x, filter;
  ops::Conv2DOptions options;
};

void expect_sparse_conv_equals_reference(const ConvCase& c, const Tensor& filter) {
  uint32_t seed = 1;
  for (bool per_channel : {true, false})
    for (int32_t zero_point : {0, 93}) {
      SCOPED_TRACE(::testing::Message() << (per_channel ? "per channel" : "per tensor")
                                        << ", x zero point " << zero_point);
      std::vector<Tensor> inputs = conv_inputs(c.x, filter, per_channel, zero_point, seed += 10);
      ConvNode accumulate(inputs, c.options, "");
      const Tensor acc = accumulate.run(inputs[0], "reference");
      EXPECT_EQ(values<int32_t>(accumulate.run(inputs[0], "sparse_only")), values<int32_t>(acc));
      inputs.push_back(Tensor());
      for (const char* activation : {"none", "relu", "relu6"}) {
        SCOPED_TRACE(activation);
        const bool relu = std::string(activation) != "none";
        inputs.back() = params_tensor(covering(as_rows(acc), inputs, relu));
        ConvNode requantized(inputs, c.options, activation);
        EXPECT_EQ(values<uint8_t>(requantized.run(inputs[0], "sparse_only")),
                  values<uint8_t>(requantized.run(inputs[0], "reference")));
      }
    }
}

ops::Conv2DOptions conv_options(const std::string& padding, std::vector<int64_t> strides = {1, 1},
                                std::vector<int64_t> dilations = {1, 1},
                                std::vector<int64_t> pads = {0, 0, 0, 0}) {
  ops::Conv2DOptions o;
  o.padding = padding;
  o.strides = std::move(strides);
  o.dilations = std::move(dilations);
  o.pads = std::move(pads);
  return o;
}

class SparseInt8Conv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(SparseInt8Conv, EqualsReference) {
  const ConvCase& c = GetParam();
  const Shape& f = c.filter;
  const std::vector<std::pair<const char*, Tensor>> patterns = {
      {"dense", pruned_filter(f, 0.0, 3)},
      {"90%", pruned_filter(f, 0.9, 5)},
      // Few enough nonzeros to run as CSR on VNNI CPUs too, where denser filters run as quads.
      {"99%", pruned_filter(f, 0.99, 6)},
      {"single", single_nonzero(f[0] * f[1] * f[2], f[3], 7 * f[3] + 5).reshaped(f)},
      {"empty", pruned_filter(f, 1.0, 8)},
      {"blocks16_90%", pruned_filter(f, 0.9, 9, 16)},
      {"blocks16_50%", pruned_filter(f, 0.5, 10, 16)}};
  for (const auto& [pattern, filter] : patterns) {
    SCOPED_TRACE(pattern);
    expect_sparse_conv_equals_reference(c, filter);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SparseInt8Conv,
    ::testing::Values(
        ConvCase{"size1", {1, 1, 1, 1}, {1, 1, 1, 1}, conv_options("VALID")},
        ConvCase{"primes_same", {1, 7, 5, 3}, {3, 3, 3, 17}, conv_options("SAME")},
        ConvCase{"primes_valid_batch3", {3, 11, 7, 5}, {3, 2, 5, 13}, conv_options("VALID")},
        ConvCase{"stride2_same", {1, 9, 8, 4}, {3, 3, 4, 33}, conv_options("SAME", {2, 2})},
        ConvCase{"stride_2x3_explicit",
                 {3, 10, 11, 6},
                 {3, 4, 6, 16},
                 conv_options("EXPLICIT", {2, 3}, {1, 1}, {1, 2, 3, 0})},
        ConvCase{
            "dilation2_same", {1, 9, 9, 5}, {3, 3, 5, 20}, conv_options("SAME", {1, 1}, {2, 2})},
        ConvCase{"dilation_stride_explicit",
                 {3, 12, 10, 3},
                 {2, 3, 3, 31},
                 conv_options("EXPLICIT", {2, 1}, {2, 3}, {2, 1, 0, 4})},
        ConvCase{"conv2_like", {1, 14, 14, 32}, {5, 5, 32, 64}, conv_options("SAME")}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// Frozen filters go to the sparse conv kernel, which names the form that ran; a depthwise
// (grouped) conv is not taken and runs oneDNN's or the reference's dense kernel.
TEST(SparseInt8ConvSelection, ProfileNamesTheFormThatRan) {
  struct Case {
    const char* name;
    Tensor filter;
    std::string want;
  };
  const Shape f{5, 5, 32, 64};
  // Blocks of 16 at 98% run as CSR where there are no quads (no VNNI).
  const std::vector<Case> cases = {{"unstructured 99%", pruned_filter(f, 0.99, 4), "sparse"},
                                   {"blocks of 16, 98%", pruned_filter(f, 0.98, 5, 16),
                                    sparse::has_avx512_vnni() ? "sparse:block16" : "sparse"},
                                   {"unstructured 90%", pruned_filter(f, 0.9, 6), "sparse:dense"},
                                   {"dense", pruned_filter(f, 0.0, 7), "sparse:dense"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> inputs = conv_inputs({1, 14, 14, 32}, c.filter, true, 7, 7);
    inputs.push_back(params_tensor({0.05f, 0}));
    ConvNode node(inputs, conv_options("SAME"), "relu");
    Session session(node.g);
    session.set_profiling(true);
    const Tensor got = session.run({{node.x, inputs[0]}}, {node.y})[0].clone();
    EXPECT_EQ(session.kernel_choices()["conv"], "sparse");
    EXPECT_EQ(form_of(session, "conv"), c.want);
    const Tensor want = node.run(inputs[0], "reference");
    if (c.want == "sparse:dense")
      expect_within_one(got, want);
    else
      EXPECT_EQ(values<uint8_t>(got), values<uint8_t>(want));
  }
}

TEST(SparseInt8ConvSelection, GroupedConvsStayDense) {
  ops::Conv2DOptions depthwise = conv_options("SAME");
  depthwise.groups = 8;
  std::vector<Tensor> inputs =
      conv_inputs({1, 6, 6, 8}, pruned_filter({3, 3, 1, 8}, 0.99, 3), true, 5, 11);
  inputs.push_back(params_tensor({0.05f, 0}));
  ConvNode node(inputs, depthwise, "relu");
  Session session(node.g);
  session.run({{node.x, inputs[0]}}, {node.y});
  EXPECT_NE(session.kernel_choices()["conv"], "sparse");
  EXPECT_NE(session.kernel_choices()["conv"], "sparse_only");
  Session forced(node.g, SessionOptions{.kernel_impl = "sparse_only"});
  forced.run({{node.x, inputs[0]}}, {node.y});
  EXPECT_NE(forced.kernel_choices()["conv"], "sparse_only");
}

// A pruned 1x1 conv is left to oneDNN's dense int8 kernel (sparse_conv_can_pay); "sparse_only"
// still runs it, exactly.
TEST(SparseInt8ConvSelection, PointwiseConvsStayDense) {
  std::vector<Tensor> inputs =
      conv_inputs({1, 7, 7, 16}, pruned_filter({1, 1, 16, 32}, 0.99, 3), true, 5, 11);
  inputs.push_back(params_tensor({0.05f, 0}));
  ConvNode node(inputs, conv_options("SAME"), "relu");
  Session session(node.g);
  session.run({{node.x, inputs[0]}}, {node.y});
  EXPECT_NE(session.kernel_choices()["conv"], "sparse");
  EXPECT_EQ(values<uint8_t>(node.run(inputs[0], "sparse_only")),
            values<uint8_t>(node.run(inputs[0], "reference")));
}

// Filters whose int32 sums could overflow run dense under "sparse"; "sparse_only" refuses them.
// Here 95% sparse, yet 255 * 118000 taps of 127 > 2^31.
TEST(SparseInt8ConvSelection, OverflowingSumsRunDense) {
  Tensor filter(DType::i8, {384, 384, 16, 1});
  filter.fill_zero();
  for (int64_t i = 0; i < filter.numel(); i += 20) filter.data<int8_t>()[i] = 127;
  std::vector<Tensor> inputs = conv_inputs({1, 384, 384, 16}, filter, true, 0, 3);
  inputs.push_back(params_tensor({0.05f, 0}));
  ConvNode node(inputs, conv_options("VALID"), "relu");
  Session session(node.g, SessionOptions{.kernel_impl = "sparse"});
  session.set_profiling(true);
  const Tensor got = session.run({{node.x, inputs[0]}}, {node.y})[0].clone();
  EXPECT_EQ(form_of(session, "conv"), "sparse:dense");
  expect_within_one(got, node.run(inputs[0], "reference"));
  Session forced(node.g, SessionOptions{.kernel_impl = "sparse_only"});
  expect_error([&] { forced.run({{node.x, inputs[0]}}, {node.y}); }, "int32 accumulators");
}

}  // namespace
}  // namespace sf
