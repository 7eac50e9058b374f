// Tensor shapes: a list of non-negative dimensions, outermost first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sf {

using Shape = std::vector<int64_t>;

// "[64,28,28,1]"
std::string shape_str(const Shape& shape);
// Product of the dimensions; 1 for a scalar. Inline: loops bounded by a tensor's numel() would
// otherwise call out of the loop at every element, and neither hoist nor vectorize.
inline int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace sf
