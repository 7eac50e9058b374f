// Internal to the ONNX importer: the shape arguments of shape-manipulating ops, read the same
// way whether the op is folded at import time or becomes a graph node.
#pragma once

#include <vector>

#include "onnx/context.h"

namespace sf::onnx_import {

// `axes` of Squeeze/Unsqueeze/ReduceMean-like ops: an attribute before `input_from_opset`,
// input `index` (a constant) from then on. Empty when absent.
std::vector<int64_t> axes_arg(Context& c, int index, int input_from_opset);

// The StridedSlice attributes of the current Slice node.
Attrs strided_slice_attrs(Context& c);

Shape unsqueeze_shape(Context& c, const Shape& in);
Shape squeeze_shape(Context& c, const Shape& in);
// Reshape's target with 0 (copy the input dimension) and -1 (inferred) resolved.
Shape reshape_shape(Context& c, const Shape& in);
Shape flatten_shape(Context& c, const Shape& in);
std::vector<int64_t> transpose_perm_of(Context& c, size_t rank);
// An axis in [0, rank); fails naming the node when out of range.
int64_t normalize_axis(Context& c, int64_t axis, int64_t rank);

// Opset 18's Resize and Pad may give their per-axis values (Resize's roi/scales/sizes, Pad's
// pads) for the axes of an `axes` argument only; `all` holds the full-rank defaults (per axis
// one value, or starts then ends), which the given values replace on their axes. Without
// `axes`, `given` as it is.
template <typename T>
inline std::vector<T> on_all_axes(Context& c, const std::vector<T>& given,
                           const std::vector<int64_t>& axes, std::vector<T> all, const char* what) {
  if (axes.empty()) return given;
  const size_t rank = c.in(0).shape.size();
  const size_t parts = all.size() / rank;
  if (given.size() != parts * axes.size())
    c.fail("{} has {} entries for axes [{}]", what, given.size(), fmt::join(axes, ","));
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t a = static_cast<size_t>(normalize_axis(c, axes[i], static_cast<int64_t>(rank)));
    if (seen[a]) c.fail("axes [{}] repeat axis {}", fmt::join(axes, ","), a);
    seen[a] = true;
    for (size_t p = 0; p < parts; ++p) all[a + p * rank] = given[i + p * axes.size()];
  }
  return all;
}

}  // namespace sf::onnx_import
