#include "core/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sf {

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

}  // namespace sf
