// Index geometry for the layout ops (layout_ops.cc): Transpose permutations and ONNX-style
// Slice ranges. Shape functions and reference kernels both call these, so they cannot disagree.
// Each returns an error message (empty on success) that shape functions prefix with the node.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/shape.h"

namespace sf {

// The permutation for a rank-`rank` Transpose; an empty `perm` reverses the axes (ONNX default).
inline std::string transpose_perm(const std::vector<int64_t>& perm, int64_t rank,
                                  std::vector<int64_t>* out) {
  std::vector<int64_t> p = perm;
  if (p.empty())
    for (int64_t d = rank - 1; d >= 0; --d) p.push_back(d);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  bool ok = static_cast<int64_t>(p.size()) == rank;
  for (size_t i = 0; ok && i < p.size(); ++i) {
    ok = p[i] >= 0 && p[i] < rank && !seen[static_cast<size_t>(p[i])];
    if (ok) seen[static_cast<size_t>(p[i])] = true;
  }
  if (!ok)
    return fmt::format("perm [{}] is not a permutation of the {} axes", fmt::join(perm, ","), rank);
  *out = std::move(p);
  return "";
}

// The inverse permutation: transposing by `perm` then by its inverse is the identity.
inline std::vector<int64_t> inverse_perm(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return inv;
}

// One axis of a slice: elements start, start + step, ... (count of them).
struct SliceAxis {
  int64_t start = 0, step = 1, count = 0;
};

namespace detail {

// ONNX Slice on one axis of size `dim`: negative start/end count from the end, then both are
// clamped ([0, dim] for positive steps, [-1, dim - 1] for negative ones, -1 meaning "before 0").
inline SliceAxis slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  SliceAxis s;
  s.step = step;
  if (dim == 0) return s;
  // Counts as (span - 1) / |step| + 1 so that huge steps cannot overflow.
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    s.count = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    s.count = start > end ? (start - end - 1) / -step + 1 : 0;
  }
  s.start = start;
  return s;
}

}  // namespace detail

// The per-axis ranges (one per axis of `shape`) of an ONNX Slice: `axes` empty means
// 0..len(starts)-1, `steps` empty means all 1. Axes not listed are taken whole.
inline std::string slice_ranges(const Shape& shape, const std::vector<int64_t>& starts,
                                const std::vector<int64_t>& ends, const std::vector<int64_t>& axes,
                                const std::vector<int64_t>& steps, std::vector<SliceAxis>* out) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  const size_t n = starts.size();
  if (ends.size() != n || (!axes.empty() && axes.size() != n) ||
      (!steps.empty() && steps.size() != n))
    return fmt::format("starts [{}], ends [{}], axes [{}] and steps [{}] must have equal lengths",
                       fmt::join(starts, ","), fmt::join(ends, ","), fmt::join(axes, ","),
                       fmt::join(steps, ","));
  std::vector<SliceAxis> ranges;
  for (int64_t d : shape) ranges.push_back(SliceAxis{0, 1, d});
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < n; ++i) {
    int64_t axis = axes.empty() ? static_cast<int64_t>(i) : axes[i];
    if (axis < -rank || axis >= rank)
      return fmt::format("axis {} is out of range for rank {}", axis, rank);
    if (axis < 0) axis += rank;
    if (seen[static_cast<size_t>(axis)]) return fmt::format("axis {} is listed twice", axis);
    seen[static_cast<size_t>(axis)] = true;
    const int64_t step = steps.empty() ? 1 : steps[i];
    if (step == 0) return fmt::format("step for axis {} is 0", axis);
    // INT64_MIN steps would overflow the count arithmetic; no real model uses them.
    if (step == std::numeric_limits<int64_t>::min())
      return fmt::format("step for axis {} is out of range", axis);
    ranges[static_cast<size_t>(axis)] =
        detail::slice_axis(shape[static_cast<size_t>(axis)], starts[i], ends[i], step);
  }
  *out = std::move(ranges);
  return "";
}

}  // namespace sf
