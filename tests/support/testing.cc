#include "support/testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "autodiff/gradients.h"
#include "ops/ops.h"
#include "runtime/session.h"

namespace sf::testing {

int count_ops(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op;
  return n;
}

Tensor random_tensor(Shape shape, uint32_t seed, float lo, float hi) {
  Tensor t(DType::f32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

Tensor random_labels(int64_t count, int64_t classes, uint32_t seed) {
  Tensor t(DType::i32, {count});
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(classes - 1));
  for (int64_t i = 0; i < count; ++i) t.data<int32_t>()[i] = dist(rng);
  return t;
}

namespace {

struct Built {
  Graph graph;
  std::vector<Output> inputs;
  Output y;
  std::vector<bool> constant;
};

Built build_graph(const BuildFn& build, const std::vector<Tensor>& inputs,
                  const std::vector<bool>& constant = {}) {
  Built b;
  for (size_t i = 0; i < inputs.size(); ++i) {
    b.constant.push_back(i < constant.size() && constant[i]);
    b.inputs.push_back(b.constant[i]
                           ? ops::constant(b.graph, inputs[i], "const" + std::to_string(i))
                           : ops::placeholder(b.graph, inputs[i].dtype(), inputs[i].shape(),
                                              "input" + std::to_string(i)));
  }
  b.y = build(b.graph, b.inputs);
  return b;
}

Feeds feeds_of(const Built& b, const std::vector<Tensor>& inputs) {
  Feeds feeds;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (i >= b.constant.size() || !b.constant[i]) feeds.emplace_back(b.inputs[i], inputs[i]);
  return feeds;
}

// Element k of a tensor as a double (exact for every integer kernels output here).
double element(const Tensor& t, int64_t k) {
  switch (t.dtype()) {
    case DType::f32:
      return t.data<float>()[k];
    case DType::i32:
      return t.data<int32_t>()[k];
    case DType::i64:
      return static_cast<double>(t.data<int64_t>()[k]);
    case DType::u8:
      return t.data<uint8_t>()[k];
    case DType::i8:
      return t.data<int8_t>()[k];
  }
  return 0.0;
}

// |want - got| for one element, infinite where exactly one of them is NaN; equal infinities
// and two NaNs agree.
double element_error(double want, double got) {
  if (std::isnan(want) || std::isnan(got))
    return std::isnan(want) && std::isnan(got) ? 0.0 : INFINITY;
  return want == got ? 0.0 : std::abs(want - got);
}

}  // namespace

void expect_close(const Tensor& want, const Tensor& got, const Tolerance& tolerance,
                  const std::string& what) {
  ASSERT_EQ(want.dtype(), got.dtype()) << what;
  ASSERT_EQ(want.shape(), got.shape()) << what;
  const bool is_float = want.dtype() == DType::f32;
  double max_err = 0, sum_err = 0;
  int64_t bad = -1;
  for (int64_t k = 0; k < want.numel(); ++k) {
    const double w = element(want, k);
    const double err = element_error(w, element(got, k));
    const double allowed = is_float ? tolerance.atol + tolerance.rtol * std::abs(w)
                                    : static_cast<double>(tolerance.units);
    max_err = std::max(max_err, err);
    sum_err += err;
    if (bad < 0 && err > allowed) bad = k;
  }
  EXPECT_LT(bad, 0) << what << " " << dtype_name(want.dtype()) << shape_str(want.shape())
                    << ": first mismatch at " << bad << " (want "
                    << (bad >= 0 ? element(want, bad) : 0) << ", got "
                    << (bad >= 0 ? element(got, bad) : 0) << "), max err " << max_err
                    << ", mean err "
                    << sum_err / static_cast<double>(std::max<int64_t>(1, want.numel()));
}

Tensor run_once(const BuildFn& build, const std::vector<Tensor>& inputs, const std::string& impl,
                bool training) {
  Built b = build_graph(build, inputs);
  Session session(b.graph, SessionOptions{.kernel_impl = impl, .seed = 7});
  return session.run(feeds_of(b, inputs), {b.y}, training)[0].clone();
}

void expect_gradients_match(const BuildFn& build, const std::vector<Tensor>& inputs, uint32_t seed,
                            const GradCheckOptions& options) {
  Built b = build_graph(build, inputs);
  const TensorType y_type = b.graph.type(b.y);
  Tensor weights = random_tensor(y_type.shape, seed + 1000);
  Output weighted = ops::mul(b.graph, b.y, ops::constant(b.graph, weights, "check/weights"));
  std::vector<int64_t> axes;
  for (size_t i = 0; i < y_type.shape.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  Output loss = axes.empty() ? weighted : ops::reduce_sum(b.graph, weighted, axes);
  std::vector<Output> grads = gradients(b.graph, loss, b.inputs);

  Session session(b.graph, SessionOptions{.kernel_impl = options.impl, .seed = seed});
  std::vector<Tensor> values;
  for (const Tensor& t : inputs) values.push_back(t.clone());
  auto eval_loss = [&]() {
    session.reseed(seed);
    return static_cast<double>(
        *session.run(feeds_of(b, values), {loss}, options.training)[0].data<float>());
  };

  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype() != DType::f32) continue;
    ASSERT_TRUE(grads[i].valid()) << "no gradient flows to input " << i << " (seed " << seed << ")";
    session.reseed(seed);
    Tensor analytic = session.run(feeds_of(b, values), {grads[i]}, options.training)[0].clone();
    float* x = values[i].data<float>();
    double worst = 0.0;
    int64_t worst_index = -1;
    double worst_analytic = 0.0, worst_numeric = 0.0;
    for (int64_t k = 0; k < values[i].numel(); ++k) {
      const float saved = x[k];
      x[k] = saved + static_cast<float>(options.eps);
      double plus = eval_loss();
      x[k] = saved - static_cast<float>(options.eps);
      double minus = eval_loss();
      x[k] = saved;
      double numeric = (plus - minus) / (2 * options.eps);
      double a = analytic.data<float>()[k];
      double excess = std::abs(a - numeric) - (options.atol + options.rtol * std::abs(numeric));
      if (excess > worst) {
        worst = excess;
        worst_index = k;
        worst_analytic = a;
        worst_numeric = numeric;
      }
    }
    EXPECT_LT(worst_index, 0) << "gradient of input " << i << " " << shape_str(inputs[i].shape())
                              << " differs at element " << worst_index << ": analytic "
                              << worst_analytic << " vs numeric " << worst_numeric << " (seed "
                              << seed << ")";
  }
}

std::string compare_with_reference(const BuildFn& build, const std::vector<Tensor>& inputs,
                                   const std::vector<bool>& constant, const std::string& impl,
                                   const Tolerance& tolerance, Precision precision) {
  Built b = build_graph(build, inputs, constant);
  const Node& node = b.graph.node(b.y.node);
  std::vector<Output> fetches;
  for (int i = 0; i < static_cast<int>(node.outputs.size()); ++i) fetches.push_back({b.y.node, i});
  const Feeds feeds = feeds_of(b, inputs);
  Session optimized(b.graph, SessionOptions{.kernel_impl = impl, .precision = precision});
  std::vector<Tensor> got = optimized.run(feeds, fetches);
  const std::string chosen = optimized.kernel_choices()[node.name];
  if (chosen != impl) return chosen;
  for (Tensor& t : got) t = t.clone();
  // A bf16 product's inputs are rounded: the reference computes on the rounded values.
  std::vector<Tensor> reference_inputs = inputs;
  if (precision == Precision::bf16)
    for (Tensor& t : reference_inputs)
      if (t.dtype() == DType::f32) t = rounded_to_bf16(t);
  const Built rb = build_graph(build, reference_inputs, constant);
  Session reference(rb.graph, SessionOptions{.kernel_impl = "reference"});
  const std::vector<Tensor> want = reference.run(feeds_of(rb, reference_inputs), fetches);
  const bool any_constant =
      std::find(b.constant.begin(), b.constant.end(), true) != b.constant.end();
  for (int run = 1; run <= (any_constant ? 2 : 1); ++run) {
    if (run == 2) got = optimized.run(feeds, fetches);
    for (size_t o = 0; o < fetches.size(); ++o)
      expect_close(want[o], got[o], tolerance,
                   impl + " vs reference, output " + std::to_string(o) +
                       (any_constant ? ", run " + std::to_string(run) : ""));
  }
  return chosen;
}

Tensor rounded_to_bf16(const Tensor& t) {
  Tensor r = t.clone();
  float* p = r.data<float>();
  for (int64_t i = 0; i < r.numel(); ++i) {
    uint32_t bits = std::bit_cast<uint32_t>(p[i]);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    p[i] = std::bit_cast<float>(bits & 0xffff0000u);
  }
  return r;
}

void expect_impl_matches_reference(const BuildFn& build, const std::vector<Tensor>& inputs,
                                   const std::string& impl, double rtol, double atol,
                                   bool allow_fallback) {
  const std::string chosen =
      compare_with_reference(build, inputs, {}, impl, Tolerance{.rtol = rtol, .atol = atol});
  if (!allow_fallback) {
    EXPECT_EQ(chosen, impl) << "the node did not use " << impl;
  }
}

bool onednn_jit_covers_all() {
#if defined(__x86_64__)
  return true;
#else
  return false;
#endif
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_error(const std::function<void()>& fn, const std::string& want) {
  const std::string message = error_of(fn);
  EXPECT_NE(message.find(want), std::string::npos)
      << "expected an error containing: " << want << "; got: " << message;
}

std::string error_of(const std::function<void(Graph&)>& build) {
  Graph g;
  return error_of([&] { build(g); });
}

}  // namespace sf::testing
