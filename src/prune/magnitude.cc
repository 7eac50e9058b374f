#include "prune/magnitude.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace sf {

std::vector<std::string> prunable_weights(const Model& model) {
  std::vector<std::string> names;
  const std::string suffix = "/weights";
  for (const Parameter& p : model.parameters) {
    const bool is_weight = p.name.size() > suffix.size() &&
                           p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (is_weight && model.graph.type(p.output).shape.size() >= 2) names.push_back(p.name);
  }
  return names;
}

std::string layer_of(const std::string& weight_name) {
  const size_t slash = weight_name.rfind('/');
  return slash == std::string::npos ? weight_name : weight_name.substr(0, slash);
}

Tensor magnitude_mask(const Tensor& weights, double sparsity) {
  SF_CHECK(sparsity >= 0.0 && sparsity <= 1.0, "sparsity {} is outside [0, 1]", sparsity);
  const int64_t n = weights.numel();
  const float* w = weights.data<float>();
  const int64_t zeros = std::min<int64_t>(n, std::llround(sparsity * static_cast<double>(n)));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Only the smallest `zeros` need ordering; ties keep index order for determinism.
  auto smaller = [&](int64_t a, int64_t b) {
    const float ma = std::abs(w[a]), mb = std::abs(w[b]);
    return ma < mb || (ma == mb && a < b);
  };
  if (zeros > 0 && zeros < n)
    std::nth_element(order.begin(), order.begin() + zeros, order.end(), smaller);
  Tensor mask(DType::f32, weights.shape());
  float* m = mask.data<float>();
  std::fill(m, m + n, 1.0f);
  for (int64_t i = 0; i < zeros; ++i) m[order[static_cast<size_t>(i)]] = 0.0f;
  return mask;
}

std::map<std::string, double> global_sparsities(const std::map<std::string, const Tensor*>& weights,
                                                double target) {
  SF_CHECK(target >= 0.0 && target < 1.0, "target sparsity {} is outside [0, 1)", target);
  std::vector<float> magnitudes;
  for (const auto& [name, t] : weights) {
    const float* w = t->data<float>();
    for (int64_t i = 0; i < t->numel(); ++i) magnitudes.push_back(std::abs(w[i]));
  }
  std::map<std::string, double> out;
  if (magnitudes.empty()) return out;
  const size_t zeros = std::min(magnitudes.size(), static_cast<size_t>(std::llround(
                                                       target * static_cast<double>(magnitudes.size()))));
  if (zeros == 0) {
    for (const auto& [name, t] : weights) out[name] = 0.0;
    return out;
  }
  std::nth_element(magnitudes.begin(), magnitudes.begin() + static_cast<std::ptrdiff_t>(zeros - 1),
                   magnitudes.end());
  const float threshold = magnitudes[zeros - 1];
  for (const auto& [name, t] : weights) {
    const float* w = t->data<float>();
    int64_t below = 0;
    for (int64_t i = 0; i < t->numel(); ++i) below += std::abs(w[i]) <= threshold;
    out[name] = static_cast<double>(below) / static_cast<double>(std::max<int64_t>(t->numel(), 1));
  }
  return out;
}

void apply_mask(Tensor& weights, const Tensor& mask) {
  SF_CHECK(weights.numel() == mask.numel(), "mask has {} elements, weights {}", mask.numel(),
           weights.numel());
  float* w = weights.data<float>();
  const float* m = mask.data<float>();
  // A plain +0 (not w * 0, which is -0 for negative w) so stored zeros are all alike.
  for (int64_t i = 0; i < weights.numel(); ++i) w[i] = m[i] != 0.0f ? w[i] : 0.0f;
}

double sparsity_of(const Tensor& t) {
  const float* v = t.data<float>();
  int64_t zeros = 0;
  for (int64_t i = 0; i < t.numel(); ++i) zeros += v[i] == 0.0f;
  return t.numel() ? static_cast<double>(zeros) / static_cast<double>(t.numel()) : 0.0;
}

double cubic_sparsity(int64_t step, int64_t ramp_steps, double final_sparsity) {
  if (ramp_steps <= 0 || step >= ramp_steps) return final_sparsity;
  const double left = 1.0 - static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(ramp_steps);
  return final_sparsity * (1.0 - left * left * left);
}

}  // namespace sf
