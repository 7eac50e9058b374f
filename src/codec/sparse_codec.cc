#include "codec/sparse_codec.h"

#include <cmath>
#include <cstring>

#include "codec/huffman.h"
#include "core/error.h"
#include "codec/weight_codec.h"

namespace sf {

namespace {

constexpr char kMagic[4] = {'S', 'F', 'S', 'P'};

// Bit packing as in codec/weight_codec.h: element k occupies stream bits
// [k * bits, (k + 1) * bits), stream bit j is bit (j % 8) of byte j / 8.
std::vector<uint8_t> pack(const std::vector<uint32_t>& symbols, int bits) {
  std::vector<uint8_t> out(static_cast<size_t>(quant::packed_bytes(symbols.size(), bits)), 0);
  uint64_t bit = 0;
  for (uint32_t s : symbols)
    for (int i = 0; i < bits; ++i, ++bit)
      if ((s >> i) & 1u) out[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
  return out;
}

std::vector<uint32_t> unpack(std::span<const uint8_t> data, uint64_t count, int bits) {
  std::vector<uint32_t> out(static_cast<size_t>(count), 0);
  uint64_t bit = 0;
  for (uint64_t k = 0; k < count; ++k)
    for (int i = 0; i < bits; ++i, ++bit)
      out[k] |= static_cast<uint32_t>((data[bit / 8] >> (bit % 8)) & 1u) << i;
  return out;
}

template <typename T>
void put(std::vector<uint8_t>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

void put_bytes(std::vector<uint8_t>& out, std::span<const uint8_t> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

std::vector<uint64_t> histogram(const std::vector<uint32_t>& symbols, size_t alphabet) {
  std::vector<uint64_t> counts(alphabet, 0);
  for (uint32_t s : symbols) ++counts[s];
  return counts;
}

class Reader {
 public:
  Reader(std::span<const uint8_t> data, const std::string& what) : data_(data), what_(what) {}
  template <typename T>
  T get(const char* field) {
    T value;
    std::memcpy(&value, take(sizeof(T), field).data(), sizeof(T));
    return value;
  }
  std::span<const uint8_t> take(uint64_t n, const char* field) {
    if (n > data_.size() - pos_)
      fail("{}: sparse data ends inside its {} ({} bytes needed, {} left)", what_, field, n,
           data_.size() - pos_);
    std::span<const uint8_t> out = data_.subspan(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return out;
  }
  size_t left() const { return data_.size() - pos_; }

 private:
  std::span<const uint8_t> data_;
  const std::string& what_;
  size_t pos_ = 0;
};

// The header byte after the huffman flag: what the values are (0 in files written before int8
// values existed, so those read as f32).
enum ValueType : uint8_t { kF32Values = 0, kI8Values = 1 };

struct Header {
  SparseOptions options;
  DType values = DType::f32;
  uint64_t elements = 0, nonzero = 0, gap_symbols = 0;
};

Header read_header(Reader& r, const std::string& what) {
  const std::span<const uint8_t> magic = r.take(4, "magic");
  if (std::memcmp(magic.data(), kMagic, 4) != 0) fail("{}: sparse data has no SFSP magic", what);
  Header h;
  h.options.index_bits = r.get<uint8_t>("index bits");
  h.options.value_bits = r.get<uint8_t>("value bits");
  const uint8_t huffman = r.get<uint8_t>("huffman flag");
  const uint8_t value_type = r.get<uint8_t>("value type");
  if (h.options.index_bits < 2 || h.options.index_bits > 12)
    fail("{}: sparse index bits {} outside [2, 12]", what, h.options.index_bits);
  if (h.options.value_bits != 0 && (h.options.value_bits < 2 || h.options.value_bits > 8))
    fail("{}: sparse value bits {} must be 0 (f32) or in [2, 8]", what, h.options.value_bits);
  if (huffman > 1) fail("{}: sparse huffman flag {} must be 0 or 1", what, huffman);
  h.options.huffman = huffman == 1;
  if (value_type != kF32Values && value_type != kI8Values)
    fail("{}: sparse value type {} must be 0 (f32) or 1 (i8)", what, value_type);
  h.values = value_type == kI8Values ? DType::i8 : DType::f32;
  if (h.values == DType::i8 && h.options.value_bits != 0)
    fail("{}: sparse i8 values cannot have a codebook ({} value bits)", what,
         h.options.value_bits);
  h.elements = r.get<uint64_t>("element count");
  h.nonzero = r.get<uint64_t>("nonzero count");
  h.gap_symbols = r.get<uint64_t>("gap count");
  return h;
}

}  // namespace

std::vector<uint8_t> encode_sparse(const Tensor& dense, const SparseOptions& o,
                                   SparseSizes* sizes) {
  SF_CHECK(dense.dtype() == DType::f32 || dense.dtype() == DType::i8,
           "sparse encoding needs an f32 or i8 tensor, got {}", dtype_name(dense.dtype()));
  const bool int8 = dense.dtype() == DType::i8;
  SF_CHECK(!int8 || o.value_bits == 0, "sparse i8 values are stored as they are (value bits 0)");
  SF_CHECK(o.index_bits >= 2 && o.index_bits <= 12, "sparse index bits {} outside [2, 12]",
           o.index_bits);
  SF_CHECK(o.value_bits == 0 || (o.value_bits >= 2 && o.value_bits <= 8),
           "sparse value bits {} must be 0 (f32) or in [2, 8]", o.value_bits);
  const uint32_t escape = (1u << o.index_bits) - 1;
  std::vector<uint32_t> gaps;
  std::vector<float> values;
  std::vector<int8_t> int8_values;
  uint64_t next = 0;
  for (int64_t p = 0; p < dense.numel(); ++p) {
    if (int8 ? dense.data<int8_t>()[p] == 0 : dense.data<float>()[p] == 0.0f) continue;
    uint64_t gap = static_cast<uint64_t>(p) - next;
    for (; gap >= escape; gap -= escape) gaps.push_back(escape);
    gaps.push_back(static_cast<uint32_t>(gap));
    if (int8)
      int8_values.push_back(dense.data<int8_t>()[p]);
    else
      values.push_back(dense.data<float>()[p]);
    next = static_cast<uint64_t>(p) + 1;
  }
  const uint64_t nonzero = int8 ? int8_values.size() : values.size();

  std::vector<uint8_t> out(kMagic, kMagic + 4);
  put<uint8_t>(out, static_cast<uint8_t>(o.index_bits));
  put<uint8_t>(out, static_cast<uint8_t>(o.value_bits));
  put<uint8_t>(out, o.huffman ? 1 : 0);
  put<uint8_t>(out, int8 ? kI8Values : kF32Values);
  put<uint64_t>(out, static_cast<uint64_t>(dense.numel()));
  put<uint64_t>(out, nonzero);
  put<uint64_t>(out, gaps.size());

  std::vector<uint32_t> codes;  // codebook indices of the values
  if (o.value_bits > 0) {
    std::vector<float> codebook(size_t{1} << o.value_bits, 0.0f);
    if (!values.empty()) {
      Tensor nz(DType::f32, {static_cast<int64_t>(values.size())});
      std::copy(values.begin(), values.end(), nz.data<float>());
      if (o.linear) {
        const quant::EncodedTensor q = quant::encode_linear(nz, o.value_bits);
        for (size_t level = 0; level < codebook.size(); ++level)
          codebook[level] = q.encoding.scales[0] *
                            static_cast<float>(static_cast<int32_t>(level) - q.encoding.zero_points[0]);
        codes = unpack(q.data, values.size(), o.value_bits);
      } else {
        const quant::EncodedTensor km = quant::encode_kmeans(nz, o.value_bits);
        codebook = km.encoding.codebook;
        codes = unpack(km.data, values.size(), o.value_bits);
      }
    }
    for (float c : codebook) put<float>(out, c);
  }
  if (o.huffman) {
    const HuffmanCode gap_code = huffman_code(histogram(gaps, size_t{1} << o.index_bits));
    const std::vector<uint8_t> gap_stream = huffman_encode(gap_code, gaps);
    HuffmanCode value_code;
    std::vector<uint8_t> value_stream;
    if (o.value_bits > 0) {
      value_code = huffman_code(histogram(codes, size_t{1} << o.value_bits));
      value_stream = huffman_encode(value_code, codes);
    }
    put_bytes(out, gap_code.lengths);
    if (o.value_bits > 0) put_bytes(out, value_code.lengths);
    put<uint64_t>(out, gap_stream.size());
    put<uint64_t>(out, value_stream.size());
    put_bytes(out, gap_stream);
    if (o.value_bits > 0) put_bytes(out, value_stream);
  } else {
    put_bytes(out, pack(gaps, o.index_bits));
    if (o.value_bits > 0) put_bytes(out, pack(codes, o.value_bits));
  }
  if (o.value_bits == 0) {
    for (float x : values) put<float>(out, x);
    for (int8_t x : int8_values) put<int8_t>(out, x);
  }
  if (sizes) *sizes = SparseSizes{static_cast<uint64_t>(dense.numel()), nonzero, gaps.size(), out.size()};
  return out;
}

Tensor decode_sparse(std::span<const uint8_t> blob, const Shape& shape, const std::string& what) {
  Reader r(blob, what);
  const Header h = read_header(r, what);
  const SparseOptions& o = h.options;
  const uint64_t elements = static_cast<uint64_t>(num_elements(shape));
  if (h.elements != elements)
    fail("{}: sparse data holds {} elements, the tensor {} has {}", what, h.elements,
         shape_str(shape), elements);
  // Every gap symbol advances at least one position, and every value needs one.
  if (h.nonzero > elements || h.gap_symbols > elements || h.nonzero > h.gap_symbols)
    fail("{}: sparse counts ({} nonzero, {} gaps) do not fit {} elements", what, h.nonzero,
         h.gap_symbols, elements);
  std::vector<float> codebook;
  if (o.value_bits > 0) {
    const std::span<const uint8_t> raw = r.take((uint64_t{1} << o.value_bits) * 4, "codebook");
    codebook.resize(size_t{1} << o.value_bits);
    std::memcpy(codebook.data(), raw.data(), raw.size());
    for (float c : codebook)
      if (!std::isfinite(c)) fail("{}: sparse codebook has a non-finite centroid", what);
  }
  std::vector<uint32_t> gaps, codes;
  if (o.huffman) {
    const std::span<const uint8_t> gl = r.take(uint64_t{1} << o.index_bits, "gap code lengths");
    HuffmanCode gap_code{std::vector<uint8_t>(gl.begin(), gl.end())};
    HuffmanCode value_code;
    if (o.value_bits > 0) {
      const std::span<const uint8_t> vl = r.take(uint64_t{1} << o.value_bits, "value code lengths");
      value_code.lengths.assign(vl.begin(), vl.end());
    }
    const uint64_t gap_bytes = r.get<uint64_t>("gap stream size");
    const uint64_t value_bytes = r.get<uint64_t>("value stream size");
    gaps = huffman_decode(gap_code, r.take(gap_bytes, "gap stream"), h.gap_symbols, what + " gaps");
    if (o.value_bits > 0)
      codes = huffman_decode(value_code, r.take(value_bytes, "value stream"), h.nonzero,
                             what + " values");
    else if (value_bytes != 0)
      fail("{}: sparse f32 values cannot have a huffman stream", what);
  } else {
    gaps = unpack(r.take(quant::packed_bytes(h.gap_symbols, o.index_bits), "gap stream"),
                  h.gap_symbols, o.index_bits);
    if (o.value_bits > 0)
      codes = unpack(r.take(quant::packed_bytes(h.nonzero, o.value_bits), "value stream"),
                     h.nonzero, o.value_bits);
  }
  std::span<const uint8_t> raw_values;
  const uint64_t value_size = dtype_size(h.values);
  if (o.value_bits == 0) raw_values = r.take(h.nonzero * value_size, "values");
  if (r.left() != 0) fail("{}: sparse data has {} bytes after its values", what, r.left());

  Tensor out(h.values, shape);
  std::memset(out.raw(), 0, out.bytes());
  const uint32_t escape = (1u << o.index_bits) - 1;
  uint64_t pos = 0, k = 0;
  for (uint32_t g : gaps) {
    if (g > escape || g >= elements - std::min(pos, elements) + (g == escape ? 1 : 0))
      fail("{}: sparse gaps run past the tensor's {} elements", what, elements);
    pos += g;
    if (g == escape) continue;
    if (k >= h.nonzero) fail("{}: sparse data has more positions than its {} values", what, h.nonzero);
    if (h.values == DType::i8) {
      out.data<int8_t>()[pos++] = static_cast<int8_t>(raw_values[k]);
      ++k;
      continue;
    }
    float value;
    if (o.value_bits > 0) {
      value = codebook[codes[k]];
    } else {
      std::memcpy(&value, raw_values.data() + k * 4, 4);
      if (!std::isfinite(value)) fail("{}: sparse value {} is not finite", what, k);
    }
    out.data<float>()[pos++] = value;
    ++k;
  }
  if (k != h.nonzero) fail("{}: sparse data has {} positions for {} values", what, k, h.nonzero);
  return out;
}

std::pair<uint64_t, SparseOptions> smallest_sparse(const Tensor& w, SparseOptions o) {
  uint64_t best = UINT64_MAX;
  SparseOptions best_options = o;
  for (int index_bits = 3; index_bits <= 9; ++index_bits) {
    o.index_bits = index_bits;
    SparseSizes sizes;
    encode_sparse(w, o, &sizes);
    if (sizes.bytes < best) {
      best = sizes.bytes;
      best_options = o;
    }
  }
  return {best, best_options};
}

std::optional<quant::EncodedTensor> sparse_if_smaller(const Tensor& weights) {
  if (weights.dtype() != DType::f32 && weights.dtype() != DType::i8) return std::nullopt;
  const uint64_t value_size = dtype_size(weights.dtype());
  const uint64_t dense = weights.bytes();
  uint64_t nonzero = 0;
  const auto* bytes = static_cast<const uint8_t*>(weights.raw());
  for (int64_t i = 0; i < weights.numel(); ++i) {
    bool zero = true;
    for (uint64_t b = 0; b < value_size; ++b) zero = zero && bytes[i * value_size + b] == 0;
    // -0.0f is not all zero bytes but is stored as a zero: both decode to 0.
    if (weights.dtype() == DType::f32) zero = weights.data<float>()[i] == 0.0f;
    nonzero += !zero;
  }
  if (nonzero * value_size + kSparseHeaderBytes >= dense) return std::nullopt;  // cannot win
  const auto [best_bytes, best] = smallest_sparse(weights, SparseOptions{});
  if (best_bytes >= dense) return std::nullopt;
  return quant::EncodedTensor{.shape = weights.shape(),
                              .dtype = weights.dtype(),
                              .encoding = {.kind = quant::Encoding::sparse, .bits = 0},
                              .data = encode_sparse(weights, best)};
}

}  // namespace sf
