#include "support/testing.h"

#include <gtest/gtest.h>

#include <cmath>

#include "autodiff/gradients.h"
#include "ops/ops.h"
#include "runtime/session.h"

namespace sf::testing {

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
};

Built build_graph(const BuildFn& build, const std::vector<Tensor>& inputs) {
  Built b;
  for (size_t i = 0; i < inputs.size(); ++i)
    b.inputs.push_back(ops::placeholder(b.graph, inputs[i].dtype(), inputs[i].shape(),
                                        "input" + std::to_string(i)));
  b.y = build(b.graph, b.inputs);
  return b;
}

Feeds feeds_of(const Built& b, const std::vector<Tensor>& inputs) {
  Feeds feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds.emplace_back(b.inputs[i], inputs[i]);
  return feeds;
}

}  // namespace

Tensor run_once(const BuildFn& build, const std::vector<Tensor>& inputs, const std::string& impl,
                bool training) {
  Built b = build_graph(build, inputs);
  Session session(b.graph, SessionOptions{.kernel_impl = impl, .seed = 7});
  return session.run(feeds_of(b, inputs), {b.y}, training)[0].clone();
}

void expect_gradients_match(const BuildFn& build, const std::vector<Tensor>& inputs,
                            uint32_t seed, const GradCheckOptions& options) {
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
                              << worst_analytic << " vs numeric " << worst_numeric
                              << " (seed " << seed << ")";
  }
}

void expect_impl_matches_reference(const BuildFn& build, const std::vector<Tensor>& inputs,
                                   const std::string& impl, double rtol, double atol,
                                   bool allow_fallback) {
  Built b = build_graph(build, inputs);
  const Node& node = b.graph.node(b.y.node);
  std::vector<Output> fetches;
  for (int i = 0; i < static_cast<int>(node.outputs.size()); ++i) fetches.push_back({b.y.node, i});
  Session reference(b.graph, SessionOptions{.kernel_impl = "reference"});
  Session optimized(b.graph, SessionOptions{.kernel_impl = impl});
  std::vector<Tensor> want = reference.run(feeds_of(b, inputs), fetches);
  std::vector<Tensor> got = optimized.run(feeds_of(b, inputs), fetches);
  if (!allow_fallback) {
    auto choices = optimized.kernel_choices();
    ASSERT_EQ(choices[node.name], impl) << "node " << node.name << " did not use " << impl;
  }
  for (size_t o = 0; o < fetches.size(); ++o) {
    if (want[o].dtype() != DType::f32) continue;
    ASSERT_EQ(want[o].shape(), got[o].shape());
    const float* w = want[o].data<float>();
    const float* g = got[o].data<float>();
    double max_err = 0, sum_err = 0;
    int64_t bad = -1;
    for (int64_t k = 0; k < want[o].numel(); ++k) {
      double err = std::abs(static_cast<double>(w[k]) - g[k]);
      max_err = std::max(max_err, err);
      sum_err += err;
      if (bad < 0 && err > atol + rtol * std::abs(static_cast<double>(w[k]))) bad = k;
    }
    EXPECT_LT(bad, 0) << impl << " vs reference, output " << o << " " << shape_str(want[o].shape())
                      << ": first mismatch at " << bad << " (want " << (bad >= 0 ? w[bad] : 0)
                      << ", got " << (bad >= 0 ? g[bad] : 0) << "), max err " << max_err
                      << ", mean err " << sum_err / std::max<int64_t>(1, want[o].numel());
  }
}

bool onednn_jit_covers_all() {
#if defined(__x86_64__)
  return true;
#else
  return false;
#endif
}

void expect_error(const std::function<void()>& fn, const std::string& want) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing: " << want;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

}  // namespace sf::testing
