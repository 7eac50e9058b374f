#include "kernels/binary/bit_conv.h"

namespace sf::binary {

TapWeights pack_tap_weights(const quant::SignedLevels& levels, int64_t taps, int64_t in, int64_t n) {
  TapWeights w;
  w.taps = taps;
  w.in = in;
  w.n = n;
  w.dwords = dwords_for(in);
  w.vectors = (n + 15) / 16;
  w.bits.assign(static_cast<size_t>(taps * w.dwords * w.vectors * 16), 0);
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t c = 0; c < in; ++c)
      for (int64_t o = 0; o < n; ++o)
        if (levels.levels[static_cast<size_t>((t * in + c) * n + o)] > 0)
          w.bits[static_cast<size_t>(((t * w.dwords + c / 32) * w.vectors + o / 16) * 16 + o % 16)] |=
              uint32_t{1} << (c % 32);
  return w;
}

}  // namespace sf::binary
