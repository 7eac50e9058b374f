// Weight encodings for storage: an f32 tensor is encoded into fewer bytes when a model is
// written and decoded back to an ordinary f32 tensor when it is loaded, so kernels never see
// the encoded form.
//
//   linear  bits 2..8; asymmetric min/max quantization with one scale and integer zero point per
//           tensor or per channel of one axis: x ~= scale[c] * (q - zero_point[c]).
//   kmeans  bits 2..8; a codebook of 2^bits f32 centroids (1-D k-means): x ~= codebook[q].
//   f16     IEEE half precision, rounded to nearest even.
//   bf16    bfloat16 (the top 16 bits of an f32), rounded to nearest even: f32's range, 8 bits
//           of precision; `quantize --mode bf16` stores a model's weights so and runs it in bf16.
//   sparse  pruned weights: nonzeros with relative indices, values f32, i8 or codebook indices,
//           optionally Huffman-coded; the data is a self-describing blob (codec/sparse_codec.h)
//           with no parameters in the entry, validated in full when decoded.
//   binary  1 bit per element, per output channel (the last axis) one scale: bit 1 is +scale,
//           bit 0 is -scale (weights trained with `--binarize weights|xnor`; binary_weights.h).
//   ternary 2 bits per element, one scale per output channel: code 0 is 0, 1 is +scale, 2 is
//           -scale; code 3 is malformed (weights trained with `--binarize ternary`).
//
// Indices q are bit-packed little-endian with no padding between elements: element k occupies
// stream bits [k * bits, (k + 1) * bits), and stream bit j is bit (j % 8) of byte j / 8.
//
// This file is compiled into the model-file fuzzer too, so it depends on src/core only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace sf::quant {

enum class Encoding { linear, kmeans, f16, sparse, binary, ternary, bf16 };

inline constexpr int kMinBits = 2;
inline constexpr int kMaxBits = 8;
inline constexpr int kHalfBits = 16;
// Whole-tensor (not per-channel) linear quantization.
inline constexpr int kNoAxis = -1;

const char* encoding_name(Encoding encoding);
// Parses an encoding's name; false for anything else.
bool parse_encoding(const std::string& name, Encoding* encoding);
// The .sfm format version that introduced the encoding: a file holding it is written with at
// least that version, so older readers reject it by its version rather than by a name.
uint32_t first_format_version(Encoding encoding);

// Everything except the packed data: what a file stores in the tensor's JSON entry.
struct WeightEncoding {
  Encoding kind = Encoding::linear;
  int bits = 8;                      // 16 for f16 and bf16; 0 for sparse (the blob says)
  int axis = kNoAxis;                // linear: the per-channel axis, or kNoAxis; binary and
                                     // ternary: the last axis
  std::vector<float> scales;         // linear: one per channel (one when axis is kNoAxis);
                                     // binary, ternary: one per channel, >= 0
  std::vector<int32_t> zero_points;  // linear: in [0, 2^bits - 1], one per scale
  std::vector<float> codebook;       // kmeans: 2^bits centroids

  bool per_channel() const {
    return (kind == Encoding::linear && axis != kNoAxis) || kind == Encoding::binary ||
           kind == Encoding::ternary;
  }
  // Bytes the parameters take in binary form (f32 scales, one byte per zero point, f32
  // centroids): what the encoding costs beyond its data.
  size_t parameter_bytes() const;
  // "linear 8-bit per-channel (axis 3)", "kmeans 4-bit (16 centroids)", "f16".
  std::string describe() const;
};

struct EncodedTensor {
  Shape shape;               // of the tensor it decodes to
  DType dtype = DType::f32;  // of the tensor it decodes to: f32, or i8 for sparse int8 weights
  WeightEncoding encoding;
  std::vector<uint8_t> data;  // packed indices (linear, kmeans) or little-endian halves (f16, bf16)

  size_t stored_bytes() const { return data.size() + encoding.parameter_bytes(); }
};

// The parameters an encoding stores beside its data, as named typed fields of a file's tensor
// entry. The file format implements these two interfaces; each encoding decides its own fields,
// so adding an encoding touches this folder only.
class EncodingFieldReader {
 public:
  virtual ~EncodingFieldReader() = default;
  virtual bool has(const char* key) const = 0;
  // Each throws sf::Error naming the field when it is missing or has the wrong type.
  virtual int integer(const char* key) const = 0;
  virtual std::vector<int> integers(const char* key) const = 0;
  virtual std::vector<float> floats(const char* key) const = 0;
  // Throws sf::Error saying that field `key` is wrong, with the format's context.
  [[noreturn]] virtual void reject(const char* key, const std::string& why) const = 0;
};
class EncodingFieldWriter {
 public:
  virtual ~EncodingFieldWriter() = default;
  virtual void integer(const char* key, int value) = 0;
  virtual void integers(const char* key, const std::vector<int32_t>& values) = 0;
  virtual void floats(const char* key, const std::vector<float>& values) = 0;
};
// The stored fields of `encoding` (its kind is stored by the format, as encoding_name).
void write_fields(const WeightEncoding& encoding, EncodingFieldWriter& out);
// The parameters of a `kind` entry as stored; unchecked until validate().
WeightEncoding read_fields(Encoding kind, const EncodingFieldReader& in);

// Bytes that `count` indices of `bits` bits take when packed.
uint64_t packed_bytes(uint64_t count, int bits);
// The data bytes an encoding of a tensor with `count` elements must have.
uint64_t data_bytes(const WeightEncoding& encoding, uint64_t count);

// Encoders. They reject (sf::Error) bits outside [2, 8], an axis outside the tensor's rank,
// a tensor that is not f32, and non-finite values (or, for f16, values beyond half's range).
EncodedTensor encode_linear(const Tensor& tensor, int bits, int axis = kNoAxis);
// decode(encode_linear(tensor, bits, axis)) without the packing: what quantization-aware
// training's FakeQuantWeights computes, so training sees exactly the weights the file will hold.
Tensor fake_quantize_linear(const Tensor& tensor, int bits, int axis = kNoAxis);
// The same into `out` (f32, the tensor's shape).
void fake_quantize_linear(const Tensor& tensor, int bits, int axis, Tensor& out);
// Deterministic: centroids start evenly spaced over [min, max]; Lloyd iterations run until no
// assignment changes or 50 iterations; an empty cluster takes over the point farthest from
// its centroid in the cluster with the largest squared error. With at most 2^bits distinct
// values the codebook holds them exactly.
EncodedTensor encode_kmeans(const Tensor& tensor, int bits);
EncodedTensor encode_f16(const Tensor& tensor);
// Rejects values that round beyond bf16's largest finite value (within 2^-9 of f32's).
EncodedTensor encode_bf16(const Tensor& tensor);
// Tensors whose channels (last axis) hold only -scale, +scale (binary) and 0 (ternary), as
// binarized training leaves them (binary_weights.h); anything else is rejected, since these
// encodings are lossless only for such tensors. encode_binary rejects zeros in a channel whose
// scale is not 0.
EncodedTensor encode_binary(const Tensor& tensor);
EncodedTensor encode_ternary(const Tensor& tensor);
// The encoder of `kind` (`bits` is ignored by f16 and bf16, `axis` used by linear only). Sparse blobs
// take options of their own: codec/sparse_codec.h.
EncodedTensor encode(const Tensor& tensor, Encoding kind, int bits, int axis = kNoAxis);

// Checks everything decode relies on, for a tensor of `shape` whose data has `bytes` bytes:
// bits range, exact data size, axis, parameter counts, finite positive scales, zero points in
// range, finite codebook. Throws sf::Error with a message naming the field (no file prefix).
void validate(const Shape& shape, const WeightEncoding& encoding, uint64_t bytes);

// Validates, then decodes into a new tensor of `shape` and `dtype` (f32; sparse data may also
// hold i8 values). Data whose values are of another dtype is an error.
Tensor decode(const Shape& shape, const WeightEncoding& encoding, const uint8_t* data,
              uint64_t bytes, DType dtype = DType::f32);
inline Tensor decode(const EncodedTensor& encoded) {
  return decode(encoded.shape, encoded.encoding, encoded.data.data(), encoded.data.size(),
                encoded.dtype);
}

// IEEE 754 binary16 conversions (round to nearest, ties to even; NaN stays NaN).
uint16_t float_to_half(float value);
float half_to_float(uint16_t half);
// bfloat16 conversions (round to nearest, ties to even; NaN stays NaN). Every bf16 value is
// exactly an f32.
uint16_t float_to_bf16(float value);
float bf16_to_float(uint16_t value);

}  // namespace sf::quant
