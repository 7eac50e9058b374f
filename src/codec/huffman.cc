#include "codec/huffman.h"

#include <algorithm>
#include <queue>

#include "core/error.h"

namespace sf {

namespace {

std::vector<uint8_t> unlimited_lengths(const std::vector<uint64_t>& counts) {
  struct Item {
    uint64_t weight;
    int node;
    bool operator>(const Item& o) const { return weight > o.weight || (weight == o.weight && node > o.node); }
  };
  const int n = static_cast<int>(counts.size());
  std::vector<int> parent(static_cast<size_t>(2 * n), -1);
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  for (int s = 0; s < n; ++s)
    if (counts[static_cast<size_t>(s)] > 0) heap.push({counts[static_cast<size_t>(s)], s});
  std::vector<uint8_t> lengths(static_cast<size_t>(n), 0);
  if (heap.size() == 1) {
    lengths[static_cast<size_t>(heap.top().node)] = 1;
    return lengths;
  }
  int next = n;
  while (heap.size() > 1) {
    Item a = heap.top();
    heap.pop();
    Item b = heap.top();
    heap.pop();
    parent[static_cast<size_t>(a.node)] = next;
    parent[static_cast<size_t>(b.node)] = next;
    heap.push({a.weight + b.weight, next++});
  }
  for (int s = 0; s < n; ++s) {
    if (counts[static_cast<size_t>(s)] == 0) continue;
    int depth = 0;
    for (int p = parent[static_cast<size_t>(s)]; p >= 0; p = parent[static_cast<size_t>(p)]) ++depth;
    lengths[static_cast<size_t>(s)] = static_cast<uint8_t>(std::min(depth, 255));
  }
  return lengths;
}

// Canonical codes: shorter first, then by symbol.
std::vector<uint32_t> canonical_codes(const HuffmanCode& code) {
  std::vector<uint32_t> codes(code.lengths.size(), 0);
  uint32_t next = 0;
  int previous_length = 0;
  for (int length = 1; length <= kMaxCodeLength; ++length) {
    for (size_t s = 0; s < code.lengths.size(); ++s) {
      if (code.lengths[s] != length) continue;
      next <<= (length - previous_length);
      previous_length = length;
      codes[s] = next++;
    }
  }
  return codes;
}

}  // namespace

HuffmanCode huffman_code(const std::vector<uint64_t>& counts) {
  std::vector<uint64_t> scaled = counts;
  for (;;) {
    HuffmanCode code{unlimited_lengths(scaled)};
    const uint8_t longest =
        code.lengths.empty() ? 0 : *std::max_element(code.lengths.begin(), code.lengths.end());
    if (longest <= kMaxCodeLength) return code;
    // Flatten the distribution (keeping every used symbol) until the tree is shallow enough.
    for (uint64_t& c : scaled)
      if (c > 0) c = c / 2 + 1;
  }
}

uint64_t huffman_bits(const HuffmanCode& code, const std::vector<uint64_t>& counts) {
  uint64_t bits = 0;
  for (size_t s = 0; s < counts.size() && s < code.lengths.size(); ++s)
    bits += counts[s] * code.lengths[s];
  return bits;
}

std::vector<uint8_t> huffman_encode(const HuffmanCode& code, std::span<const uint32_t> symbols) {
  const std::vector<uint32_t> codes = canonical_codes(code);
  std::vector<uint8_t> out;
  uint64_t buffer = 0;
  int filled = 0;
  for (uint32_t s : symbols) {
    SF_CHECK(s < code.lengths.size() && code.lengths[s] > 0, "huffman: symbol {} has no code", s);
    buffer = (buffer << code.lengths[s]) | codes[s];
    filled += code.lengths[s];
    while (filled >= 8) {
      out.push_back(static_cast<uint8_t>(buffer >> (filled - 8)));
      filled -= 8;
    }
  }
  if (filled > 0) out.push_back(static_cast<uint8_t>(buffer << (8 - filled)));
  return out;
}

std::vector<uint32_t> huffman_decode(const HuffmanCode& code, std::span<const uint8_t> stream,
                                     uint64_t count, const std::string& what) {
  // Per length: the first canonical code, how many codes, and where its symbols start.
  std::vector<uint32_t> first(kMaxCodeLength + 2, 0), number(kMaxCodeLength + 2, 0);
  std::vector<uint32_t> sorted;  // symbols in canonical order
  for (int length = 1; length <= kMaxCodeLength; ++length)
    for (size_t s = 0; s < code.lengths.size(); ++s)
      if (code.lengths[s] == length) {
        ++number[static_cast<size_t>(length)];
        sorted.push_back(static_cast<uint32_t>(s));
      }
  for (size_t s = 0; s < code.lengths.size(); ++s)
    if (code.lengths[s] > kMaxCodeLength)
      fail("{}: huffman code length {} exceeds {}", what, code.lengths[s], kMaxCodeLength);
  // Kraft: an over-full code is ambiguous.
  uint64_t kraft = 0;
  for (int length = 1; length <= kMaxCodeLength; ++length)
    kraft += static_cast<uint64_t>(number[static_cast<size_t>(length)]) << (kMaxCodeLength - length);
  if (kraft > (uint64_t{1} << kMaxCodeLength)) fail("{}: huffman code lengths are over-full", what);
  if (count > 0 && sorted.empty()) fail("{}: huffman code has no symbols", what);
  uint32_t code_value = 0;
  for (int length = 1; length <= kMaxCodeLength; ++length) {
    code_value <<= 1;
    first[static_cast<size_t>(length)] = code_value;
    code_value += number[static_cast<size_t>(length)];
  }
  // Every code is at least one bit, which also bounds the allocation below.
  if (count > stream.size() * 8)
    fail("{}: huffman stream of {} bytes cannot hold {} symbols", what, stream.size(), count);
  std::vector<uint32_t> out;
  out.reserve(static_cast<size_t>(count));
  const uint64_t total_bits = stream.size() * 8;
  uint64_t bit = 0;
  for (uint64_t i = 0; i < count; ++i) {
    uint32_t value = 0;
    uint32_t offset = 0;
    int length = 1;
    for (;; ++length) {
      if (length > kMaxCodeLength) fail("{}: huffman stream has an invalid code at symbol {}", what, i);
      if (bit >= total_bits) fail("{}: huffman stream ends after {} of {} symbols", what, i, count);
      value = (value << 1) | ((stream[bit / 8] >> (7 - bit % 8)) & 1u);
      ++bit;
      const size_t l = static_cast<size_t>(length);
      if (value - first[l] < number[l]) {
        out.push_back(sorted[offset + value - first[l]]);
        break;
      }
      offset += number[l];
    }
  }
  return out;
}

}  // namespace sf
