// Bit-packed products of binary and ternary layers (XNOR-Net, BinaryConnect, TWN).
//
// A layer's weights are levels l(k, n) in {-1, +1} (binary) or {-1, 0, +1} (ternary) times a
// scale per output channel n. Packed, each output channel is a row of K bits in 64-bit words
// (bit k % 64 of word k / 64; the bits past K are 0): `plus` has bit k set where l = +1, and a
// ternary layer has a second plane `minus` where l = -1. Binary activations are rows packed
// the same way, bit set where the activation is +1.
//
// The XNOR product of activation row a and channel n, with mismatches counted by popcount:
//   binary   dot = K - 2 * popcount(a ^ plus_n)
//   ternary  dot = 2 * popcount(a & plus_n) - |plus_n| - 2 * popcount(a & minus_n) + |minus_n|
// The bits past K are 0 in both operands, so they never count. A bit of `a` that stands for a
// zero-padded input (a conv's border) is 0, read as -1; the conv kernels add back what those
// taps contributed (binary_conv.h), so padding counts as 0.
#pragma once

#include <cstdint>
#include <vector>

#include "codec/binary_weights.h"

namespace sf::binary {

inline int64_t words_for(int64_t bits) { return (bits + 63) / 64; }

struct PackedWeights {
  int64_t k = 0, n = 0, words = 0;  // words = words_for(k)
  bool ternary = false;
  std::vector<uint64_t> plus;         // [n][words]
  std::vector<uint64_t> minus;        // [n][words], ternary only
  std::vector<int32_t> plus_count;    // [n], ternary only
  std::vector<int32_t> minus_count;   // [n], ternary only
  std::vector<float> scales;          // [n]
  // The planes again, interleaved by blocks of 8 channels: [n / 8 rounded up][words][8], zero
  // for the channels past n, so that one 512-bit vector holds word i of 8 channels and the
  // XNOR kernel counts 8 outputs per instruction without horizontal sums.
  std::vector<uint64_t> plus_by8, minus_by8;
  std::vector<int8_t> levels;         // [k][n] as given, for the reference and float paths
};

// Levels of a [K, N] matrix (a HWIO filter is [kh * kw * in, out]) packed per output channel.
PackedWeights pack_weights(const quant::SignedLevels& levels, int64_t k, int64_t n);

// Writes a packed row field after field, each word once: the im2col of a binary conv appends
// each tap's input-channel bits (or zeros for a padded tap) without reading back what it wrote.
class BitAppender {
 public:
  explicit BitAppender(uint64_t* out) : out_(out) {}
  // Appends bits [0, n) of `field`, n <= 64; the bits of `field` from n up must be 0.
  void append(uint64_t field, int n) {
    acc_ |= field << fill_;
    fill_ += n;
    if (fill_ < 64) return;
    *out_++ = acc_;
    fill_ -= 64;
    acc_ = fill_ == 0 ? 0 : field >> (n - fill_);
  }
  // Appends `bits` bits of `src` (whole words, the last one's bits past `bits` 0).
  void append_words(const uint64_t* src, int64_t bits) {
    for (; bits >= 64; bits -= 64) append(*src++, 64);
    if (bits > 0) append(*src, static_cast<int>(bits));
  }
  // Appends `bits` bits of the bit stream `src` from bit `from` on; `src` must be readable one
  // word past the last bit taken.
  void append_range(const uint64_t* src, int64_t from, int64_t bits) {
    src += from / 64;
    const int shift = static_cast<int>(from % 64);
    for (; bits > 0; bits -= 64, ++src) {
      uint64_t field = shift == 0 ? src[0] : (src[0] >> shift) | (src[1] << (64 - shift));
      const int n = bits >= 64 ? 64 : static_cast<int>(bits);
      if (n < 64) field &= (uint64_t{1} << n) - 1;
      append(field, n);
    }
  }
  void append_zeros(int64_t bits) {
    for (; bits >= 64; bits -= 64) append(0, 64);
    if (bits > 0) append(0, static_cast<int>(bits));
  }
  // Writes the last, partly filled word (its bits past the fields 0).
  void finish() {
    if (fill_ > 0) *out_++ = acc_;
    acc_ = 0;
    fill_ = 0;
  }

 private:
  uint64_t* out_;
  uint64_t acc_ = 0;
  int fill_ = 0;  // bits of acc_ in use, < 64 between calls
};

// XNOR products of m activation rows (`words` words each) with every channel: dot[m][n].
// The reference works bit by bit from the levels: the oracle of the word-wise paths. The others
// split their rows and channels over OpenMP's threads when `split` (see cpu/measured_split.h).
void xnor_gemm_reference(const uint64_t* a, int64_t m, const PackedWeights& w, int32_t* dot);
// Word-wise with std::popcount: any CPU.
void xnor_gemm_portable(const uint64_t* a, int64_t m, const PackedWeights& w, int32_t* dot,
                        bool split);
// The fastest available: VPOPCNTDQ on AVX-512 CPUs that have it, else portable.
void xnor_gemm(const uint64_t* a, int64_t m, const PackedWeights& w, int32_t* dot, bool split);
// Which of the above xnor_gemm runs here: "avx512" or "portable".
const char* xnor_gemm_impl();

// Packs `rows` rows of `k` floats into `words` words each, bit set where x > 0 (bits past k are
// 0), and says whether every value was exactly -1 or +1 (the XNOR path applies). AVX-512 where
// present, portable elsewhere.
bool pack_signs(const float* x, int64_t rows, int64_t k, int64_t words, uint64_t* out);
bool pack_signs_portable(const float* x, int64_t rows, int64_t k, int64_t words, uint64_t* out);

// Float activations times the levels without multiplies (BinaryConnect): for each of m rows of
// k floats, dot[m][n] = sum of x where l = +1 minus sum of x where l = -1 (scales not applied).
void signed_sum_gemm(const float* x, int64_t m, const PackedWeights& w, float* dot);

}  // namespace sf::binary
