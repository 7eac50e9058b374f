// What Dropout draws for each element: 24 uniform bits from a counter-based hash of the call's
// 64-bit key and the element's index. One key per call (from the session's generator) instead of
// one generator draw per element: a mask costs a few integer operations per element, vectorizes
// and splits over threads, and the same key gives the same mask on any path or thread count.
// An element is dropped when its bits fall below rate x 2^24.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace sf {

// Chris Wellons' "lowbias32" integer hash: a bijection of 32-bit words whose output bits each
// flip with probability close to 1/2 for any flipped input bit.
inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

inline uint32_t dropout_bits(uint64_t key, uint64_t index) {
  const uint32_t first = mix32(static_cast<uint32_t>(index) ^ static_cast<uint32_t>(key));
  return mix32(first ^ static_cast<uint32_t>(index >> 32) ^ static_cast<uint32_t>(key >> 32)) >> 8;
}

// Elements whose bits are below this are dropped: rate in steps of 2^-24.
inline uint32_t dropout_threshold(double rate) {
  return static_cast<uint32_t>(std::clamp(std::llround(rate * 16777216.0), 0LL, 16777216LL));
}

}  // namespace sf
