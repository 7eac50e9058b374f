// Load and store masks for the ragged ends of AVX-512 loops, shared by every *_avx512.cc file
// (they are built only on x86-64, so this header is included only there).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace sf {

// The lanes of a 16-element vector starting at element `first` that lie below `count`.
__attribute__((target("avx512f"))) inline __mmask16 lanes16(int64_t first, int64_t count) {
  const int64_t left = count - first;
  if (left <= 0) return 0;
  return left >= 16 ? static_cast<__mmask16>(0xFFFF)
                    : static_cast<__mmask16>((1u << static_cast<unsigned>(left)) - 1u);
}

// The same for a vector of 32 16-bit elements.
__attribute__((target("avx512f"))) inline __mmask32 lanes32(int64_t first, int64_t count) {
  const int64_t left = count - first;
  if (left <= 0) return 0;
  return left >= 32 ? ~static_cast<__mmask32>(0)
                    : static_cast<__mmask32>((1u << static_cast<unsigned>(left)) - 1u);
}

}  // namespace sf
