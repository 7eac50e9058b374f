#include "train/optimizer_avx512.h"

#include <immintrin.h>

#include "cpu/avx512_lanes.h"

// GCC 12's intrinsics start from an undefined vector, a deliberate self-initialization that
// -Wmaybe-uninitialized reports once they are inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sf {

namespace {

// GCC writes _mm512_add_ps and _mm512_mul_ps as vector arithmetic, which it may fuse into FMAs;
// the explicitly rounded forms are instructions it keeps, so each result rounds as the portable
// loop's does.
constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
__attribute__((target("avx512f"))) inline __m512 add(__m512 a, __m512 b) {
  return _mm512_add_round_ps(a, b, kNearest);
}
__attribute__((target("avx512f"))) inline __m512 sub(__m512 a, __m512 b) {
  return _mm512_sub_round_ps(a, b, kNearest);
}
__attribute__((target("avx512f"))) inline __m512 mul(__m512 a, __m512 b) {
  return _mm512_mul_round_ps(a, b, kNearest);
}

// Adam's first moment: b1 m + (1 - b1) g.
__attribute__((target("avx512f"))) inline __m512 first_moment(__m512 b1, __m512 rest1,
                                                              const float* m, __m512 g,
                                                              __mmask16 lanes) {
  return add(mul(b1, load16(m, lanes)), mul(rest1, g));
}

// Sixteen floats rounded to bf16, one per 32-bit lane, as float_to_bf16 (codec/weight_codec.h)
// rounds one: nearest, ties to even, NaNs kept quiet; with AVX-512F alone, so every x86-64 path
// rounds alike.
__attribute__((target("avx512f"))) inline __m512i bf16_32(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lowest_kept = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(lowest_kept, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
}

template <bool kRound>
__attribute__((target("avx512f"))) inline void adam_loop(float* w, const float* g, float* m,
                                                         float* v, int64_t begin, int64_t end,
                                                         const AdamStep& s, uint16_t* rounded) {
  const __m512 b1 = _mm512_set1_ps(s.beta1), rest1 = _mm512_set1_ps(1.0f - s.beta1);
  const __m512 b2 = _mm512_set1_ps(s.beta2), rest2 = _mm512_set1_ps(1.0f - s.beta2);
  const __m512 step = _mm512_set1_ps(s.step), eps = _mm512_set1_ps(s.epsilon);
  const __m512 decay = _mm512_set1_ps(s.decay_step);
  for (int64_t i = begin; i < end; i += 16) {
    const __mmask16 lanes = lanes16(0, end - i);
    const __m512 gi = load16(g + i, lanes);
    const __m512 mi = first_moment(b1, rest1, m + i, gi, lanes);
    const __m512 vi = add(mul(b2, load16(v + i, lanes)), mul(mul(rest2, gi), gi));
    const __m512 wi = load16(w + i, lanes);
    const __m512 update =
        add(_mm512_div_ps(mul(step, mi), add(_mm512_sqrt_ps(vi), eps)), mul(decay, wi));
    const __m512 next = sub(wi, update);
    store16(m + i, lanes, mi);
    store16(v + i, lanes, vi);
    store16(w + i, lanes, next);
    if constexpr (kRound) store16_low_halves(rounded + i, lanes, bf16_32(next));
  }
}

}  // namespace

__attribute__((target("avx512f"))) void adam_update_avx512(float* w, const float* g, float* m,
                                                           float* v, int64_t begin, int64_t end,
                                                           const AdamStep& s, uint16_t* rounded) {
  if (rounded != nullptr) return adam_loop<true>(w, g, m, v, begin, end, s, rounded);
  adam_loop<false>(w, g, m, v, begin, end, s, nullptr);
}

__attribute__((target("avx512f"))) void round_to_bf16_avx512(const float* w, int64_t begin,
                                                             int64_t end, uint16_t* rounded) {
  for (int64_t i = begin; i < end; i += 16) {
    const __mmask16 lanes = lanes16(0, end - i);
    store16_low_halves(rounded + i, lanes, bf16_32(load16(w + i, lanes)));
  }
}

__attribute__((target("avx512f"))) void adam_outside_update_avx512(float* w, const float* g,
                                                                   float* m, const float* v,
                                                                   int64_t begin, int64_t end,
                                                                   const AdamOutsideStep& s) {
  const __m512 b1 = _mm512_set1_ps(s.beta1), rest1 = _mm512_set1_ps(1.0f - s.beta1);
  const __m512 m_scale = _mm512_set1_ps(s.m_scale), v_scale = _mm512_set1_ps(s.v_scale);
  const __m512 rate = _mm512_set1_ps(s.rate), eps = _mm512_set1_ps(s.epsilon);
  const __m512 decay = _mm512_set1_ps(s.decay_step);
  for (int64_t i = begin; i < end; i += 16) {
    const __mmask16 lanes = lanes16(0, end - i);
    const __m512 gi = load16(g + i, lanes);
    const __m512 mi = first_moment(b1, rest1, m + i, gi, lanes);
    const __m512 ai = mul(m_scale, mi);
    const __m512 root = mul(v_scale, _mm512_sqrt_ps(load16(v + i, lanes)));
    const __m512 di = add(_mm512_max_ps(root, _mm512_abs_ps(ai)), eps);
    const __m512 wi = load16(w + i, lanes);
    const __m512 update = add(_mm512_div_ps(mul(rate, ai), di), mul(decay, wi));
    store16(m + i, lanes, mi);
    store16(w + i, lanes, sub(wi, update));
  }
}

}  // namespace sf
