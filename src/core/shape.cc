#include "core/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sf {

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace sf
