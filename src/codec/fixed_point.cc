#include "codec/fixed_point.h"

#include <cmath>

#include "core/error.h"

namespace sf {

QuantizedMultiplier quantize_multiplier(double real) {
  if (!std::isfinite(real) || real <= 0.0 || real >= 2147483648.0)
    fail("quantized multiplier {} must be finite and in (0, 2^31)", real);
  int exponent = 0;
  const double fraction = std::frexp(real, &exponent);  // real = fraction * 2^exponent
  int64_t q = std::llround(fraction * 2147483648.0);    // fraction in [0.5, 1)
  if (q == (int64_t{1} << 31)) {  // rounded up to 1.0
    q /= 2;
    ++exponent;
  }
  // Below 2^-62 no int32 times real reaches 0.5; rounding_divide_by_pot stops at 62.
  if (exponent < -62) return {0, 0};
  return {static_cast<int32_t>(q), exponent};
}

}  // namespace sf
