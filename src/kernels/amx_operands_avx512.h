// Operands in the forms AMX tile products read, written by the AMX kernels' packing loops: a
// tdpbf16ps multiplies an A tile of 16 rows x 32 bf16 by a B tile whose rows hold pairs of
// consecutive k side by side (VNNI form), into 16 x 16 fp32 sums. Values are rounded to bf16
// to nearest even, like oneDNN's reorders.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "cpu/amx.h"
#include "cpu/avx512_lanes.h"

namespace sf::amx {

constexpr int64_t kTile = 16;    // rows of every tile; fp32 columns of an accumulator tile
constexpr int64_t kKStep = 32;  // bf16 values of k in one tile product

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// 16 x 16 floats transposed in registers: four rounds, each swapping the off-diagonal blocks of
// size b within every 2b x 2b block.
__attribute__((target("avx512f"))) inline void transpose16(__m512 r[16]) {
  for (int b = 8; b >= 1; b /= 2) {
    alignas(64) int lo[16], hi[16];
    for (int j = 0; j < 16; ++j) {
      lo[j] = (j & b) == 0 ? j : 16 + j - b;
      hi[j] = (j & b) == 0 ? j + b : 16 + j;
    }
    const __m512i idx_lo = _mm512_load_si512(lo), idx_hi = _mm512_load_si512(hi);
    for (int i = 0; i < 16; ++i) {
      if ((i & b) != 0) continue;
      const __m512 a = r[i], c = r[i + b];
      r[i] = _mm512_permutex2var_ps(a, idx_lo, c);
      r[i + b] = _mm512_permutex2var_ps(a, idx_hi, c);
    }
  }
}

// Rows [0, count) and columns [0, columns) of a row-major fp32 matrix with rows `src_stride`
// floats apart, transposed into bf16 out[column][row] with rows `out_stride` apart: A tiles
// whose k runs along the source's rows. Out's columns [count, width) are zeros (width a
// multiple of 16); its rows past `columns` are not written.
__attribute__((target("avx512f,avx512bf16"))) inline void transposed_to_bf16(
    const float* src, int64_t src_stride, int64_t columns, int64_t count, int64_t width,
    uint16_t* out, int64_t out_stride) {
  for (int64_t p = 0; p < width; p += 16)
    for (int64_t o = 0; o < columns; o += 16) {
      const __mmask16 m = lanes16(o, columns);
      __m512 r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = p + i < count ? _mm512_maskz_loadu_ps(m, src + (p + i) * src_stride + o)
                             : _mm512_setzero_ps();
      transpose16(r);
      const int64_t rows = std::min<int64_t>(16, columns - o);
      for (int64_t i = 0; i < rows; ++i)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (o + i) * out_stride + p),
                            reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(r[i])));
    }
}

// Tiles 0-7, each 16 rows x 64 bytes.
inline AmxTileConfig eight_full_tiles() {
  AmxTileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.bytes_per_row[t] = 64;
    c.rows[t] = kTile;
  }
  return c;
}

__attribute__((target("amx-tile"))) inline void load_tile_config(const AmxTileConfig& config) {
  _tile_loadconfig(&config);
}

__attribute__((target("amx-tile"))) inline void release_tiles() { _tile_release(); }

}  // namespace sf::amx
