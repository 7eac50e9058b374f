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

}  // namespace sf::onnx_import
