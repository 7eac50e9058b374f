#include "codec/binary_weights.h"

#include <cmath>

#include "core/error.h"

namespace sf::quant {

namespace {

struct ChannelsLast {
  int64_t rows = 0, channels = 0;
};

ChannelsLast channels_last(const Tensor& w, const char* what) {
  if (w.dtype() != DType::f32) fail("{}: needs an f32 tensor, got {}", what, dtype_name(w.dtype()));
  if (w.rank() == 0) fail("{}: needs rank 1 or more (channels last), got a scalar", what);
  ChannelsLast g;
  g.channels = w.dim(-1);
  g.rows = g.channels == 0 ? 0 : w.numel() / g.channels;
  return g;
}

std::vector<double> mean_magnitude(const float* x, ChannelsLast g) {
  std::vector<double> sum(static_cast<size_t>(g.channels), 0.0);
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.channels; ++c) sum[static_cast<size_t>(c)] += std::fabs(x[r * g.channels + c]);
  for (double& s : sum) s /= static_cast<double>(std::max<int64_t>(g.rows, 1));
  return sum;
}

}  // namespace

Tensor binarize_weights(const Tensor& w) {
  const ChannelsLast g = channels_last(w, "binarize_weights");
  const float* x = w.data<float>();
  const std::vector<double> alpha = mean_magnitude(x, g);
  Tensor out(DType::f32, w.shape());
  float* y = out.data<float>();
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.channels; ++c) {
      const auto a = static_cast<float>(alpha[static_cast<size_t>(c)]);
      y[r * g.channels + c] = x[r * g.channels + c] >= 0.0f ? a : -a;
    }
  return out;
}

Tensor ternarize_weights(const Tensor& w) {
  const ChannelsLast g = channels_last(w, "ternarize_weights");
  const float* x = w.data<float>();
  const std::vector<double> mean = mean_magnitude(x, g);
  std::vector<double> kept_sum(static_cast<size_t>(g.channels), 0.0);
  std::vector<int64_t> kept(static_cast<size_t>(g.channels), 0);
  auto delta = [&](int64_t c) { return kTernaryThreshold * mean[static_cast<size_t>(c)]; };
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.channels; ++c) {
      const double m = std::fabs(x[r * g.channels + c]);
      if (m > delta(c)) {
        kept_sum[static_cast<size_t>(c)] += m;
        ++kept[static_cast<size_t>(c)];
      }
    }
  Tensor out(DType::f32, w.shape());
  float* y = out.data<float>();
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.channels; ++c) {
      const auto k = static_cast<size_t>(c);
      const auto a = static_cast<float>(kept[k] ? kept_sum[k] / static_cast<double>(kept[k]) : 0.0);
      const float v = x[r * g.channels + c];
      y[r * g.channels + c] = std::fabs(v) > delta(c) ? (v > 0.0f ? a : -a) : 0.0f;
    }
  return out;
}

std::optional<SignedLevels> signed_levels(const Tensor& w) {
  if (w.dtype() != DType::f32 || w.rank() == 0 || w.numel() == 0) return std::nullopt;
  const int64_t channels = w.dim(-1);
  const int64_t rows = w.numel() / channels;
  const float* x = w.data<float>();
  SignedLevels out;
  out.scales.assign(static_cast<size_t>(channels), 0.0f);
  out.levels.resize(static_cast<size_t>(w.numel()));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < channels; ++c) {
      const float v = x[r * channels + c];
      float& scale = out.scales[static_cast<size_t>(c)];
      if (!std::isfinite(v)) return std::nullopt;
      if (v == 0.0f) {
        out.levels[static_cast<size_t>(r * channels + c)] = 0;
        continue;
      }
      const float m = std::fabs(v);
      if (scale == 0.0f) scale = m;
      if (m != scale) return std::nullopt;
      out.levels[static_cast<size_t>(r * channels + c)] = v > 0.0f ? 1 : -1;
    }
  for (size_t i = 0; i < out.levels.size(); ++i)
    if (out.levels[i] == 0 && out.scales[i % static_cast<size_t>(channels)] != 0.0f) out.ternary = true;
  // A channel of zeros is stored as level +1 with scale 0 in binary form.
  if (!out.ternary)
    for (int8_t& l : out.levels)
      if (l == 0) l = 1;
  return out;
}

}  // namespace sf::quant
