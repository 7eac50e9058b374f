// Canonical Huffman coding of small-alphabet symbol streams (quantized weight indices and
// sparse-index gaps, as in Deep Compression's last stage). Code lengths are limited to
// kMaxCodeLength so the decoder's tables stay small; the decoder checks every length, the
// Kraft sum and every bit read, so a corrupt stream is an error, not a crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sf {

inline constexpr int kMaxCodeLength = 24;

struct HuffmanCode {
  std::vector<uint8_t> lengths;  // per symbol; 0: symbol unused
};

// Optimal code lengths for these symbol counts, limited to kMaxCodeLength. A single used
// symbol gets length 1.
HuffmanCode huffman_code(const std::vector<uint64_t>& counts);

// Total bits of `symbols` under `code` (for size reports without encoding).
uint64_t huffman_bits(const HuffmanCode& code, const std::vector<uint64_t>& counts);

// Encodes into a bitstream (MSB-first within bytes). Every symbol must have a code.
std::vector<uint8_t> huffman_encode(const HuffmanCode& code, std::span<const uint32_t> symbols);

// Decodes exactly `count` symbols. Throws sf::Error naming `what` when the code lengths are
// invalid or the stream ends early.
std::vector<uint32_t> huffman_decode(const HuffmanCode& code, std::span<const uint8_t> stream,
                                     uint64_t count, const std::string& what);

}  // namespace sf
