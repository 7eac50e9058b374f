// The machine's binary dot-product ceiling: a register-resident loop of XOR + VPOPCNTDQ + add
// on independent 512-bit accumulators, no memory traffic, so it measures what one core's
// vector units can do. Built on x86-64 only; call it when cpu_features() has avx512_vpopcntdq.
#include <immintrin.h>

#include "xor_popcount_ceiling.h"

namespace sf::bench {

// GCC 12's intrinsics start from _mm512_undefined_epi32(), a deliberate self-initialization
// that -Wmaybe-uninitialized reports once they are inlined here (_mm512_reduce_add_epi64).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

__attribute__((target("avx512f,avx512vpopcntdq"))) int64_t xor_popcount_ceiling_avx512(
    int64_t iterations, uint64_t seed) {
  constexpr int kLanes = 8;  // enough independent chains to hide the popcount latency
  __m512i a[kLanes], acc[kLanes];
  const __m512i w = _mm512_set1_epi64(static_cast<int64_t>(seed * 0x9e3779b97f4a7c15ull));
  for (int j = 0; j < kLanes; ++j) {
    a[j] = _mm512_set1_epi64(static_cast<int64_t>(seed + static_cast<uint64_t>(j)));
    acc[j] = _mm512_setzero_si512();
  }
  for (int64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kLanes; ++j) {
      acc[j] = _mm512_add_epi64(acc[j], _mm512_popcnt_epi64(_mm512_xor_si512(a[j], w)));
      // Keeps the xor inside the loop (the compiler cannot hoist it).
      a[j] = _mm512_xor_si512(a[j], acc[j]);
    }
  __m512i total = acc[0];
  for (int j = 1; j < kLanes; ++j) total = _mm512_add_epi64(total, acc[j]);
  return _mm512_reduce_add_epi64(total);
}

#pragma GCC diagnostic pop

}  // namespace sf::bench
