// Load and store masks for the ragged ends of AVX-512 loops, and loads and stores under them,
// shared by every *_avx512.cc file (they are built only on x86-64, so this header is included
// only there).
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

// Sixteen floats loaded or stored under `lanes` (from lanes16). AMD's Zen cores run a masked
// load from memory at about half the speed of a plain one, and a masked store slower too: Adam's
// memory-bound update of 3.2 M weights on 2 threads of an AMD EPYC took 1.10 ms plain, 1.26 with
// masked stores, 1.63 with masked loads and 1.98 with both. So whole vectors go plain and only
// a ragged end is masked; the branch follows the loop's progress and is predicted.
__attribute__((target("avx512f"))) inline __m512 load16(const float* p, __mmask16 lanes) {
  return lanes == 0xFFFF ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(lanes, p);
}

__attribute__((target("avx512f"))) inline void store16(float* p, __mmask16 lanes, __m512 v) {
  if (lanes == 0xFFFF)
    _mm512_storeu_ps(p, v);
  else
    _mm512_mask_storeu_ps(p, lanes, v);
}

// The low 16 bits of each 32-bit lane of `v`, stored as sixteen 16-bit elements.
__attribute__((target("avx512f"))) inline void store16_low_halves(uint16_t* p, __mmask16 lanes,
                                                                  __m512i v) {
  if (lanes == 0xFFFF)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
  else
    _mm512_mask_cvtepi32_storeu_epi16(p, lanes, v);
}

}  // namespace sf
