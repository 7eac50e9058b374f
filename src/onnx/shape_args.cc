// Shape arguments of Reshape, Squeeze, Unsqueeze, Flatten, Slice and Transpose.
#include "onnx/shape_args.h"

#include <algorithm>

namespace sf::onnx_import {

int64_t normalize_axis(Context& c, int64_t axis, int64_t rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) c.fail("axis {} is out of range for rank {}", axis, rank);
  return a;
}

std::vector<int64_t> axes_arg(Context& c, int index, int input_from_opset) {
  if (c.opset < input_from_opset) return c.attr_ints("axes");
  if (!c.has_input(index)) return {};
  return to_ints(c.const_in(index, "axes"));
}

Attrs strided_slice_attrs(Context& c) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset < 10) {
    starts = c.attr_ints("starts");
    ends = c.attr_ints("ends");
    axes = c.attr_ints("axes");
  } else {
    starts = to_ints(c.const_in(1, "starts"));
    ends = to_ints(c.const_in(2, "ends"));
    if (c.has_input(3)) axes = to_ints(c.const_in(3, "axes"));
    if (c.has_input(4)) steps = to_ints(c.const_in(4, "steps"));
  }
  return {{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}};
}

Shape unsqueeze_shape(Context& c, const Shape& in) {
  std::vector<int64_t> axes = axes_arg(c, 1, 13);
  const int64_t rank = static_cast<int64_t>(in.size() + axes.size());
  for (int64_t& a : axes) a = normalize_axis(c, a, rank);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) c.fail("repeated axes");
  Shape out;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i) {
    if (std::binary_search(axes.begin(), axes.end(), i)) {
      out.push_back(1);
    } else {
      if (next >= in.size()) c.fail("axes do not fit input {}", shape_str(in));
      out.push_back(in[next++]);
    }
  }
  return out;
}

Shape squeeze_shape(Context& c, const Shape& in) {
  std::vector<int64_t> axes = axes_arg(c, 1, 13);
  const int64_t rank = static_cast<int64_t>(in.size());
  for (int64_t& a : axes) {
    a = normalize_axis(c, a, rank);
    if (in[static_cast<size_t>(a)] != 1)
      c.fail("cannot squeeze axis {} of {}: not 1", a, shape_str(in));
  }
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    const bool drop = axes.empty() ? in[static_cast<size_t>(i)] == 1
                                   : std::count(axes.begin(), axes.end(), i) > 0;
    if (!drop) out.push_back(in[static_cast<size_t>(i)]);
  }
  return out;
}

Shape reshape_shape(Context& c, const Shape& in) {
  std::vector<int64_t> spec = c.opset < 5 ? c.attr_ints("shape") : to_ints(c.const_in(1, "shape"));
  const bool allow_zero = c.attr_int("allowzero", 0) != 0;
  Shape out;
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == 0 && !allow_zero) {
      if (i >= in.size())
        c.fail("shape [{}]: 0 at {} but input {}", fmt::join(spec, ","), i, shape_str(in));
      d = in[i];
    }
    if (d == -1) {
      if (inferred >= 0) c.fail("shape [{}] has two -1", fmt::join(spec, ","));
      inferred = static_cast<int>(i);
    } else if (d < 0) {
      c.fail("shape [{}] has a negative dimension", fmt::join(spec, ","));
    } else {
      known *= d;
    }
    out.push_back(d);
  }
  const int64_t count = num_elements(in);
  if (inferred >= 0) {
    if (known == 0 || count % known != 0)
      c.fail("cannot reshape {} to [{}]", shape_str(in), fmt::join(spec, ","));
    out[static_cast<size_t>(inferred)] = count / known;
  } else if (known != count) {
    c.fail("cannot reshape {} to [{}]", shape_str(in), fmt::join(spec, ","));
  }
  return out;
}

Shape flatten_shape(Context& c, const Shape& in) {
  const int64_t rank = static_cast<int64_t>(in.size());
  int64_t axis = c.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) c.fail("axis {} is out of range for {}", axis, shape_str(in));
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : inner) *= in[static_cast<size_t>(i)];
  return {outer, inner};
}

std::vector<int64_t> transpose_perm_of(Context& c, size_t rank) {
  std::vector<int64_t> perm = c.attr_ints("perm");
  if (perm.empty())
    for (size_t i = rank; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  if (perm.size() != rank) c.fail("perm [{}] for rank {}", fmt::join(perm, ","), rank);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < rank; ++i)
    if (sorted[i] != static_cast<int64_t>(i))
      c.fail("perm [{}] is not a permutation", fmt::join(perm, ","));
  return perm;
}

}  // namespace sf::onnx_import
