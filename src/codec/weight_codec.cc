// Weight encoders and the decoder that model loading uses. The decoder is fed straight from
// files, so validate() runs first and decoding itself never trusts a count it has not checked.
#include "codec/weight_codec.h"

#include "codec/binary_weights.h"
#include "codec/sparse_codec.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace sf::quant {
namespace {

constexpr int kKmeansMaxIterations = 50;
// Matches the model reader's bound; keeps every byte count below far from overflow.
constexpr uint64_t kMaxElements = uint64_t{1} << 40;

int32_t max_index(int bits) { return (int32_t{1} << bits) - 1; }

// numel of a shape, rejecting negative dimensions and absurd sizes without overflowing.
uint64_t checked_numel(const Shape& shape) {
  uint64_t n = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) fail("shape {} has a negative dimension", shape_str(shape));
    if (d == 0) empty = true;
    if (d > 1 && n > kMaxElements / static_cast<uint64_t>(d))
      fail("shape {} has more than {} elements", shape_str(shape), kMaxElements);
    n *= static_cast<uint64_t>(std::max<int64_t>(d, 1));
  }
  return empty ? 0 : n;
}

void check_bits(int bits) {
  if (bits < kMinBits || bits > kMaxBits)
    fail("bits {} is outside [{}, {}]", bits, kMinBits, kMaxBits);
}

// The tensor every encoder accepts: f32 with finite values.
const float* checked_values(const Tensor& tensor, const char* what) {
  if (tensor.dtype() != DType::f32)
    fail("{} encoding needs an f32 tensor, got {}", what, dtype_name(tensor.dtype()));
  const float* x = tensor.data<float>();
  const int64_t n = tensor.numel();
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) fail("cannot {}-encode: element {} is {}", what, i, x[i]);
  return x;
}

// A tensor seen as [outer, channels, inner] around `axis` (kNoAxis: one channel).
struct ChannelGeometry {
  int64_t outer = 1, channels = 1, inner = 1;
};

ChannelGeometry geometry(const Shape& shape, int axis) {
  ChannelGeometry g;
  if (axis == kNoAxis) {
    g.inner = num_elements(shape);
    return g;
  }
  for (int i = 0; i < axis; ++i) g.outer *= shape[i];
  g.channels = shape[axis];
  for (size_t i = static_cast<size_t>(axis) + 1; i < shape.size(); ++i) g.inner *= shape[i];
  return g;
}

std::vector<uint8_t> pack(const std::vector<uint8_t>& indices, int bits) {
  std::vector<uint8_t> out(packed_bytes(indices.size(), bits));
  if (bits == 8) {
    std::copy(indices.begin(), indices.end(), out.begin());
    return out;
  }
  uint64_t acc = 0;
  int held = 0;
  size_t at = 0;
  for (uint8_t q : indices) {
    acc |= uint64_t{q} << held;
    held += bits;
    while (held >= 8) {
      out[at++] = static_cast<uint8_t>(acc);
      acc >>= 8;
      held -= 8;
    }
  }
  if (held > 0) out[at] = static_cast<uint8_t>(acc);
  return out;
}

// Reads exactly packed_bytes(count, bits) bytes of `data` (the caller has checked them).
std::vector<uint8_t> unpack(const uint8_t* data, uint64_t count, int bits) {
  std::vector<uint8_t> indices(count);
  if (bits == 8) {
    std::copy(data, data + count, indices.begin());
    return indices;
  }
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t acc = 0;
  int held = 0;
  for (uint64_t k = 0; k < count; ++k) {
    while (held < bits) {
      acc |= uint64_t{*data++} << held;
      held += 8;
    }
    indices[k] = static_cast<uint8_t>(acc & mask);
    acc >>= bits;
    held -= bits;
  }
  return indices;
}

// --- k-means in one dimension ---
// Floats reordered as unsigned integers that sort in the same order (finite values only).
uint32_t order_key(float v) {
  const auto bits = std::bit_cast<uint32_t>(v);
  return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}
float from_order_key(uint32_t key) {
  return std::bit_cast<float>(key & 0x80000000u ? key & 0x7fffffffu : ~key);
}

// LSD radix sort in three 11-bit passes: several times faster than std::sort on the millions
// of weights of a big layer.
std::vector<float> sorted_copy(const float* x, int64_t n) {
  constexpr int kDigitBits = 11;
  constexpr uint32_t kDigits = 1u << kDigitBits;
  std::vector<uint32_t> keys(static_cast<size_t>(n)), scratch(static_cast<size_t>(n));
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = order_key(x[i]);
  for (int shift = 0; shift < 32; shift += kDigitBits) {
    std::vector<size_t> start(kDigits + 1, 0);
    for (uint32_t k : keys) ++start[((k >> shift) & (kDigits - 1)) + 1];
    for (uint32_t d = 0; d < kDigits; ++d) start[d + 1] += start[d];
    for (uint32_t k : keys) scratch[start[(k >> shift) & (kDigits - 1)]++] = k;
    keys.swap(scratch);
  }
  std::vector<float> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out[i] = from_order_key(keys[i]);
  return out;
}

// The sorted distinct values with prefix sums of counts, values and squares, so that the size,
// mean and squared error of any run of consecutive values cost O(1). Clusters of sorted 1-D
// data under nearest-centroid assignment are such runs, which makes a Lloyd iteration
// O(k log distinct) instead of O(n k).
struct SortedValues {
  std::vector<float> values;
  std::vector<double> count, sum, squares;  // prefix sums, size values.size() + 1

  explicit SortedValues(const float* x, int64_t n) {
    const std::vector<float> sorted = sorted_copy(x, n);
    count.push_back(0);
    sum.push_back(0);
    squares.push_back(0);
    for (size_t i = 0; i < sorted.size();) {
      size_t j = i;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      const double v = sorted[i], c = static_cast<double>(j - i);
      values.push_back(sorted[i]);
      count.push_back(count.back() + c);
      sum.push_back(sum.back() + v * c);
      squares.push_back(squares.back() + v * v * c);
      i = j;
    }
  }
  double n(size_t a, size_t b) const { return count[b] - count[a]; }
  double total(size_t a, size_t b) const { return sum[b] - sum[a]; }
  double squared_error(size_t a, size_t b) const {
    const double c = n(a, b);
    if (c == 0) return 0;
    const double s = total(a, b);
    return std::max(0.0, squares[b] - squares[a] - s * s / c);
  }
};

// Value x belongs to cluster j when mids[j-1] <= x < mids[j]; ties go up.
std::vector<double> midpoints(const std::vector<float>& centroids) {
  std::vector<double> mids(centroids.size() - 1);
  for (size_t j = 0; j + 1 < centroids.size(); ++j)
    mids[j] = (static_cast<double>(centroids[j]) + centroids[j + 1]) * 0.5;
  return mids;
}

// Cluster j holds the sorted distinct values [bounds[j], bounds[j+1]).
std::vector<size_t> cluster_bounds(const SortedValues& s, const std::vector<float>& centroids) {
  const std::vector<double> mids = midpoints(centroids);
  std::vector<size_t> bounds(centroids.size() + 1);
  bounds[0] = 0;
  bounds.back() = s.values.size();
  for (size_t j = 0; j < mids.size(); ++j)
    bounds[j + 1] = static_cast<size_t>(
        std::lower_bound(s.values.begin(), s.values.end(), mids[j],
                         [](float v, double m) { return static_cast<double>(v) < m; }) -
        s.values.begin());
  return bounds;
}

// Gives every empty cluster the value farthest from its centroid in the cluster with the
// largest squared error, so no code is wasted while distinct values share one.
void reseed_empty_clusters(const SortedValues& s, const std::vector<size_t>& bounds,
                           std::vector<float>& centroids) {
  const size_t k = centroids.size();
  std::vector<double> error(k);
  std::vector<size_t> empty;
  for (size_t j = 0; j < k; ++j) {
    if (s.n(bounds[j], bounds[j + 1]) == 0) empty.push_back(j);
    error[j] = s.squared_error(bounds[j], bounds[j + 1]);
  }
  if (empty.empty()) return;
  for (size_t j : empty) {
    const size_t worst =
        static_cast<size_t>(std::max_element(error.begin(), error.end()) - error.begin());
    if (error[worst] <= 0) break;
    const float first = s.values[bounds[worst]], last = s.values[bounds[worst + 1] - 1];
    const float c = centroids[worst];
    centroids[j] = std::abs(first - c) > std::abs(last - c) ? first : last;
    error[worst] = 0;
  }
  std::sort(centroids.begin(), centroids.end());
}

std::vector<float> lloyd(const SortedValues& s, size_t k) {
  const float lo = s.values.front(), hi = s.values.back();
  std::vector<float> centroids(k);
  for (size_t j = 0; j < k; ++j)
    centroids[j] = static_cast<float>(lo + (static_cast<double>(hi) - lo) * static_cast<double>(j) /
                                               static_cast<double>(k - 1));
  std::vector<size_t> bounds = cluster_bounds(s, centroids);
  for (int iteration = 0; iteration < kKmeansMaxIterations; ++iteration) {
    for (size_t j = 0; j < k; ++j) {
      const double c = s.n(bounds[j], bounds[j + 1]);
      if (c > 0) centroids[j] = static_cast<float>(s.total(bounds[j], bounds[j + 1]) / c);
    }
    reseed_empty_clusters(s, bounds, centroids);
    std::vector<size_t> next = cluster_bounds(s, centroids);
    if (next == bounds) break;
    bounds = std::move(next);
  }
  return centroids;
}

}  // namespace

const char* encoding_name(Encoding encoding) {
  switch (encoding) {
    case Encoding::linear:
      return "linear";
    case Encoding::kmeans:
      return "kmeans";
    case Encoding::f16:
      return "f16";
    case Encoding::sparse:
      return "sparse";
    case Encoding::binary:
      return "binary";
    case Encoding::ternary:
      return "ternary";
    case Encoding::bf16:
      return "bf16";
  }
  return "?";
}

uint32_t first_format_version(Encoding encoding) {
  if (encoding == Encoding::bf16) return 4;
  return encoding == Encoding::binary || encoding == Encoding::ternary ? 3 : 1;
}

bool parse_encoding(const std::string& name, Encoding* encoding) {
  for (Encoding e : {Encoding::linear, Encoding::kmeans, Encoding::f16, Encoding::sparse,
                     Encoding::binary, Encoding::ternary, Encoding::bf16})
    if (name == encoding_name(e)) {
      *encoding = e;
      return true;
    }
  return false;
}

EncodedTensor encode(const Tensor& tensor, Encoding kind, int bits, int axis) {
  switch (kind) {
    case Encoding::linear:
      return encode_linear(tensor, bits, axis);
    case Encoding::kmeans:
      return encode_kmeans(tensor, bits);
    case Encoding::f16:
      return encode_f16(tensor);
    case Encoding::bf16:
      return encode_bf16(tensor);
    case Encoding::binary:
      return encode_binary(tensor);
    case Encoding::ternary:
      return encode_ternary(tensor);
    case Encoding::sparse:
      break;
  }
  fail("encoding '{}' needs its own options (encode_sparse)", encoding_name(kind));
}

void write_fields(const WeightEncoding& e, EncodingFieldWriter& out) {
  if (e.kind == Encoding::f16 || e.kind == Encoding::bf16 || e.kind == Encoding::sparse) return;
  out.integer("bits", e.bits);
  if (e.kind == Encoding::kmeans) {
    out.floats("codebook", e.codebook);
    return;
  }
  if (e.kind == Encoding::binary || e.kind == Encoding::ternary) {
    out.integer("axis", e.axis);
    out.floats("scales", e.scales);
    return;
  }
  if (e.axis != kNoAxis) out.integer("axis", e.axis);
  out.floats("scales", e.scales);
  out.integers("zero_points", e.zero_points);
}

WeightEncoding read_fields(Encoding kind, const EncodingFieldReader& in) {
  if (kind == Encoding::f16 || kind == Encoding::bf16)
    return WeightEncoding{.kind = kind, .bits = kHalfBits};
  if (kind == Encoding::sparse) return WeightEncoding{.kind = kind, .bits = 0};
  WeightEncoding e{.kind = kind, .bits = in.integer("bits")};
  if (kind == Encoding::kmeans) {
    e.codebook = in.floats("codebook");
    return e;
  }
  if (kind == Encoding::binary || kind == Encoding::ternary) {
    e.axis = in.integer("axis");
    e.scales = in.floats("scales");
    return e;
  }
  if (in.has("axis")) {
    e.axis = in.integer("axis");
    // Written only for per-channel scales, so a stored kNoAxis is a malformed entry.
    if (e.axis == kNoAxis)
      in.reject("axis", fmt::format("is {}; leave it out for one scale per tensor", e.axis));
  }
  e.scales = in.floats("scales");
  for (int z : in.integers("zero_points")) e.zero_points.push_back(z);
  return e;
}

size_t WeightEncoding::parameter_bytes() const {
  return scales.size() * sizeof(float) + zero_points.size() + codebook.size() * sizeof(float);
}

std::string WeightEncoding::describe() const {
  switch (kind) {
    case Encoding::linear:
      return axis == kNoAxis ? fmt::format("linear {}-bit", bits)
                             : fmt::format("linear {}-bit per-channel (axis {})", bits, axis);
    case Encoding::kmeans:
      return fmt::format("kmeans {}-bit ({} centroids)", bits, codebook.size());
    case Encoding::f16:
      return "f16";
    case Encoding::bf16:
      return "bf16";
    case Encoding::sparse:
      return "sparse";
    case Encoding::binary:
      return fmt::format("binary 1-bit per-channel (axis {})", axis);
    case Encoding::ternary:
      return fmt::format("ternary 2-bit per-channel (axis {})", axis);
  }
  return "?";
}

uint64_t packed_bytes(uint64_t count, int bits) {
  return (count * static_cast<uint64_t>(bits) + 7) / 8;
}

uint64_t data_bytes(const WeightEncoding& encoding, uint64_t count) {
  SF_CHECK(encoding.kind != Encoding::sparse, "sparse data has no size of its own");
  return encoding.kind == Encoding::f16 || encoding.kind == Encoding::bf16
             ? count * 2
             : packed_bytes(count, encoding.bits);
}

namespace {

// The per-channel scale and zero point of linear encoding, and the index of one value.
struct LinearGrid {
  ChannelGeometry geometry;
  int32_t qmax = 0;
  std::vector<float> scales;
  std::vector<int32_t> zero_points;

  uint8_t index(float x, size_t channel) const {
    const float q = std::nearbyint(x / scales[channel]) + static_cast<float>(zero_points[channel]);
    return static_cast<uint8_t>(std::clamp(q, 0.0f, static_cast<float>(qmax)));
  }
  float value(uint8_t index, size_t channel) const {
    return static_cast<float>(index - zero_points[channel]) * scales[channel];
  }
};

LinearGrid linear_grid(const Tensor& tensor, const float* x, int bits, int axis) {
  check_bits(bits);
  if (axis != kNoAxis && (axis < 0 || axis >= tensor.rank()))
    fail("per-channel axis {} is outside tensor {} (rank {})", axis, shape_str(tensor.shape()),
         tensor.rank());
  LinearGrid grid;
  const ChannelGeometry& g = grid.geometry = geometry(tensor.shape(), axis);
  const auto channels = static_cast<size_t>(g.channels);
  // Zero is always inside the range, so that it is represented exactly.
  std::vector<float> lo(channels, 0.0f), hi(channels, 0.0f);
  float* __restrict l = lo.data();
  float* __restrict h = hi.data();
  for (int64_t o = 0; o < g.outer; ++o) {
    const float* __restrict block = x + o * g.channels * g.inner;
    if (g.inner == 1) {  // channels last (HWIO filters, [K, N] matrices)
      for (int64_t c = 0; c < g.channels; ++c) {
        l[c] = std::min(l[c], block[c]);
        h[c] = std::max(h[c], block[c]);
      }
      continue;
    }
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t i = 0; i < g.inner; ++i) {
        l[c] = std::min(l[c], block[c * g.inner + i]);
        h[c] = std::max(h[c], block[c * g.inner + i]);
      }
  }
  grid.qmax = max_index(bits);
  grid.scales.resize(channels);
  grid.zero_points.resize(channels);
  for (size_t c = 0; c < channels; ++c) {
    // An all-zero channel gets scale 1; a range so small that its step underflows gets the
    // smallest normal float, which still decodes every element within a step.
    float scale = static_cast<float>((static_cast<double>(hi[c]) - lo[c]) / grid.qmax);
    if (hi[c] == lo[c]) scale = 1.0f;
    scale = std::max(scale, std::numeric_limits<float>::min());
    const double zero = std::nearbyint(-static_cast<double>(lo[c]) / scale);
    grid.scales[c] = scale;
    grid.zero_points[c] = static_cast<int32_t>(std::clamp(zero, 0.0, double(grid.qmax)));
  }
  return grid;
}

}  // namespace

EncodedTensor encode_linear(const Tensor& tensor, int bits, int axis) {
  const float* x = checked_values(tensor, "linear");
  LinearGrid grid = linear_grid(tensor, x, bits, axis);
  const ChannelGeometry& g = grid.geometry;
  std::vector<uint8_t> indices(static_cast<size_t>(tensor.numel()));
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t c = 0; c < g.channels; ++c) {
      const int64_t start = (o * g.channels + c) * g.inner;
      for (int64_t i = start; i < start + g.inner; ++i)
        indices[static_cast<size_t>(i)] = grid.index(x[i], static_cast<size_t>(c));
    }
  EncodedTensor out;
  out.shape = tensor.shape();
  out.encoding = WeightEncoding{.kind = Encoding::linear, .bits = bits, .axis = axis};
  out.encoding.scales = std::move(grid.scales);
  out.encoding.zero_points = std::move(grid.zero_points);
  out.data = pack(indices, bits);
  return out;
}

Tensor fake_quantize_linear(const Tensor& tensor, int bits, int axis) {
  Tensor out(DType::f32, tensor.shape());
  fake_quantize_linear(tensor, bits, axis, out);
  return out;
}

void fake_quantize_linear(const Tensor& tensor, int bits, int axis, Tensor& out) {
  const float* x = checked_values(tensor, "linear");
  const LinearGrid grid = linear_grid(tensor, x, bits, axis);
  const ChannelGeometry& g = grid.geometry;
  // The same arithmetic as LinearGrid::index then value, as flat loops over each row of
  // channels: this runs on every training step.
  const std::vector<float> zeros(grid.zero_points.begin(), grid.zero_points.end());
  const float* __restrict scale = grid.scales.data();
  const float* __restrict zero = zeros.data();
  const auto qmax = static_cast<float>(grid.qmax);
  float* __restrict y = out.data<float>();
  auto round_trip = [&](float value, int64_t c) {
    const float q = std::clamp(std::nearbyint(value / scale[c]) + zero[c], 0.0f, qmax);
    return (q - zero[c]) * scale[c];
  };
  if (g.inner == 1) {  // channels last (HWIO filters, [K, N] matrices)
#pragma omp parallel for if (tensor.numel() >= (1 << 16))
    for (int64_t o = 0; o < g.outer; ++o)
      for (int64_t c = 0; c < g.channels; ++c)
        y[o * g.channels + c] = round_trip(x[o * g.channels + c], c);
  } else {
#pragma omp parallel for if (tensor.numel() >= (1 << 16))
    for (int64_t o = 0; o < g.outer; ++o)
      for (int64_t c = 0; c < g.channels; ++c)
        for (int64_t i = (o * g.channels + c) * g.inner; i < (o * g.channels + c + 1) * g.inner; ++i)
          y[i] = round_trip(x[i], c);
  }
}

EncodedTensor encode_kmeans(const Tensor& tensor, int bits) {
  check_bits(bits);
  const float* x = checked_values(tensor, "kmeans");
  const int64_t n = tensor.numel();
  const size_t k = size_t{1} << bits;
  std::vector<float> codebook;
  if (n > 0) {
    SortedValues sorted(x, n);
    if (sorted.values.size() <= k) {
      codebook = sorted.values;  // few distinct values: store them exactly
      codebook.resize(k, codebook.back());
    } else {
      codebook = lloyd(sorted, k);
    }
  } else {
    codebook.assign(k, 0.0f);
  }
  // Index = how many midpoints are <= x (as in cluster_bounds), by a branch-free binary search
  // over the k - 1 midpoints padded with +inf to k.
  std::vector<double> mids = midpoints(codebook);
  mids.push_back(std::numeric_limits<double>::infinity());
  std::vector<uint8_t> indices(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    size_t at = 0;
    for (size_t step = k / 2; step > 0; step /= 2) at += mids[at + step - 1] <= v ? step : 0;
    indices[static_cast<size_t>(i)] = static_cast<uint8_t>(at);
  }
  EncodedTensor out;
  out.shape = tensor.shape();
  out.encoding = WeightEncoding{.kind = Encoding::kmeans, .bits = bits};
  out.encoding.codebook = std::move(codebook);
  out.data = pack(indices, bits);
  return out;
}

namespace {

// f16 and bf16: each element as 16 little-endian bits, `infinity` being the format's.
EncodedTensor encode_halves(const Tensor& tensor, Encoding kind, uint16_t (*convert)(float),
                            uint16_t infinity) {
  const float* x = checked_values(tensor, encoding_name(kind));
  const int64_t n = tensor.numel();
  EncodedTensor out;
  out.shape = tensor.shape();
  out.encoding = WeightEncoding{.kind = kind, .bits = kHalfBits};
  out.data.resize(static_cast<size_t>(n) * 2);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = convert(x[i]);
    if ((h & 0x7fffu) == infinity)
      fail("cannot {}-encode: element {} ({}) is beyond its range", encoding_name(kind), i, x[i]);
    out.data[static_cast<size_t>(2 * i)] = static_cast<uint8_t>(h);
    out.data[static_cast<size_t>(2 * i + 1)] = static_cast<uint8_t>(h >> 8);
  }
  return out;
}

}  // namespace

EncodedTensor encode_f16(const Tensor& tensor) {
  return encode_halves(tensor, Encoding::f16, float_to_half, 0x7c00u);
}

EncodedTensor encode_bf16(const Tensor& tensor) {
  return encode_halves(tensor, Encoding::bf16, float_to_bf16, 0x7f80u);
}

constexpr uint64_t kMaxSparseExpansion = 1024;
constexpr uint64_t kMinSparseBound = uint64_t{1} << 16;

namespace {

int signed_levels_bits(Encoding kind) { return kind == Encoding::binary ? 1 : 2; }

void validate_signed_levels(const Shape& shape, const WeightEncoding& e, uint64_t bytes,
                            uint64_t count) {
  const char* name = encoding_name(e.kind);
  if (e.bits != signed_levels_bits(e.kind))
    fail("{} bits {} must be {}", name, e.bits, signed_levels_bits(e.kind));
  if (shape.empty()) fail("{} needs a tensor of rank 1 or more, got a scalar", name);
  if (e.axis != static_cast<int>(shape.size()) - 1)
    fail("{} axis {} must be the last axis ({}) of {}", name, e.axis, shape.size() - 1,
         shape_str(shape));
  const uint64_t expected = packed_bytes(count, e.bits);
  if (bytes != expected)
    fail("{} bytes, but {} {}-bit {} needs {}", bytes, name, e.bits, shape_str(shape), expected);
  const auto channels = static_cast<uint64_t>(shape.back());
  if (e.scales.size() != channels)
    fail("{} scales, expected {} (one per channel)", e.scales.size(), channels);
  for (size_t c = 0; c < channels; ++c)
    if (!std::isfinite(e.scales[c]) || e.scales[c] < 0)
      fail("scale {} is {}, not a finite non-negative number", c, e.scales[c]);
}

EncodedTensor encode_levels(const Tensor& tensor, Encoding kind) {
  const char* name = encoding_name(kind);
  checked_values(tensor, name);
  if (tensor.rank() == 0) fail("cannot {}-encode a scalar (channels are the last axis)", name);
  const std::optional<SignedLevels> levels = signed_levels(tensor);
  if (!levels || (kind == Encoding::binary && levels->ternary))
    fail("cannot {}-encode: a channel (last axis) holds values other than {}", name,
         kind == Encoding::binary ? "-scale and +scale" : "-scale, 0 and +scale");
  const int bits = signed_levels_bits(kind);
  std::vector<uint8_t> indices(levels->levels.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    const int8_t l = levels->levels[i];
    indices[i] = kind == Encoding::binary ? (l > 0 ? 1 : 0) : (l > 0 ? 1 : l < 0 ? 2 : 0);
  }
  EncodedTensor out;
  out.shape = tensor.shape();
  out.encoding = WeightEncoding{.kind = kind, .bits = bits,
                                .axis = static_cast<int>(tensor.rank()) - 1};
  out.encoding.scales = levels->scales;
  out.data = pack(indices, bits);
  return out;
}

}  // namespace

EncodedTensor encode_binary(const Tensor& tensor) { return encode_levels(tensor, Encoding::binary); }
EncodedTensor encode_ternary(const Tensor& tensor) {
  return encode_levels(tensor, Encoding::ternary);
}

void validate(const Shape& shape, const WeightEncoding& e, uint64_t bytes) {
  const uint64_t count = checked_numel(shape);
  if (e.kind == Encoding::sparse) {
    // The blob describes itself; decode_sparse checks all of it against `shape`.
    if (e.bits != 0) fail("sparse bits {} must be 0 (the data describes itself)", e.bits);
    if (bytes < kSparseHeaderBytes)
      fail("{} bytes cannot hold a sparse header ({} bytes)", bytes, kSparseHeaderBytes);
    // Decoding allocates and zeroes the dense tensor, so a tiny blob must not declare a huge
    // one: even a layer pruned to 99.9% stays far below this expansion.
    if (count > kMaxSparseExpansion * bytes && count > kMinSparseBound)
      fail("{} bytes of sparse data cannot describe {} ({} elements; at most {} per byte)", bytes,
           shape_str(shape), count, kMaxSparseExpansion);
    return;
  }
  if (e.kind == Encoding::binary || e.kind == Encoding::ternary) {
    validate_signed_levels(shape, e, bytes, count);
    return;
  }
  if (e.kind == Encoding::f16 || e.kind == Encoding::bf16) {
    if (e.bits != kHalfBits)
      fail("{} bits {} must be {}", encoding_name(e.kind), e.bits, kHalfBits);
  } else if (e.bits < kMinBits || e.bits > kMaxBits) {
    fail("{} bits {} is outside [{}, {}]", encoding_name(e.kind), e.bits, kMinBits, kMaxBits);
  }
  const uint64_t expected = data_bytes(e, count);
  if (bytes != expected)
    fail("{} bytes, but {} {}-bit {} needs {}", bytes, encoding_name(e.kind), e.bits,
         shape_str(shape), expected);
  if (e.kind == Encoding::linear) {
    if (e.axis != kNoAxis && (e.axis < 0 || static_cast<size_t>(e.axis) >= shape.size()))
      fail("axis {} is outside [0, {}) for shape {}", e.axis, shape.size(), shape_str(shape));
    const uint64_t channels =
        e.axis == kNoAxis ? 1 : static_cast<uint64_t>(shape[static_cast<size_t>(e.axis)]);
    if (e.scales.size() != channels)
      fail("{} scales, expected {} (one per channel)", e.scales.size(), channels);
    if (e.zero_points.size() != channels)
      fail("{} zero points, expected {} (one per channel)", e.zero_points.size(), channels);
    for (size_t c = 0; c < channels; ++c) {
      if (!std::isfinite(e.scales[c]) || !(e.scales[c] > 0))
        fail("scale {} is {}, not a finite positive number", c, e.scales[c]);
      if (e.zero_points[c] < 0 || e.zero_points[c] > max_index(e.bits))
        fail("zero point {} is {}, outside [0, {}]", c, e.zero_points[c], max_index(e.bits));
    }
  } else if (e.kind == Encoding::kmeans) {
    const size_t k = size_t{1} << e.bits;
    if (e.codebook.size() != k)
      fail("codebook has {} centroids, but {} bits need {}", e.codebook.size(), e.bits, k);
    for (size_t j = 0; j < k; ++j)
      if (!std::isfinite(e.codebook[j])) fail("centroid {} is {}, not finite", j, e.codebook[j]);
  }
}

Tensor decode(const Shape& shape, const WeightEncoding& e, const uint8_t* data, uint64_t bytes,
              DType dtype) {
  validate(shape, e, bytes);
  if (e.kind == Encoding::sparse) {
    Tensor out = decode_sparse(std::span<const uint8_t>(data, static_cast<size_t>(bytes)), shape,
                               "encoded weights");
    if (out.dtype() != dtype)
      fail("sparse data holds {} values, but the tensor is {}", dtype_name(out.dtype()),
           dtype_name(dtype));
    return out;
  }
  if (dtype != DType::f32)
    fail("{} data decodes to f32, but the tensor is {}", encoding_name(e.kind), dtype_name(dtype));
  Tensor out(DType::f32, shape);
  float* y = out.data<float>();
  const auto count = static_cast<uint64_t>(out.numel());
  if (e.kind == Encoding::f16 || e.kind == Encoding::bf16) {
    float (*convert)(uint16_t) = e.kind == Encoding::f16 ? half_to_float : bf16_to_float;
    for (uint64_t i = 0; i < count; ++i)
      y[i] = convert(static_cast<uint16_t>(data[2 * i] | (data[2 * i + 1] << 8)));
    return out;
  }
  const std::vector<uint8_t> q = unpack(data, count, e.bits);
  if (e.kind == Encoding::binary || e.kind == Encoding::ternary) {
    const auto channels = static_cast<uint64_t>(shape.back());
    for (uint64_t i = 0; i < count; ++i) {
      const float scale = e.scales[i % channels];
      if (q[i] == 3) fail("ternary element {} has code 3 (only 0, 1 and 2 are defined)", i);
      y[i] = e.kind == Encoding::binary ? (q[i] ? scale : -scale)
                                        : (q[i] == 0 ? 0.0f : q[i] == 1 ? scale : -scale);
    }
    return out;
  }
  if (e.kind == Encoding::kmeans) {
    for (uint64_t i = 0; i < count; ++i) y[i] = e.codebook[q[i]];
    return out;
  }
  const ChannelGeometry g = geometry(shape, e.axis);
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t c = 0; c < g.channels; ++c) {
      const int64_t start = (o * g.channels + c) * g.inner;
      const float scale = e.scales[static_cast<size_t>(c)];
      const int32_t zero = e.zero_points[static_cast<size_t>(c)];
      for (int64_t i = start; i < start + g.inner; ++i)
        y[i] = static_cast<float>(q[static_cast<size_t>(i)] - zero) * scale;
    }
  return out;
}

uint16_t float_to_half(float value) {
  const auto x = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // infinity, or NaN kept quiet with its top payload bits
    return static_cast<uint16_t>(sign | 0x7c00u |
                                 (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds up
  uint32_t half, rest, halfway;
  if (abs >= 0x38800000u) {  // normal half: rebias the exponent, keep 10 mantissa bits
    half = ((abs >> 23) - 112u) << 10 | ((abs >> 13) & 0x3ffu);
    rest = abs & 0x1fffu;
    halfway = 0x1000u;
  } else {  // subnormal half: units of 2^-24
    const uint32_t shift = 126u - (abs >> 23);
    if (shift > 24) return sign;  // below 2^-25: rounds to zero
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    half = mantissa >> shift;
    rest = mantissa & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
  }
  // A carry out of the mantissa correctly bumps the exponent.
  if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float half_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | (exponent + 112u) << 23 | (mantissa << 13));
}

uint16_t float_to_bf16(float value) {
  const auto x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  // Adding 0x7fff plus the kept lowest bit rounds to nearest, ties to even; a carry correctly
  // bumps the exponent (to infinity above bf16's largest finite value).
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bf16_to_float(uint16_t value) { return std::bit_cast<float>(static_cast<uint32_t>(value) << 16); }

}  // namespace sf::quant
