#include "train/grad_compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <vector>

#include "codec/weight_codec.h"
#include "core/error.h"
#include "cpu/cpu_features.h"
#if defined(__x86_64__)
#include "train/grad_compression_avx512.h"
#endif

namespace sf {

std::string GradCompression::name() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::fp16: return "fp16";
    case Kind::topk: return fmt::format("topk:{:g}", fraction);
    case Kind::onebit: return "onebit";
  }
  return "none";
}

GradCompression parse_grad_compression(const std::string& text) {
  GradCompression c;
  if (text == "none") return c;
  if (text == "fp16") {
    c.kind = GradCompression::Kind::fp16;
    return c;
  }
  if (text == "onebit") {
    c.kind = GradCompression::Kind::onebit;
    return c;
  }
  if (text.rfind("topk:", 0) == 0) {
    const std::string number = text.substr(5);
    char* end = nullptr;
    const double f = std::strtod(number.c_str(), &end);
    if (!number.empty() && end && *end == '\0' && f > 0.0 && f <= 1.0) {
      c.kind = GradCompression::Kind::topk;
      c.fraction = f;
      return c;
    }
  }
  fail("train: --grad-compression must be none, fp16, topk:F (0 < F <= 1) or onebit, got '{}'",
       text);
}

namespace {

int64_t topk_count(const GradCompression& c, int64_t n) {
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(c.fraction * static_cast<double>(n))),
                             n > 0 ? 1 : 0, n);
}

// A top-k message: the k values as halves, in index order, then the k ascending indices in
// Elias-Fano form (Elias 1974, Fano 1971): the low `low_bits` bits of each index packed, then
// the high parts in unary, bit (index >> low_bits) + j set for the j-th index. With
// low_bits = floor(log2(n / k)) an index costs at most 2 + log2(n / k) bits (9 for k = 1%),
// and the size depends on n and k alone, so every rank's message has the same length, as the
// allgather needs.
struct TopkLayout {
  int64_t k = 0;
  int low_bits = 0;
  size_t low_offset = 0;   // bytes before the low bits
  size_t high_offset = 0;  // bytes before the unary high parts
  int64_t high_bit_count = 0;
  size_t bytes = 0;
};

TopkLayout topk_layout(const GradCompression& c, int64_t n) {
  TopkLayout l;
  l.k = topk_count(c, n);
  if (l.k == 0) return l;
  while (l.low_bits < 62 && (l.k << (l.low_bits + 1)) <= n) ++l.low_bits;
  l.low_offset = static_cast<size_t>(l.k) * 2;
  l.high_offset = l.low_offset + static_cast<size_t>((l.k * l.low_bits + 7) / 8);
  l.high_bit_count = ((n - 1) >> l.low_bits) + l.k;
  l.bytes = l.high_offset + static_cast<size_t>((l.high_bit_count + 7) / 8);
  return l;
}

void put_bits(uint8_t* out, int64_t bit, uint64_t value, int count) {
  for (int b = 0; b < count; ++b, ++bit)
    if ((value >> b) & 1u) out[bit / 8] = static_cast<uint8_t>(out[bit / 8] | (1u << (bit % 8)));
}

// The indices of the k largest magnitudes of residual[0, n) (ties to the lower index), in index
// order. Ordering all n indices cost more than a Deep-MNIST step's compute (3.3 M gradients), so
// a threshold from a sample of every 16th float first keeps those at or above it, about 2k; when
// fewer than k pass, all n are candidates. Either way the same k are chosen.
std::vector<int64_t> largest_magnitudes(const float* residual, int64_t n, int64_t k) {
  std::vector<int64_t> index;
  constexpr int64_t kStride = 16;
  if (n >= 64 * kStride && k > 0 && k <= n / 4) {
    std::vector<float> sample;
    sample.reserve(static_cast<size_t>(n / kStride + 1));
    for (int64_t i = 0; i < n; i += kStride)
      if (!std::isnan(residual[i])) sample.push_back(std::fabs(residual[i]));
    if (sample.empty()) sample.push_back(0.0f);  // all NaN: none passes, all are candidates
    const auto rank =
        std::min<size_t>(sample.size() - 1, static_cast<size_t>(2 * k / kStride + 16));
    std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(rank),
                     sample.end(), std::greater<>());
    const float threshold = sample[rank];
    index.reserve(static_cast<size_t>(4 * k));
    for (int64_t i = 0; i < n; ++i)
      if (std::fabs(residual[i]) >= threshold) index.push_back(i);
    if (static_cast<int64_t>(index.size()) < k) index.clear();
  }
  if (index.empty()) {
    index.resize(static_cast<size_t>(n));
    std::iota(index.begin(), index.end(), int64_t{0});
  }
  std::nth_element(index.begin(), index.begin() + k, index.end(), [&](int64_t a, int64_t b) {
    const float fa = std::fabs(residual[a]), fb = std::fabs(residual[b]);
    return fa > fb || (fa == fb && a < b);
  });
  index.resize(static_cast<size_t>(k));
  std::sort(index.begin(), index.end());
  return index;
}

// One-bit messages: a bf16 scale (the mean magnitude) for each chunk of this many floats, then
// one sign bit per float. One scale per whole bucket let the largest layer's magnitudes set
// every other layer's step, and sent +-scale for gradients that were exactly zero; a scale per
// 512 floats costs 1/32 bit per float (31x fewer bytes instead of 32x). Sending each sign's mean
// instead (1-bit SGD's reconstruction, two bf16 values per 1024 floats) measured the same: 99.20%
// against 99.19% after five epochs on full data, 97.61% against 97.58% on 6,400 images.
constexpr int64_t kOneBitChunk = 512;

size_t onebit_scale_bytes(int64_t n) {
  return 2 * static_cast<size_t>((n + kOneBitChunk - 1) / kOneBitChunk);
}

// A chunk's magnitudes are summed in this many interleaved lanes (lane l takes floats l, l + 16,
// ...), then the lanes in order in double: the AVX-512 path adds the same floats in the same order.
constexpr int kOneBitLanes = 16;

void onebit_magnitude_lanes(const float* residual, int64_t count, float* lanes) {
  std::fill(lanes, lanes + kOneBitLanes, 0.0f);
  for (int64_t i = 0; i < count; ++i) lanes[i % kOneBitLanes] += std::fabs(residual[i]);
}

// The chunk's scale, rounded to bf16: the lane sums added in lane order, over the count.
uint16_t onebit_scale(const float* lanes, int64_t count) {
  double magnitude = 0.0;
  for (int l = 0; l < kOneBitLanes; ++l) magnitude += lanes[l];
  return quant::float_to_bf16(static_cast<float>(magnitude / static_cast<double>(count)));
}

uint64_t get_bits(const uint8_t* in, int64_t bit, int count) {
  uint64_t value = 0;
  for (int b = 0; b < count; ++b, ++bit) value |= static_cast<uint64_t>((in[bit / 8] >> (bit % 8)) & 1u) << b;
  return value;
}

}  // namespace

size_t compressed_bytes(const GradCompression& c, int64_t n) {
  switch (c.kind) {
    case GradCompression::Kind::none: return static_cast<size_t>(n) * 4;
    case GradCompression::Kind::fp16: return static_cast<size_t>(n) * 2;
    case GradCompression::Kind::topk: return topk_layout(c, n).bytes;
    case GradCompression::Kind::onebit:
      return onebit_scale_bytes(n) + static_cast<size_t>((n + 7) / 8);
  }
  return 0;
}

void compress(const GradCompression& c, float* residual, int64_t n, uint8_t* message) {
  SF_CHECK(n >= 0, "compress: {} floats", n);
  switch (c.kind) {
    case GradCompression::Kind::none:
      std::memcpy(message, residual, static_cast<size_t>(n) * 4);
      std::fill(residual, residual + n, 0.0f);
      return;
    case GradCompression::Kind::fp16:
#if defined(__x86_64__)
      if (cpu_features().avx512f) return compress_fp16_avx512(residual, n, message);
#endif
      for (int64_t i = 0; i < n; ++i) {
        // Beyond half's range the rest stays in the residual for later steps.
        const uint16_t h = quant::float_to_half(std::clamp(residual[i], -65504.0f, 65504.0f));
        std::memcpy(message + 2 * i, &h, 2);
        residual[i] -= quant::half_to_float(h);
      }
      return;
    case GradCompression::Kind::topk: {
      const TopkLayout l = topk_layout(c, n);
      const std::vector<int64_t> index = largest_magnitudes(residual, n, l.k);
      std::memset(message, 0, l.bytes);
      for (int64_t j = 0; j < l.k; ++j) {
        const int64_t i = index[static_cast<size_t>(j)];
        // Beyond half's range, and below its precision, the rest stays in the residual.
        const uint16_t h = quant::float_to_half(std::clamp(residual[i], -65504.0f, 65504.0f));
        std::memcpy(message + 2 * j, &h, 2);
        residual[i] -= quant::half_to_float(h);
        put_bits(message + l.low_offset, j * l.low_bits, static_cast<uint64_t>(i), l.low_bits);
        put_bits(message + l.high_offset, (i >> l.low_bits) + j, 1, 1);
      }
      return;
    }
    case GradCompression::Kind::onebit: {
      uint8_t* bits = message + onebit_scale_bytes(n);
      std::memset(bits, 0, static_cast<size_t>((n + 7) / 8));
      [[maybe_unused]] const bool vector = cpu_features().avx512f;
      for (int64_t begin = 0; begin < n; begin += kOneBitChunk) {
        const int64_t count = std::min(n - begin, kOneBitChunk);
        float* chunk = residual + begin;
        uint8_t* chunk_bits = bits + begin / 8;  // chunks start on whole bytes
        float lanes[kOneBitLanes];
#if defined(__x86_64__)
        if (vector)
          onebit_magnitude_lanes_avx512(chunk, count, lanes);
        else
#endif
          onebit_magnitude_lanes(chunk, count, lanes);
        // The residual keeps what the rounded scale leaves out, so rounding costs nothing.
        const uint16_t stored = onebit_scale(lanes, count);
        std::memcpy(message + 2 * (begin / kOneBitChunk), &stored, 2);
        const float scale = quant::bf16_to_float(stored);
#if defined(__x86_64__)
        if (vector) {
          onebit_signs_avx512(chunk, count, scale, chunk_bits);
          continue;
        }
#endif
        const float value[2] = {scale, -scale};
        for (int64_t i = 0; i < count; ++i) {
          const bool negative = chunk[i] < 0.0f;
          if (negative)
            chunk_bits[i / 8] = static_cast<uint8_t>(chunk_bits[i / 8] | (1u << (i % 8)));
          chunk[i] -= value[negative];
        }
      }
      return;
    }
  }
}

void add_decoded(const GradCompression& c, const uint8_t* message, int64_t n, float* sum) {
  SF_CHECK(n >= 0, "add_decoded: {} floats", n);
  switch (c.kind) {
    case GradCompression::Kind::none:
      for (int64_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, message + 4 * i, 4);
        sum[i] += v;
      }
      return;
    case GradCompression::Kind::fp16:
#if defined(__x86_64__)
      if (cpu_features().avx512f) return add_decoded_fp16_avx512(message, n, sum);
#endif
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, message + 2 * i, 2);
        sum[i] += quant::half_to_float(h);
      }
      return;
    case GradCompression::Kind::topk: {
      const TopkLayout l = topk_layout(c, n);
      const uint8_t* high = message + l.high_offset;
      int64_t j = 0;
      for (int64_t bit = 0; bit < l.high_bit_count; ++bit) {
        if (!((high[bit / 8] >> (bit % 8)) & 1u)) continue;
        if (j == l.k) fail("gradient message: more than the {} indices of a top-k message", l.k);
        const int64_t i = ((bit - j) << l.low_bits) |
                          static_cast<int64_t>(get_bits(message + l.low_offset, j * l.low_bits, l.low_bits));
        if (i >= n) fail("gradient message: index {} beyond {} floats", i, n);
        uint16_t h;
        std::memcpy(&h, message + 2 * j, 2);
        sum[i] += quant::half_to_float(h);
        ++j;
      }
      if (j != l.k) fail("gradient message: {} indices, a top-k message holds {}", j, l.k);
      return;
    }
    case GradCompression::Kind::onebit: {
      const uint8_t* bits = message + onebit_scale_bytes(n);
      [[maybe_unused]] const bool vector = cpu_features().avx512f;
      for (int64_t begin = 0; begin < n; begin += kOneBitChunk) {
        uint16_t stored;
        std::memcpy(&stored, message + 2 * (begin / kOneBitChunk), 2);
        const float scale = quant::bf16_to_float(stored);
        const int64_t count = std::min(n - begin, kOneBitChunk);
        const uint8_t* chunk_bits = bits + begin / 8;
        float* chunk_sum = sum + begin;
#if defined(__x86_64__)
        if (vector) {
          add_decoded_onebit_avx512(chunk_bits, count, scale, chunk_sum);
          continue;
        }
#endif
        const float value[2] = {scale, -scale};
        for (int64_t i = 0; i < count; ++i)
          chunk_sum[i] += value[(chunk_bits[i / 8] >> (i % 8)) & 1u];
      }
      return;
    }
  }
}

}  // namespace sf
