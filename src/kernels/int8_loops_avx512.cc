// AVX-512 F/BW/VL intrinsics for kernels/int8_loops.cc; each function is compiled for those
// subsets alone (the build targets baseline x86-64).
#include "kernels/int8_loops_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "cpu/avx512_lanes.h"
#include "cpu/parallel_for.h"

namespace sf::int8_loops {

namespace {

// GCC 12's intrinsics start from _mm512_undefined_epi32(), a deliberate self-initialization
// that -Wmaybe-uninitialized reports once they are inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define SF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// RoundingDivideByPOT of 16 lanes by 2^e, e in [0, 31]: ties away from zero.
SF_AVX512 inline __m512i rounding_divide_avx512(__m512i high, __m512i e) {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, e), one);
  const __m512i remainder = _mm512_and_si512(high, mask);
  const __m512i threshold =
      _mm512_add_epi32(_mm512_srli_epi32(mask, 1), _mm512_srli_epi32(high, 31));
  const __m512i q = _mm512_srav_epi32(high, e);
  return _mm512_mask_add_epi32(q, _mm512_cmpgt_epi32_mask(remainder, threshold), q, one);
}

// SaturatingRoundingDoublingHighMul on 16 lanes for multipliers m in [2^30, 2^31): with a
// positive multiplier it never overflows and equals floor((x * m + 2^30) / 2^31), computed on
// 64-bit even and odd lanes.
SF_AVX512 inline __m512i high_mul_avx512(__m512i x, __m512i m) {
  const __m512i nudge = _mm512_set1_epi64(int64_t{1} << 30);
  const __m512i even = _mm512_srai_epi64(_mm512_add_epi64(_mm512_mul_epi32(x, m), nudge), 31);
  const __m512i odd = _mm512_srai_epi64(
      _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(x, 32), _mm512_srli_epi64(m, 32)), nudge),
      31);
  return _mm512_mask_blend_epi32(static_cast<__mmask16>(0xAAAA), even, _mm512_slli_epi64(odd, 32));
}

// multiply_by_quantized_multiplier on 16 lanes, for multipliers m (in [2^30, 2^31)) with right
// shifts e in [0, 31].
SF_AVX512 inline __m512i multiply_avx512(__m512i x, __m512i m, __m512i e) {
  return rounding_divide_avx512(high_mul_avx512(x, m), e);
}

// high_mul_avx512 of x = d * 2^20 (QuantizedAdd's shifted input, |d| <= 255) in 32-bit lanes:
// floor((x * m + 2^30) / 2^31) = d * (m >> 11) + floor((d * (m & 2047) + 2^10) / 2^11), whose
// terms all fit int32, so two vpmulld replace the even and odd 64-bit products. |result| < 2^28.
static_assert(QuantizedAddParams::kLeftShift == 20);
SF_AVX512 inline __m512i shifted_high_mul_avx512(__m512i d, __m512i m_high, __m512i m_low) {
  const __m512i low = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_mullo_epi32(d, m_low), _mm512_set1_epi32(1 << 10)), 11);
  return _mm512_add_epi32(_mm512_mullo_epi32(d, m_high), low);
}

// rounding_divide_avx512 by one e in [0, 31] for every lane, for |high| < 2^30, where adding
// 2^(e-1) cannot overflow (QuantizedAdd's values stay below 2^29): with q = floor(high / 2^e)
// and r the remainder, floor((high + 2^(e-1) - [high < 0]) / 2^e) = q + [r > 2^(e-1) - 1 +
// [high < 0]], the same ties away from zero in four operations instead of nine.
struct SmallRoundingDivide {
  __m512i e, nudge, negative;  // negative: the [high < 0] term's mask, none when e = 0

  SF_AVX512 explicit SmallRoundingDivide(int shift)
      : e(_mm512_set1_epi32(shift)),
        nudge(_mm512_set1_epi32(shift > 0 ? 1 << (shift - 1) : 0)),
        negative(_mm512_set1_epi32(shift > 0 ? -1 : 0)) {}

  SF_AVX512 __m512i operator()(__m512i high) const {
    const __m512i minus_one_if_negative = _mm512_and_si512(_mm512_srai_epi32(high, 31), negative);
    return _mm512_srav_epi32(_mm512_add_epi32(_mm512_add_epi32(high, nudge), minus_one_if_negative),
                             e);
  }
};

SF_AVX512 inline __m512i clamp_avx512(__m512i q, int32_t zero_point, QuantClamp clamp) {
  q = _mm512_add_epi32(q, _mm512_set1_epi32(zero_point));
  return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(clamp.lo)),
                          _mm512_set1_epi32(clamp.hi));
}

// Sixteen lanes from p, or the first `left` of them where fewer are left. Only a tail takes a
// mask: streaming a Dequantize, masked loads and stores of whole vectors made it 1.35x slower
// on an AMD EPYC (Zen) with AVX-512.
SF_AVX512 inline __m512i load_16_bytes(const uint8_t* p, int64_t left) {
  return _mm512_cvtepu8_epi32(left >= 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                                         : _mm_maskz_loadu_epi8(lanes16(0, left), p));
}

SF_AVX512 inline __m512i load_16_ints(const int32_t* p, int64_t left) {
  return left >= 16 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(lanes16(0, left), p);
}

// The low byte of each lane (codes already clamped to [0, 255]).
SF_AVX512 inline void store_16_codes(uint8_t* p, int64_t left, __m512i codes) {
  const __m128i bytes = _mm512_cvtepi32_epi8(codes);
  if (left >= 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bytes);
  else
    _mm_mask_storeu_epi8(p, lanes16(0, left), bytes);
}

SF_AVX512 inline void store_16_floats(float* p, int64_t left, __m512 v) {
  store16(p, lanes16(0, left), v);
}

// Window sums are exact in float (below 2^24) and so is their quotient's floor while count is
// at most 2^14: a quotient just below an integer k <= 255 differs from it by at least 1 / count,
// more than the float rounding near k.
constexpr int64_t kMaxFloatPoolCount = 1 << 14;

// for_each_index compiled for the AVX-512 subsets of the bodies it runs, so that they inline.
template <class Body>
void for_each_index_avx512(int64_t begin, int64_t end, bool worth_threads, const Body& body) {
  parallel_for(begin, end, worth_threads, [&](int64_t share_begin, int64_t share_end) SF_AVX512 {
    const Body own = body;
    for (int64_t i = share_begin; i < share_end; ++i) own(i);
  });
}

// body(i) for the start i of each of `blocks` runs of 16 elements.
template <class Body>
void for_each_block_of_16(int64_t blocks, bool worth_threads, const Body& body) {
  for_each_index_avx512(0, blocks, worth_threads,
                        [=](int64_t block) SF_AVX512 { body(block * 16); });
}

}  // namespace

SF_AVX512 void requantize_rows_avx512(const int32_t* acc, int64_t rows, int64_t channels,
                                      const std::vector<QuantizedMultiplier>& multipliers,
                                      int32_t zero_point, QuantClamp clamp, uint8_t* out) {
  std::vector<int32_t> mult(static_cast<size_t>(channels)), right(static_cast<size_t>(channels));
  for (size_t c = 0; c < multipliers.size(); ++c) {
    mult[c] = multipliers[c].multiplier;
    right[c] = -multipliers[c].shift;
  }
  for_each_index_avx512(
      0, rows, rows * channels >= kParallelMin,
      [=, mult = mult.data(), right = right.data()](int64_t r) SF_AVX512 {
        for (int64_t j = 0; j < channels; j += 16) {
          const int64_t left = channels - j;
          const __m512i q =
              multiply_avx512(load_16_ints(acc + r * channels + j, left),
                              load_16_ints(mult + j, left), load_16_ints(right + j, left));
          store_16_codes(out + r * channels + j, left, clamp_avx512(q, zero_point, clamp));
        }
      });
}

SF_AVX512 void quantized_add_avx512(const uint8_t* a, const uint8_t* b, int64_t count,
                                    const QuantizedAddParams& p, uint8_t* out) {
  const __m512i am_high = _mm512_set1_epi32(p.a.multiplier >> 11);
  const __m512i am_low = _mm512_set1_epi32(p.a.multiplier & 2047);
  const __m512i bm_high = _mm512_set1_epi32(p.b.multiplier >> 11);
  const __m512i bm_low = _mm512_set1_epi32(p.b.multiplier & 2047);
  const __m512i om = _mm512_set1_epi32(p.out.multiplier);
  const SmallRoundingDivide a_divide(-p.a.shift), b_divide(-p.b.shift), out_divide(-p.out.shift);
  const __m512i a_zp = _mm512_set1_epi32(p.a_zero_point);
  const __m512i b_zp = _mm512_set1_epi32(p.b_zero_point);
  const int64_t blocks = (count + 15) / 16;
  for_each_block_of_16(blocks, count >= kParallelMin, [=](int64_t i) SF_AVX512 {
    const __m512i av = load_16_bytes(a + i, count - i);
    const __m512i bv = load_16_bytes(b + i, count - i);
    const __m512i sa =
        a_divide(shifted_high_mul_avx512(_mm512_sub_epi32(av, a_zp), am_high, am_low));
    const __m512i sb =
        b_divide(shifted_high_mul_avx512(_mm512_sub_epi32(bv, b_zp), bm_high, bm_low));
    const __m512i q = out_divide(high_mul_avx512(_mm512_add_epi32(sa, sb), om));
    store_16_codes(out + i, count - i, clamp_avx512(q, p.out_zero_point, p.clamp));
  });
}

// Quantize divides in float: the quotient is within half a float ulp of the exact one, so it
// rounds to the reference's integer unless a tie k + 0.5 lies within that distance. Such rare
// blocks, NaNs (which quantize to the zero point) and tails take the scalar reference instead,
// keeping the bytes identical.
SF_AVX512 void quantize_avx512(const float* x, int64_t count, QuantParams p, uint8_t* out) {
  const __m512 scale = _mm512_set1_ps(p.scale);
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 rounding_error = _mm512_set1_ps(0x1p-22f);  // relative, with margin
  const __m512 lo = _mm512_set1_ps(static_cast<float>(-p.zero_point));
  const __m512 hi = _mm512_set1_ps(static_cast<float>(255 - p.zero_point));
  const __m512i zero_point = _mm512_set1_epi32(p.zero_point);
  const int64_t blocks = count / 16;
  for_each_block_of_16(blocks, count >= kParallelMin, [=](int64_t i) SF_AVX512 {
    const __m512 q = _mm512_div_ps(_mm512_loadu_ps(x + i), scale);
    const __m512 whole = _mm512_roundscale_ps(q, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 fraction = _mm512_abs_ps(_mm512_sub_ps(q, whole));
    const __mmask16 near_tie =
        _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(fraction, half)),
                           _mm512_mul_ps(_mm512_abs_ps(q), rounding_error), _CMP_LE_OQ);
    if ((near_tie | _mm512_cmp_ps_mask(q, q, _CMP_UNORD_Q)) != 0) {
      for (int64_t j = i; j < i + 16; ++j) out[j] = quantize_value(x[j], p);
      return;
    }
    // Ties away from zero: whole + sign(q) where the fraction reaches one half.
    const __m512 sign_one = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(one),
                        _mm512_and_si512(_mm512_castps_si512(q),
                                         _mm512_set1_epi32(std::numeric_limits<int32_t>::min()))));
    const __m512 rounded =
        _mm512_mask_add_ps(whole, _mm512_cmp_ps_mask(fraction, half, _CMP_GE_OQ), whole, sign_one);
    // Clamped before the conversion, so infinities and huge values saturate.
    const __m512i code = _mm512_add_epi32(
        _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(rounded, lo), hi)), zero_point);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(code));
  });
  for (int64_t j = blocks * 16; j < count; ++j) out[j] = quantize_value(x[j], p);
}

SF_AVX512 void dequantize_avx512(const uint8_t* q, int64_t count, QuantParams p, float* out) {
  const __m512 scale = _mm512_set1_ps(p.scale);
  const __m512i zero_point = _mm512_set1_epi32(p.zero_point);
  const int64_t blocks = (count + 15) / 16;
  for_each_block_of_16(blocks, count >= kParallelMin, [=](int64_t i) SF_AVX512 {
    const __m512i codes = load_16_bytes(q + i, count - i);
    store_16_floats(out + i, count - i,
                    _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_sub_epi32(codes, zero_point))));
  });
}

SF_AVX512 FloatRange finite_range_avx512(const float* x, int64_t count) {
  const __m512 infinity = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 k = lanes16(i, count);
    const __m512 v = load16(x + i, k);
    // NaN and infinities compare false.
    const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(v), infinity, _CMP_LT_OQ);
    lo = _mm512_mask_min_ps(lo, finite, lo, v);
    hi = _mm512_mask_max_ps(hi, finite, hi, v);
  }
  return {_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi)};
}

SF_AVX512 void channel_ranges_avx512(const int32_t* acc, int64_t rows, int64_t channels,
                                     int32_t* lo, int32_t* hi) {
  for (int64_t j = 0; j < channels; j += 16) {
    const __mmask16 k = lanes16(j, channels);
    __m512i min = _mm512_set1_epi32(std::numeric_limits<int32_t>::max());
    __m512i max = _mm512_set1_epi32(std::numeric_limits<int32_t>::min());
    for (int64_t r = 0; r < rows; ++r) {
      const __m512i v = _mm512_maskz_loadu_epi32(k, acc + r * channels + j);
      min = _mm512_min_epi32(min, v);
      max = _mm512_max_epi32(max, v);
    }
    _mm512_mask_storeu_epi32(lo + j, k, min);
    _mm512_mask_storeu_epi32(hi + j, k, max);
  }
}

SF_AVX512 void average_pool_avx512(const uint8_t* x, int64_t n, int64_t channels, const Window2D& g,
                                   uint8_t* y) {
  for_each_index_avx512(
      0, n * g.h.out, pool_worth_threads(n, channels, g), [=](int64_t index) SF_AVX512 {
        const PoolRow row = pool_row_at(x, channels, g, y, index);
        for (int64_t ox = 0; ox < g.w.out; ++ox) {
          const PoolWindow win = pool_window_at(g, row.oy, ox);
          const int64_t count = win.count();
          uint8_t* out = row.out + ox * channels;
          for (int64_t j = 0; j < channels; j += 16) {
            const int64_t left = channels - j;
            __m512i sum = _mm512_setzero_si512();
            for (int64_t r = win.r0; r < win.r1; ++r)
              for (int64_t c = win.c0; c < win.c1; ++c)
                sum = _mm512_add_epi32(
                    sum, load_16_bytes(row.image + (r * g.w.in + c) * channels + j, left));
            if (count > kMaxFloatPoolCount) {
              alignas(64) int32_t sums[16];
              _mm512_store_si512(sums, sum);
              for (int64_t i = 0; i < std::min<int64_t>(16, channels - j); ++i)
                out[j + i] = average_value(sums[i], count);
              continue;
            }
            const __m512 numerator = _mm512_cvtepi32_ps(
                _mm512_add_epi32(sum, _mm512_set1_epi32(static_cast<int32_t>(count / 2))));
            const __m512i q = _mm512_cvttps_epi32(
                _mm512_div_ps(numerator, _mm512_set1_ps(static_cast<float>(count))));
            store_16_codes(out + j, left, q);
          }
        }
      });
}

namespace {

// Up to 64 bytes of a row, from offset `at`: `Width` 64 and 32 move whole vectors (as zmm and
// ymm), 0 a masked tail (masked loads and stores are the slow ones, see load_16_bytes).
template <int Width>
struct RowPiece {
  int64_t at;
  __mmask64 tail = 0;

  SF_AVX512 __m512i load(const uint8_t* row) const {
    if constexpr (Width == 64) return _mm512_loadu_si512(row + at);
    if constexpr (Width == 32)
      return _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + at)));
    return _mm512_maskz_loadu_epi8(tail, row + at);
  }
  SF_AVX512 void store(uint8_t* row, __m512i v) const {
    if constexpr (Width == 64)
      _mm512_storeu_si512(row + at, v);
    else if constexpr (Width == 32)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + at), _mm512_castsi512_si256(v));
    else
      _mm512_mask_storeu_epi8(row + at, tail, v);
  }
};

// Calls `body` on the pieces of an n-byte row: whole 64-byte vectors, a 32-byte half, then a
// masked tail. It has no target of its own and always inlines, so that each caller's
// target-specific `body` inlines there too (a GCC 12 build left each piece a call otherwise).
template <class Body>
__attribute__((always_inline)) inline void for_each_row_piece(int64_t n, Body&& body) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) body(RowPiece<64>{i});
  if (n - i >= 32) {
    body(RowPiece<32>{i});
    i += 32;
  }
  if (i < n) body(RowPiece<0>{i, (__mmask64{1} << (n - i)) - 1});
}

}  // namespace

SF_AVX512 void max_pool_avx512(const uint8_t* x, int64_t n, int64_t channels, const Window2D& g,
                               uint8_t* y) {
  for_each_index_avx512(
      0, n * g.h.out, pool_worth_threads(n, channels, g), [=](int64_t index) SF_AVX512 {
        const PoolRow row = pool_row_at(x, channels, g, y, index);
        for (int64_t ox = 0; ox < g.w.out; ++ox) {
          const PoolWindow win = pool_window_at(g, row.oy, ox);
          for_each_row_piece(channels, [&](auto piece) SF_AVX512 {
            __m512i max = _mm512_setzero_si512();
            for (int64_t r = win.r0; r < win.r1; ++r)
              for (int64_t c = win.c0; c < win.c1; ++c)
                max = _mm512_max_epu8(max, piece.load(row.image + (r * g.w.in + c) * channels));
            piece.store(row.out + ox * channels, max);
          });
        }
      });
}

namespace {

#define SF_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))

// A 256-byte table in four vectors; each byte of v picks its entry. Made where it is used (four
// loads from L1): a std::vector of them crashed on a misaligned 64-byte store (GCC 12).
struct ByteTable {
  __m512i quarter[4];

  SF_AVX512_VBMI explicit ByteTable(const uint8_t* table) {
    for (int q = 0; q < 4; ++q) quarter[q] = _mm512_loadu_si512(table + 64 * q);
  }

  SF_AVX512_VBMI __m512i operator()(__m512i v) const {
    const __m512i low = _mm512_permutex2var_epi8(quarter[0], v, quarter[1]);
    const __m512i high = _mm512_permutex2var_epi8(quarter[2], v, quarter[3]);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), low, high);
  }
};

struct Identity {
  SF_AVX512_VBMI __m512i operator()(__m512i v) const { return v; }
};

// n bytes from x to y through `map`.
template <class Map>
SF_AVX512_VBMI void map_bytes(const uint8_t* x, int64_t n, const Map& map, uint8_t* y) {
  for_each_row_piece(n, [&](auto piece) SF_AVX512_VBMI { piece.store(y, map(piece.load(x))); });
}

}  // namespace

SF_AVX512_VBMI void concat_rows_avx512(const std::vector<ConcatPart>& parts, int64_t outer,
                                       int64_t y_row, uint8_t* y) {
  parallel_for(0, outer, outer * y_row >= kParallelMin,
               [&](int64_t share_begin, int64_t share_end) SF_AVX512_VBMI {
                 for (int64_t r = share_begin; r < share_end; ++r) {
                   uint8_t* out = y + r * y_row;
                   for (const ConcatPart& part : parts) {
                     const uint8_t* x = part.x + r * part.row;
                     if (part.table == nullptr)
                       map_bytes(x, part.row, Identity{}, out);
                     else
                       map_bytes(x, part.row, ByteTable(part.table), out);
                     out += part.row;
                   }
                 }
               });
}

#undef SF_AVX512_VBMI
#undef SF_AVX512

#pragma GCC diagnostic pop

}  // namespace sf::int8_loops
