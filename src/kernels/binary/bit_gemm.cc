#include "kernels/binary/bit_gemm.h"

#include <omp.h>

#include <algorithm>
#include <bit>

#include "cpu/cpu_features.h"
#include "cpu/parallel_for.h"
#if defined(__x86_64__)
#include "kernels/binary/bit_gemm_avx512.h"
#endif

namespace sf::binary {

PackedWeights pack_weights(const quant::SignedLevels& levels, int64_t k, int64_t n) {
  PackedWeights w;
  w.k = k;
  w.n = n;
  w.words = words_for(k);
  w.ternary = levels.ternary;
  w.scales = levels.scales;
  w.levels = levels.levels;
  w.plus.assign(static_cast<size_t>(n * w.words), 0);
  if (w.ternary) {
    w.minus.assign(static_cast<size_t>(n * w.words), 0);
    w.plus_count.assign(static_cast<size_t>(n), 0);
    w.minus_count.assign(static_cast<size_t>(n), 0);
  }
  for (int64_t r = 0; r < k; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const int8_t l = levels.levels[static_cast<size_t>(r * n + c)];
      const uint64_t bit = uint64_t{1} << (r % 64);
      const auto word = static_cast<size_t>(c * w.words + r / 64);
      if (l > 0) w.plus[word] |= bit;
      if (l < 0 && w.ternary) w.minus[word] |= bit;
      if (w.ternary) (l > 0 ? w.plus_count : w.minus_count)[static_cast<size_t>(c)] += l != 0;
    }
  const int64_t blocks = (n + 7) / 8;
  auto interleave = [&](const std::vector<uint64_t>& plane, std::vector<uint64_t>& out) {
    out.assign(static_cast<size_t>(blocks * w.words * 8), 0);
    for (int64_t c = 0; c < n; ++c)
      for (int64_t i = 0; i < w.words; ++i)
        out[static_cast<size_t>(((c / 8) * w.words + i) * 8 + c % 8)] =
            plane[static_cast<size_t>(c * w.words + i)];
  };
  interleave(w.plus, w.plus_by8);
  if (w.ternary) interleave(w.minus, w.minus_by8);
  return w;
}

void xnor_gemm_reference(const uint64_t* a, int64_t m, const PackedWeights& w, int32_t* dot) {
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < w.n; ++c) {
      int32_t sum = 0;
      for (int64_t k = 0; k < w.k; ++k) {
        const int activation = (a[r * w.words + k / 64] >> (k % 64)) & 1 ? 1 : -1;
        sum += activation * w.levels[static_cast<size_t>(k * w.n + c)];
      }
      dot[r * w.n + c] = sum;
    }
}

void xnor_gemm_portable(const uint64_t* a, int64_t m, const PackedWeights& w, int32_t* dot,
                        bool split) {
  const int64_t words = w.words;
  parallel_for(0, m * w.n, split,
               [&](int64_t share_begin, int64_t share_end) {
                 for (int64_t flat = share_begin; flat < share_end; ++flat) {
                   const int64_t r = flat / w.n;
                   const int64_t c = flat % w.n;
                   {
                     const uint64_t* row = a + r * words;
                     const uint64_t* plus = w.plus.data() + c * words;
                     if (!w.ternary) {
                       int64_t mismatches = 0;
                       for (int64_t i = 0; i < words; ++i)
                         mismatches += std::popcount(row[i] ^ plus[i]);
                       dot[r * w.n + c] = static_cast<int32_t>(w.k - 2 * mismatches);
                       continue;
                     }
                     const uint64_t* minus = w.minus.data() + c * words;
                     int64_t plus_on = 0, minus_on = 0;
                     for (int64_t i = 0; i < words; ++i) {
                       plus_on += std::popcount(row[i] & plus[i]);
                       minus_on += std::popcount(row[i] & minus[i]);
                     }
                     dot[r * w.n + c] =
                         static_cast<int32_t>(2 * plus_on - w.plus_count[static_cast<size_t>(c)] -
                                              2 * minus_on + w.minus_count[static_cast<size_t>(c)]);
                   }
                 }
               });
}

void xnor_gemm(const uint64_t* a, int64_t m, const PackedWeights& w, int32_t* dot, bool split) {
#if defined(__x86_64__)
  if (cpu_features().avx512f && cpu_features().avx512vl && cpu_features().avx512_vpopcntdq) {
    xnor_gemm_avx512(a, m, w, dot, split);
    return;
  }
#endif
  xnor_gemm_portable(a, m, w, dot, split);
}

bool pack_signs_portable(const float* x, int64_t rows, int64_t k, int64_t words, uint64_t* out) {
  bool signs = true;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < words; ++i) {
      uint64_t word = 0;
      const float* v = x + r * k + i * 64;
      const int64_t len = std::min<int64_t>(64, k - i * 64);
      for (int64_t j = 0; j < len; ++j) {
        word |= static_cast<uint64_t>(v[j] > 0.0f) << j;
        signs &= (v[j] == 1.0f) | (v[j] == -1.0f);
      }
      out[r * words + i] = word;
    }
  return signs;
}

bool pack_signs(const float* x, int64_t rows, int64_t k, int64_t words, uint64_t* out) {
#if defined(__x86_64__)
  if (cpu_features().avx512f && cpu_features().avx512vl && cpu_features().avx512_vpopcntdq)
    return pack_signs_avx512(x, rows, k, words, out);
#endif
  return pack_signs_portable(x, rows, k, words, out);
}

const char* xnor_gemm_impl() {
#if defined(__x86_64__)
  if (cpu_features().avx512f && cpu_features().avx512vl && cpu_features().avx512_vpopcntdq)
    return "avx512";
#endif
  return "portable";
}

void signed_sum_gemm(const float* x, int64_t m, const PackedWeights& w, float* dot) {
  const int64_t k = w.k, words = w.words;
  constexpr int kPartials = 16;  // independent sums, so that the inner loop vectorizes
  parallel_for(0, m * w.n, m * w.n * k >= (1 << 16), [&](int64_t share_begin, int64_t share_end) {
    for (int64_t flat = share_begin; flat < share_end; ++flat) {
      const int64_t r = flat / w.n;
      const int64_t c = flat % w.n;
      {
        const float* row = x + r * k;
        const uint64_t* plus = w.plus.data() + c * words;
        const uint64_t* minus = w.ternary ? w.minus.data() + c * words : nullptr;
        float partial[kPartials] = {};
        for (int64_t i0 = 0; i0 < k; i0 += 64) {
          const uint64_t p = plus[i0 / 64];
          const uint64_t negative = minus ? minus[i0 / 64] : ~p;
          const uint64_t nonzero = p | negative;
          const int64_t len = std::min<int64_t>(64, k - i0);
          // The sign bit flipped where the level is -1, the value dropped where it is 0.
          for (int64_t j = 0; j < len; ++j) {
            const auto bits = std::bit_cast<uint32_t>(row[i0 + j]);
            const auto flip = static_cast<uint32_t>((negative >> j) & 1) << 31;
            const uint32_t keep = 0u - static_cast<uint32_t>((nonzero >> j) & 1);
            partial[j % kPartials] += std::bit_cast<float>((bits ^ flip) & keep);
          }
        }
        float sum = 0.0f;
        for (float v : partial) sum += v;
        dot[r * w.n + c] = sum;
      }
    }
  });
}

}  // namespace sf::binary
