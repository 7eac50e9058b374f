// Numeric conversion that saturates where C++ leaves it undefined: a float out of an integer
// type's range becomes that type's nearest bound, and NaN becomes 0. Integer to integer and
// anything to float convert as static_cast does (wrapping modulo 2^n, as ONNX's Cast).
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

namespace sf {

template <typename To, typename From>
To saturating_cast(From v) {
  if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (std::isnan(v)) return 0;
    if (v <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (v >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
  }
  return static_cast<To>(v);
}

}  // namespace sf
