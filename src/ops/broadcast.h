// NumPy broadcasting and reduction-axis rules, shared by the ops' shape functions and the
// reference kernels so that the rules are written once.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/shape.h"

namespace sf {

// The broadcast of two shapes (aligned from the right; a 1 stretches to the other side's
// dimension); nullopt when two aligned dimensions differ and neither is 1.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);
// True when `from` broadcasts to exactly `to`.
bool broadcasts_to(const Shape& from, const Shape& to);
// Element strides of `in` viewed as a tensor of shape `out`: one per dimension of `out`, 0
// along stretched or missing dimensions. `in` must broadcast to `out`.
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

// Sorted, distinct axes in [0, rank); negative ones count from the end and an empty list means
// every axis. nullopt when an axis is out of range or repeated.
std::optional<std::vector<int64_t>> normalize_axes(const std::vector<int64_t>& axes, int64_t rank);
// `shape` with the (normalized) axes set to 1 (keep_dims) or removed.
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keep_dims);
// Inserts 1s so that they land at the (normalized) `axes` of the result; undoes
// reduced_shape(shape, axes, /*keep_dims=*/false).
Shape expand_shape(const Shape& shape, const std::vector<int64_t>& axes);

// Calls fn(o, ia, ib) for every element o of `out` in row-major order, where ia and ib are the
// offsets of the matching elements of `a` and `b` (both broadcast to `out`). The innermost
// dimension is a plain loop so that fn inlines into it.
template <typename Fn>
void for_each_broadcast(const Shape& out, const Shape& a, const Shape& b, Fn&& fn) {
  const int rank = static_cast<int>(out.size());
  if (rank == 0) {
    fn(int64_t{0}, int64_t{0}, int64_t{0});
    return;
  }
  const int64_t inner = out[static_cast<size_t>(rank - 1)];
  const int64_t total = num_elements(out);
  if (total == 0) return;
  const std::vector<int64_t> sa = broadcast_strides(a, out);
  const std::vector<int64_t> sb = broadcast_strides(b, out);
  const int64_t step_a = sa.back(), step_b = sb.back();
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  int64_t base_a = 0, base_b = 0;
  for (int64_t o = 0; o < total; o += inner) {
    for (int64_t k = 0; k < inner; ++k) fn(o + k, base_a + k * step_a, base_b + k * step_b);
    // Advance the outer dimensions like an odometer.
    for (int d = rank - 2; d >= 0; --d) {
      const size_t u = static_cast<size_t>(d);
      if (++index[u] < out[u]) {
        base_a += sa[u];
        base_b += sb[u];
        break;
      }
      base_a -= sa[u] * (out[u] - 1);
      base_b -= sb[u] * (out[u] - 1);
      index[u] = 0;
    }
  }
}

}  // namespace sf
