#include "prune/magnitude.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/error.h"
#include "graph/op_registry.h"
#include "ops/op_names.h"

namespace sf {

std::vector<std::string> prunable_weights(const Model& model) {
  const Graph& g = model.graph;
  std::set<int> weights;  // node ids of the tensors layers read as their weights
  for (const WeightUse& use : weight_uses(g)) {
    const Node& source = g.node(use.weight.node);
    // Under quantization-aware training a layer reads its Variable through FakeQuantWeights.
    weights.insert(source.op == op_names::kFakeQuantWeights ? source.inputs[0].node : source.id);
  }
  std::vector<std::string> names;
  for (const Parameter& p : model.parameters)
    if (weights.count(p.output.node)) names.push_back(p.name);
  return names;
}

std::string layer_of(const std::string& weight_name) {
  const size_t slash = weight_name.rfind('/');
  return slash == std::string::npos ? weight_name : weight_name.substr(0, slash);
}

namespace {

// The blocks of one weight tensor: block b is row b / per_row, columns
// [(b % per_row) * block, + size(b)).
struct Blocks {
  int64_t block, row, per_row, count;

  Blocks(const Tensor& w, int64_t block_size)
      : block(block_size),
        row(w.rank() == 0 ? 1 : w.shape().back()),
        per_row(row == 0 ? 0 : (row + block - 1) / block),
        count(row == 0 ? 0 : w.numel() / row * per_row) {
    SF_CHECK(is_prune_block(block), "prune block {} is not 1, 4, 8 or 16", block);
  }
  int64_t start(int64_t b) const { return b / per_row * row + b % per_row * block; }
  int64_t size(int64_t b) const { return std::min(block, row - b % per_row * block); }
};

std::vector<float> block_magnitudes(const Tensor& weights, const Blocks& blocks,
                                    const std::string& norm) {
  SF_CHECK(norm == "l1" || norm == "l2", "block norm must be l1 or l2, got '{}'", norm);
  const bool l1 = norm == "l1";
  const float* w = weights.data<float>();
  std::vector<float> out(static_cast<size_t>(blocks.count));
  for (int64_t b = 0; b < blocks.count; ++b) {
    const float* v = w + blocks.start(b);
    const int64_t size = blocks.size(b);
    double sum = 0.0;
    for (int64_t i = 0; i < size; ++i)
      sum += l1 ? std::abs(v[i]) : static_cast<double>(v[i]) * v[i];
    out[static_cast<size_t>(b)] = static_cast<float>(
        l1 ? sum / static_cast<double>(size) : std::sqrt(sum / static_cast<double>(size)));
  }
  return out;
}

}  // namespace

bool is_prune_block(int64_t block) { return block == 1 || block == 4 || block == 8 || block == 16; }

int64_t prune_block_for(const Tensor& weights, int64_t block) {
  return weights.rank() == 2 ? block : 1;
}

Tensor magnitude_mask(const Tensor& weights, double sparsity, int64_t block,
                      const std::string& norm) {
  SF_CHECK(sparsity >= 0.0 && sparsity <= 1.0, "sparsity {} is outside [0, 1]", sparsity);
  const Blocks blocks(weights, block);
  const std::vector<float> magnitude = block_magnitudes(weights, blocks, norm);
  const int64_t n = blocks.count;
  const int64_t zeros = std::min<int64_t>(n, std::llround(sparsity * static_cast<double>(n)));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Only the smallest `zeros` need ordering; ties keep index order for determinism.
  auto smaller = [&](int64_t a, int64_t b) {
    const float ma = magnitude[static_cast<size_t>(a)], mb = magnitude[static_cast<size_t>(b)];
    return ma < mb || (ma == mb && a < b);
  };
  if (zeros > 0 && zeros < n)
    std::nth_element(order.begin(), order.begin() + zeros, order.end(), smaller);
  Tensor mask(DType::f32, weights.shape());
  float* m = mask.data<float>();
  std::fill(m, m + weights.numel(), 1.0f);
  for (int64_t i = 0; i < zeros; ++i) {
    const int64_t b = order[static_cast<size_t>(i)];
    std::fill_n(m + blocks.start(b), blocks.size(b), 0.0f);
  }
  return mask;
}

std::map<std::string, double> global_sparsities(const std::map<std::string, const Tensor*>& weights,
                                                double target, int64_t block,
                                                const std::string& norm) {
  SF_CHECK(target >= 0.0 && target < 1.0, "target sparsity {} is outside [0, 1)", target);
  struct Magnitude {
    float value;
    int64_t size;
  };
  std::map<std::string, std::vector<float>> per_layer;
  std::vector<Magnitude> all;
  int64_t total = 0;
  for (const auto& [name, t] : weights) {
    const Blocks blocks(*t, prune_block_for(*t, block));
    per_layer[name] = block_magnitudes(*t, blocks, norm);
    for (int64_t b = 0; b < blocks.count; ++b)
      all.push_back(Magnitude{per_layer[name][static_cast<size_t>(b)], blocks.size(b)});
    total += t->numel();
  }
  std::map<std::string, double> out;
  if (all.empty()) return out;
  const int64_t zeros = std::min<int64_t>(total, std::llround(target * static_cast<double>(total)));
  if (zeros == 0) {
    for (const auto& [name, t] : weights) out[name] = 0.0;
    return out;
  }
  // The threshold is the magnitude of the block that brings the zeroed weights to `zeros`.
  std::sort(all.begin(), all.end(),
            [](const Magnitude& a, const Magnitude& b) { return a.value < b.value; });
  float threshold = all.back().value;
  int64_t zeroed = 0;
  for (const Magnitude& m : all) {
    zeroed += m.size;
    if (zeroed >= zeros) {
      threshold = m.value;
      break;
    }
  }
  for (const auto& [name, magnitudes] : per_layer) {
    const auto below = std::count_if(magnitudes.begin(), magnitudes.end(),
                                     [&](float m) { return m <= threshold; });
    out[name] =
        static_cast<double>(below) / static_cast<double>(std::max<size_t>(magnitudes.size(), 1));
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
  const double left =
      1.0 - static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(ramp_steps);
  return final_sparsity * (1.0 - left * left * left);
}

}  // namespace sf
