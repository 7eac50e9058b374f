// The binary dot-product ceiling probe (xor_popcount_ceiling_avx512.cc).
#pragma once

#include <cstdint>

namespace sf::bench {

// Runs `iterations` x 8 register-resident XOR + popcount + add steps on 512-bit vectors (each
// step: 512 bit-MACs); returns a checksum so that the loop is not optimized away.
int64_t xor_popcount_ceiling_avx512(int64_t iterations, uint64_t seed);
inline constexpr int64_t kCeilingBitMacsPerIteration = 8 * 512;

}  // namespace sf::bench
