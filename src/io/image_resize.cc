#include "io/image_resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sf {

namespace {

// The input pixels and weights (summing to 1) of each output pixel along one axis.
struct AxisWeights {
  std::vector<int64_t> first;   // per output pixel: its first input pixel (clamped)
  std::vector<int64_t> start;   // per output pixel: where its weights begin in `weights`
  std::vector<float> weights;   // for input pixels first, first + 1, ...
};

AxisWeights axis_weights(int64_t in, int64_t out) {
  AxisWeights a;
  const double scale = static_cast<double>(out) / static_cast<double>(in);
  // The filter's half-width in input pixels: 1 when enlarging, 1 / scale when shrinking.
  const double radius = scale >= 1.0 ? 1.0 : 1.0 / scale;
  const double stretch = scale >= 1.0 ? 1.0 : scale;
  std::vector<double> w;
  for (int64_t o = 0; o < out; ++o) {
    const double centre = (static_cast<double>(o) + 0.5) / scale;  // in input coordinates
    const auto lo = static_cast<int64_t>(std::floor(centre - radius - 0.5));
    const auto hi = static_cast<int64_t>(std::ceil(centre + radius - 0.5));
    // Taps beyond the edges land on the edge pixel.
    const int64_t first = std::clamp<int64_t>(lo, 0, in - 1);
    const int64_t last = std::clamp<int64_t>(hi, 0, in - 1);
    w.assign(static_cast<size_t>(last - first + 1), 0.0);
    double total = 0.0;
    for (int64_t i = lo; i <= hi; ++i) {
      const double weight =
          std::max(0.0, 1.0 - std::abs(static_cast<double>(i) + 0.5 - centre) * stretch);
      w[static_cast<size_t>(std::clamp<int64_t>(i, 0, in - 1) - first)] += weight;
      total += weight;
    }
    a.first.push_back(first);
    a.start.push_back(static_cast<int64_t>(a.weights.size()));
    for (double v : w) a.weights.push_back(static_cast<float>(v / total));
  }
  a.start.push_back(static_cast<int64_t>(a.weights.size()));
  return a;
}

}  // namespace

void resize_triangle(const float* src, int64_t width, int64_t height, int64_t channels,
                     float* dst, int64_t out_width, int64_t out_height) {
  const AxisWeights rows = axis_weights(height, out_height);
  const AxisWeights cols = axis_weights(width, out_width);
  const int64_t in_row = width * channels;
  // One output row at a time: the input rows it covers, blended, then resampled across.
  std::vector<float> blended(static_cast<size_t>(in_row));
  for (int64_t oy = 0; oy < out_height; ++oy) {
    std::fill(blended.begin(), blended.end(), 0.0f);
    for (int64_t k = rows.start[oy]; k < rows.start[oy + 1]; ++k) {
      const float weight = rows.weights[static_cast<size_t>(k)];
      const float* row = src + (rows.first[oy] + k - rows.start[oy]) * in_row;
      for (int64_t i = 0; i < in_row; ++i) blended[static_cast<size_t>(i)] += weight * row[i];
    }
    float* out = dst + oy * out_width * channels;
    for (int64_t ox = 0; ox < out_width; ++ox)
      for (int64_t c = 0; c < channels; ++c) {
        float sum = 0.0f;
        for (int64_t k = cols.start[ox]; k < cols.start[ox + 1]; ++k)
          sum += cols.weights[static_cast<size_t>(k)] *
                 blended[static_cast<size_t>((cols.first[ox] + k - cols.start[ox]) * channels + c)];
        out[ox * channels + c] = sum;
      }
  }
}

}  // namespace sf
