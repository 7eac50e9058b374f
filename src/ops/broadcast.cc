#include "ops/broadcast.h"

#include <algorithm>

namespace sf {

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Aligned from the right; missing leading dimensions act as 1.
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  std::optional<Shape> both = broadcast_shapes(from, to);
  return both && *both == to;
}

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  const size_t lead = out.size() - in.size();
  int64_t stride = 1;
  for (size_t i = in.size(); i-- > 0;) {
    strides[lead + i] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return strides;
}

std::optional<std::vector<int64_t>> normalize_axes(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t axis : axes) {
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) return std::nullopt;
    out.push_back(a);
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) return std::nullopt;
  return out;
}

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keep_dims) {
  Shape out;
  for (size_t i = 0; i < shape.size(); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) != axes.end();
    if (!reduced)
      out.push_back(shape[i]);
    else if (keep_dims)
      out.push_back(1);
  }
  return out;
}

Shape expand_shape(const Shape& shape, const std::vector<int64_t>& axes) {
  Shape out;
  size_t next = 0;
  const size_t rank = shape.size() + axes.size();
  for (size_t i = 0; i < rank; ++i) {
    bool inserted = std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) != axes.end();
    if (inserted || next >= shape.size())
      out.push_back(1);
    else
      out.push_back(shape[next++]);
  }
  return out;
}

}  // namespace sf
