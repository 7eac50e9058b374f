// Sparse weight storage in the style of Deep Compression: the nonzero values in row-major
// order, their positions as relative gaps of `index_bits` bits, the values either as they are
// (f32, or i8 for the weights of an eightbit model) or as k-means codebook indices of f32
// centroids, and optionally both streams Huffman-coded.
//
// Gaps: the next nonzero is `gap` positions after the previous one's successor (the first
// after position 0); the largest gap symbol, 2^index_bits - 1, is an escape that skips that
// many positions without a value, so long zero runs cost one symbol each and no fake zeros.
//
// The encoded blob is self-describing (a small little-endian header, then streams) and is what
// a model file stores for an "sparse" tensor. decode() validates every count and size against
// the expected element count before allocating or writing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "codec/weight_codec.h"

namespace sf {

// magic, 4 option bytes, element / nonzero / gap counts.
inline constexpr uint64_t kSparseHeaderBytes = 32;

struct SparseOptions {
  int index_bits = 8;   // 2..12
  int value_bits = 0;   // 0: f32 values; 2..8: k-means codebook of 2^value_bits centroids
  bool huffman = false; // entropy-code the gap and codebook-index streams
  bool linear = false;  // codebook of evenly spaced levels (linear quantization), not k-means
};

// Bytes per stage of one tensor, for size reports.
struct SparseSizes {
  uint64_t elements = 0;
  uint64_t nonzero = 0;
  uint64_t gap_symbols = 0;  // nonzero + escapes
  uint64_t bytes = 0;        // the whole encoded blob
};

// `dense` is f32, or i8 with value_bits 0.
std::vector<uint8_t> encode_sparse(const Tensor& dense, const SparseOptions& options,
                                   SparseSizes* sizes = nullptr);

// Decodes a blob into a dense tensor of `shape` and of the blob's value type (f32 or i8);
// `what` names it in errors ("m.sfm: tensor 3").
Tensor decode_sparse(std::span<const uint8_t> blob, const Shape& shape, const std::string& what);

// The encoded size and the options of the smallest encoding of `w` with `base`'s value bits and
// Huffman choice, over the index widths worth trying.
std::pair<uint64_t, SparseOptions> smallest_sparse(const Tensor& w, SparseOptions base);

// The sparse encoding of an f32 or i8 tensor with its values as they are, at the index width
// that makes it smallest, when that is smaller than the dense tensor; nothing otherwise.
std::optional<quant::EncodedTensor> sparse_if_smaller(const Tensor& weights);

}  // namespace sf
