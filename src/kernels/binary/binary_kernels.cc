#include "kernels/binary/binary_kernels.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "codec/binary_weights.h"
#include "cpu/cpu_features.h"
#include "cpu/measured_split.h"
#include "cpu/parallel_for.h"
#include "kernels/binary/bit_conv.h"
#include "kernels/binary/bit_gemm.h"
#if defined(__x86_64__)
#include "kernels/binary/bit_conv_avx512.h"
#endif
#include "kernels/register.h"
#include "ops/binary_ops.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf {

namespace binary {

namespace {

bool is_conv(const Node& node) {
  return node.op == op_names::kConv2D || node.op == op_names::kFusedConv2D ||
         node.op == op_names::kXnorConv2D;
}

// XnorConv2D and XnorMatMul read packed sign bits (ops/binary_ops.h), not floats.
bool reads_bits(const Node& node) {
  return node.op == op_names::kXnorConv2D || node.op == op_names::kXnorMatMul;
}

// The `count` low bits of a word, 1 <= count <= 32: a packed row's bits past its channels are
// ignored, which the bit products need to be 0.
uint32_t low_bits(int64_t count) { return count >= 32 ? ~0u : (1u << count) - 1; }

// Bit-MACs from which splitting an XNOR product over the threads may pay (about 1 us of work on
// one AVX-512 core), and from which it always does (about 40 us); between them each layer times
// both ways on its first runs (cpu/measured_split.h).
constexpr double kSplitMayPay = 1 << 21;
constexpr double kSplitAlwaysPays = 1 << 26;

class BinaryLayerKernel : public Kernel {
 public:
  BinaryLayerKernel(const KernelSpec& spec, bool reference)
      : reference_(reference),
        conv_(is_conv(spec.node)),
        bits_input_(reads_bits(spec.node)),
        has_bias_(spec.inputs.size() > 2),
        activation_(activation_of(spec.node)),
        x_shape_(spec.inputs[0].shape),
        w_shape_(spec.inputs[1].shape) {
    // Weights that turn out not binary go to the next kernel; under binary_reference, to the
    // reference kernel, so that forcing it on a whole model runs its float layers too.
    // (Packed bits have only the reference kernel besides this one.)
    dense_ = reference_ || bits_input_
                 ? KernelRegistry::global().select(spec, "reference").create(spec)
                 : KernelRegistry::global().select_below(spec, kPriority).create(spec);
    // The shape of the values packed bits stand for.
    if (bits_input_ && conv_) x_shape_[3] = w_shape_[2];
    if (conv_) geometry_ = conv_window(spec.node.attrs, x_shape_, w_shape_);
  }

  void compute(KernelContext& ctx) override {
    const Tensor& weights = ctx.inputs[1];
    if (weights.raw() != decided_for_) decide(weights);
    if (!packed_) {
      dense_->compute(ctx);
      return;
    }
    const Tensor& x = ctx.inputs[0];
    if (direct_) {
      if (!direct_conv(ctx)) dense_->compute(ctx);  // float inputs: as below
      return;
    }
    const int64_t rows = conv_ ? conv_rows(x) : matmul_rows(x);
    // Float inputs (BinaryConnect): the sign-controlled sums are measured far slower than
    // oneDNN's fp32 product of the same sign * scale weights (bench/binary_bench.cc), so the
    // automatic kernel hands those to it; the reference kernel keeps them as the oracle.
    if (!xnor_ && !reference_) {
      dense_->compute(ctx);
      return;
    }
    if (xnor_) {
      int_dot_.resize(static_cast<size_t>(rows * packed_->n));
      if (reference_) {
        xnor_gemm_reference(bits_.data(), rows, *packed_, int_dot_.data());
      } else {
        const double bit_macs = static_cast<double>(rows * packed_->n * packed_->k);
        split_.run(bit_macs, kSplitMayPay, kSplitAlwaysPays, [&](bool split) {
          xnor_gemm(bits_.data(), rows, *packed_, int_dot_.data(), split);
        });
      }
    } else {
      dot_.resize(static_cast<size_t>(rows * packed_->n));
      signed_sum_gemm(conv_ ? columns_.data() : x.data<float>(), rows, *packed_, dot_.data());
    }
    finish(ctx, rows);
  }

  std::string running_impl() const override {
    if (!decided_for_) return "";
    if (!packed_) return dense_->running_impl();  // not a binary layer: what it ran, as is
    // The profile prefixes the registered impl: "binary:xnor_avx512", "binary:ternary_signed_sum".
    const std::string kind = packed_->ternary ? "ternary_" : "";
    if (!xnor_) {
      if (reference_) return kind + "signed_sum";
      const std::string dense = dense_->running_impl();
      return dense.empty() ? "float_inputs" : "float_inputs:" + dense;
    }
    return kind + "xnor_" +
           (reference_ ? "reference"
            : direct_  ? "direct_avx512"
                       : xnor_gemm_impl());
  }

 private:
  void decide(const Tensor& weights) {
    decided_for_ = weights.raw();
    packed_.reset();
    direct_ = false;
    const std::optional<quant::SignedLevels> levels = quant::signed_levels(weights);
    if (!levels) return;
    const int64_t n = w_shape_.back();
    packed_ = pack_weights(*levels, weights.numel() / n, n);
    if (!conv_) return;
    border_corrections(*levels);
    direct_ = !reference_ && !levels->ternary && direct_conv_available() &&
              direct_conv_fits(w_shape_[2]) && geometry_.h.pad_before >= 0 &&
              geometry_.w.pad_before >= 0;
    if (direct_) taps_ = pack_tap_weights(*levels, w_shape_[0] * w_shape_[1], w_shape_[2], n);
  }

  static bool direct_conv_available() {
#if defined(__x86_64__)
    return cpu_features().avx512f && cpu_features().avx512vl && cpu_features().avx512_vpopcntdq;
#else
    return false;
#endif
  }

  // The im2col-free XNOR conv (bit_conv.h), straight into the output; false when the inputs are
  // not all signs (nothing written then).
  bool direct_conv(KernelContext& ctx) {
#if defined(__x86_64__)
    const Tensor& x = ctx.inputs[0];
    const int64_t batch = x.dim(0), h = x_shape_[1], w = x_shape_[2], in = x_shape_[3];
    const Window1D& gh = geometry_.h;
    const Window1D& gw = geometry_.w;
    PackedImage image;
    image.batch = batch;
    image.dwords = dwords_for(in);
    image.pad_top = gh.pad_before;
    image.pad_left = gw.pad_before;
    image.height =
        std::max(gh.pad_before + h, (gh.out - 1) * gh.stride + (w_shape_[0] - 1) * gh.dilation + 1);
    image.width =
        std::max(gw.pad_before + w, (gw.out - 1) * gw.stride + (w_shape_[1] - 1) * gw.dilation + 1);
    // The padding is never written: zeroed once, when the buffer is made.
    const auto size = static_cast<size_t>(batch * image.height * image.width * image.dwords);
    if (image_bits_.size() != size) image_bits_.assign(size, 0);
    image.bits = image_bits_.data();
    if (bits_input_) {
      xnor_ = true;
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t iy = 0; iy < h; ++iy)
          for (int64_t px = 0; px < w; ++px) {
            const int32_t* src = x.data<int32_t>() + ((b * h + iy) * w + px) * image.dwords;
            uint32_t* dst =
                image_bits_.data() +
                ((b * image.height + image.pad_top + iy) * image.width + image.pad_left + px) *
                    image.dwords;
            for (int64_t d = 0; d < image.dwords; ++d)
              dst[d] = static_cast<uint32_t>(src[d]) & low_bits(in - d * 32);
          }
    } else {
      xnor_ = pack_image_avx512(x.data<float>(), h, w, in, image, image_bits_.data());
    }
    if (!xnor_) return false;
    const DirectConvWindow window{gh.out,    gw.out,    w_shape_[0], w_shape_[1],
                                  gh.stride, gw.stride, gh.dilation, gw.dilation};
    const int64_t n = packed_->n;
    const ConvEpilogue epilogue{border_.data(), packed_->scales.data(),
                                has_bias_ ? ctx.inputs[2].data<float>() : zeros(n), lowest(),
                                highest()};
    const double bit_macs = static_cast<double>(batch * gh.out * gw.out * n * taps_.taps * in);
    split_.run(bit_macs, kSplitMayPay, kSplitAlwaysPays, [&](bool split) {
      xnor_conv_avx512(image, window, taps_, epilogue, ctx.outputs[0].data<float>(), split);
    });
    return true;
#else
    (void)ctx;
    return false;
#endif
  }

  // The activation as a clamp.
  float lowest() const {
    return activation_ == Activation::None ? -std::numeric_limits<float>::infinity() : 0.0f;
  }
  float highest() const {
    return activation_ == Activation::Relu6 ? 6.0f : std::numeric_limits<float>::infinity();
  }

  // For each output pixel and channel, what its zero-padded taps took away: their bits are 0,
  // read as -1, so each contributed minus the sum of its levels over the input channels. The
  // XNOR path adds this back (padding counts as 0). It depends on the geometry and the weights
  // only, so it is computed once, for one image.
  void border_corrections(const quant::SignedLevels& levels) {
    const int64_t kh = w_shape_[0], kw = w_shape_[1], in = w_shape_[2], n = w_shape_[3];
    const int64_t h = x_shape_[1], w = x_shape_[2];
    const int64_t oh = geometry_.h.out, ow = geometry_.w.out;
    std::vector<int32_t> tap_sum(static_cast<size_t>(kh * kw * n), 0);
    for (int64_t t = 0; t < kh * kw; ++t)
      for (int64_t c = 0; c < in; ++c)
        for (int64_t o = 0; o < n; ++o)
          tap_sum[static_cast<size_t>(t * n + o)] +=
              levels.levels[static_cast<size_t>((t * in + c) * n + o)];
    border_.assign(static_cast<size_t>(oh * ow * n), 0);
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t xo = 0; xo < ow; ++xo)
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t iy =
                y * geometry_.h.stride - geometry_.h.pad_before + i * geometry_.h.dilation;
            const int64_t ix =
                xo * geometry_.w.stride - geometry_.w.pad_before + j * geometry_.w.dilation;
            if (iy >= 0 && iy < h && ix >= 0 && ix < w) continue;
            for (int64_t o = 0; o < n; ++o)
              border_[static_cast<size_t>((y * ow + xo) * n + o)] +=
                  tap_sum[static_cast<size_t>((i * kw + j) * n + o)];
          }
  }

  // Packs the rows when they are all signs (xnor_), else leaves them to the float path.
  int64_t matmul_rows(const Tensor& x) {
    const int64_t rows = x.dim(0), k = packed_->k, words = packed_->words;
    bits_.resize(static_cast<size_t>(rows * words));
    if (!bits_input_) {
      xnor_ = pack_signs(x.data<float>(), rows, k, words, bits_.data());
      return rows;
    }
    // Two 32-bit elements to a word, the bits past k dropped.
    xnor_ = true;
    const int64_t elements = sign_bit_elements(k);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t* row = x.data<int32_t>() + r * elements;
      for (int64_t i = 0; i < words; ++i) {
        auto element = [&](int64_t e) -> uint64_t {
          return e < elements ? static_cast<uint32_t>(row[e]) & low_bits(k - e * 32) : 0;
        };
        bits_[static_cast<size_t>(r * words + i)] = element(2 * i) | element(2 * i + 1) << 32;
      }
    }
    return rows;
  }

  // Lays the conv's input out as one row per output pixel (tap-major, then input channels):
  // packed bits for XNOR, floats otherwise. Returns the number of rows.
  int64_t conv_rows(const Tensor& x) {
    const int64_t batch = x.dim(0), h = x_shape_[1], w = x_shape_[2], in = x_shape_[3];
    const int64_t rows = batch * geometry_.h.out * geometry_.w.out;
    // An NHWC image row is one run of w * in floats, packed as one bit stream.
    const int64_t row_bits = w * in, row_words = words_for(row_bits);
    image_rows_.resize(static_cast<size_t>(batch * h * row_words));
    if (bits_input_)
      image_rows_from_bits(x, batch * h, w, in, row_words);
    else
      xnor_ = pack_signs(x.data<float>(), batch * h, row_bits, row_words, image_rows_.data());
    if (xnor_)
      pack_columns(batch, h, w, in);
    else
      float_columns(x);
    return rows;
  }

  // Packed bits, pixel after pixel, into the image rows' bit streams.
  void image_rows_from_bits(const Tensor& x, int64_t image_rows, int64_t w, int64_t in,
                            int64_t row_words) {
    xnor_ = true;
    const int64_t elements = sign_bit_elements(in);
    for (int64_t r = 0; r < image_rows; ++r) {
      BitAppender row(image_rows_.data() + r * row_words);
      for (int64_t px = 0; px < w; ++px)
        for (int64_t e = 0; e < elements; ++e) {
          const int64_t bits = std::min<int64_t>(32, in - e * 32);
          row.append(static_cast<uint32_t>(x.data<int32_t>()[(r * w + px) * elements + e]) &
                         low_bits(bits),
                     static_cast<int>(bits));
        }
      row.finish();
    }
  }

  void pack_columns(int64_t batch, int64_t h, int64_t w, int64_t in) {
    const int64_t kh = w_shape_[0], kw = w_shape_[1];
    const Window1D& gh = geometry_.h;
    const Window1D& gw = geometry_.w;
    const int64_t words = packed_->words;
    // Each image row again with its left and right padding as zero bits, and one word more, so
    // that a window's taps in a row are one range of bits (kw * in of them when not dilated).
    const int64_t pad_left = gw.pad_before;
    const int64_t pad_right = std::max<int64_t>(
        0, (gw.out - 1) * gw.stride + (kw - 1) * gw.dilation - pad_left - (w - 1));
    const int64_t row_bits = w * in, row_words = words_for(row_bits);
    const int64_t stream_words = words_for((pad_left + w + pad_right) * in) + 1;
    streams_.resize(static_cast<size_t>(batch * h * stream_words));
    for (int64_t r = 0; r < batch * h; ++r) {
      BitAppender stream(streams_.data() + r * stream_words);
      stream.append_zeros(pad_left * in);
      stream.append_range(image_rows_.data() + r * row_words, 0, row_bits);
      stream.append_zeros(stream_words * 64 - (pad_left * in + row_bits));
      stream.finish();
    }
    bits_.resize(static_cast<size_t>(batch * gh.out * gw.out * words));
    parallel_for(
        0, batch * gh.out, batch * gh.out * gw.out * words >= (1 << 12),
        [&](int64_t share_begin, int64_t share_end) {
          for (int64_t flat = share_begin; flat < share_end; ++flat) {
            const int64_t b = flat / gh.out;
            const int64_t y = flat % gh.out;
            for (int64_t xo = 0; xo < gw.out; ++xo) {
              BitAppender packed_row(bits_.data() + ((b * gh.out + y) * gw.out + xo) * words);
              for (int64_t i = 0; i < kh; ++i) {
                const int64_t iy = y * gh.stride - gh.pad_before + i * gh.dilation;
                if (iy < 0 || iy >= h) {
                  packed_row.append_zeros(kw * in);
                  continue;
                }
                const uint64_t* stream = streams_.data() + (b * h + iy) * stream_words;
                const int64_t left = xo * gw.stride;  // in the padded row
                if (gw.dilation == 1) {
                  packed_row.append_range(stream, left * in, kw * in);
                } else {
                  for (int64_t j = 0; j < kw; ++j)
                    packed_row.append_range(stream, (left + j * gw.dilation) * in, in);
                }
              }
              packed_row.finish();
            }
          }
        });
  }

  void float_columns(const Tensor& x) {
    const int64_t batch = x.dim(0), h = x.dim(1), w = x.dim(2), in = x.dim(3);
    const int64_t kh = w_shape_[0], kw = w_shape_[1];
    const int64_t oh = geometry_.h.out, ow = geometry_.w.out;
    const int64_t rows = batch * oh * ow, k = kh * kw * in;
    const float* xp = x.data<float>();
    columns_.assign(static_cast<size_t>(rows * k), 0.0f);
    parallel_for(0, batch * oh, rows * k >= (1 << 15), [&](int64_t share_begin, int64_t share_end) {
      for (int64_t flat = share_begin; flat < share_end; ++flat) {
        const int64_t b = flat / oh;
        const int64_t y = flat % oh;
        for (int64_t xo = 0; xo < ow; ++xo) {
          const int64_t row = (b * oh + y) * ow + xo;
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t iy =
                  y * geometry_.h.stride - geometry_.h.pad_before + i * geometry_.h.dilation;
              const int64_t ix =
                  xo * geometry_.w.stride - geometry_.w.pad_before + j * geometry_.w.dilation;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              const int64_t pixel = (b * h + iy) * w + ix;
              std::copy(xp + pixel * in, xp + (pixel + 1) * in,
                        columns_.data() + row * k + (i * kw + j) * in);
            }
        }
      }
    });
  }

  // The products (rows x n, scales not applied) -> outputs: border correction, scale, bias,
  // activation.
  void finish(KernelContext& ctx, int64_t rows) {
    const int64_t n = packed_->n;
    const float* bias = has_bias_ ? ctx.inputs[2].data<float>() : zeros(n);
    const float* scale = packed_->scales.data();
    float* y = ctx.outputs[0].data<float>();
    const float lo = lowest(), hi = highest();
    const int64_t pixels = conv_ ? geometry_.h.out * geometry_.w.out : 1;
    for (int64_t r = 0; r < rows; ++r) {
      float* out = y + r * n;
      const int32_t* d = int_dot_.data() + r * n;
      if (!xnor_) {
        const float* f = dot_.data() + r * n;
        for (int64_t o = 0; o < n; ++o) out[o] = std::clamp(f[o] * scale[o] + bias[o], lo, hi);
      } else if (conv_) {
        const int32_t* border = border_.data() + (r % pixels) * n;
        for (int64_t o = 0; o < n; ++o)
          out[o] = std::clamp(static_cast<float>(d[o] + border[o]) * scale[o] + bias[o], lo, hi);
      } else {
        for (int64_t o = 0; o < n; ++o)
          out[o] = std::clamp(static_cast<float>(d[o]) * scale[o] + bias[o], lo, hi);
      }
    }
  }

  const float* zeros(int64_t n) {
    no_bias_.resize(static_cast<size_t>(n), 0.0f);
    return no_bias_.data();
  }

  bool reference_;
  bool conv_;
  bool bits_input_;
  bool has_bias_;
  Activation activation_;
  Shape x_shape_, w_shape_;
  Window2D geometry_;
  std::unique_ptr<Kernel> dense_;
  const void* decided_for_ = nullptr;
  std::optional<PackedWeights> packed_;
  bool xnor_ = false;
  bool direct_ = false;  // binary conv weights on the im2col-free path
  MeasuredSplit split_;  // whether the XNOR product splits over the threads
  TapWeights taps_;
  std::vector<uint32_t> image_bits_;
  std::vector<uint64_t> image_rows_, streams_, bits_;
  std::vector<int32_t> int_dot_, border_;
  std::vector<float> columns_, dot_, no_bias_;
};

bool accepts(const KernelSpec& spec) {
  if (!spec.input_is_constant(1)) return false;
  const bool bits = reads_bits(spec.node);
  for (size_t i = 0; i < spec.inputs.size(); ++i)
    if (spec.inputs[i].dtype != (i == 0 && bits ? DType::i32 : DType::f32) ||
        num_elements(spec.inputs[i].shape) == 0)
      return false;
  const Shape& x = spec.inputs[0].shape;
  const Shape& w = spec.inputs[1].shape;
  if (is_conv(spec.node))
    return x.size() == 4 && w.size() == 4 && spec.node.attrs.get_int("groups") == 1 &&
           (bits || w[2] == x[3]);
  if (bits) return w.size() == 2;
  return x.size() == 2 && w.size() == 2 && !spec.node.attrs.get_bool("transpose_a") &&
         !spec.node.attrs.get_bool("transpose_b");
}

KernelDef layer_kernel(const char* op, const char* impl, bool reference, int priority) {
  KernelDef def;
  def.op = op;
  def.dtype = op == std::string(op_names::kXnorConv2D) || op == std::string(op_names::kXnorMatMul)
                  ? DType::i32
                  : DType::f32;
  def.impl = impl;
  def.priority = priority;
  def.accepts = accepts;
  def.create = [reference](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<BinaryLayerKernel>(spec, reference);
  };
  return def;
}

#if defined(__x86_64__)
bool has_vpopcntdq() {
  return cpu_features().avx512f && cpu_features().avx512vl && cpu_features().avx512_vpopcntdq;
}

void sign_bits(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t channels = x.dim(-1);
  pack_sign_dwords_avx512(x.data<float>(), x.numel() / channels, channels, dwords_for(channels),
                          reinterpret_cast<uint32_t*>(ctx.outputs[0].data<int32_t>()));
}

void max_pool_sign_bits(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  max_pool_sign_bits_avx512(x.data<float>(), x.dim(0), x.dim(1), x.dim(2), x.dim(3),
                            pool_window(ctx.node.attrs, x.shape()),
                            reinterpret_cast<uint32_t*>(ctx.outputs[0].data<int32_t>()));
}

// The packed sign producers with AVX-512 (the reference kernels elsewhere).
KernelDef sign_kernel(const char* op, void (*fn)(KernelContext&)) {
  KernelDef def = simple_kernel(op, DType::f32, "binary", fn, kPriority);
  def.accepts = [](const KernelSpec& spec) {
    return has_vpopcntdq() && num_elements(spec.inputs[0].shape) > 0;
  };
  return def;
}
#endif

}  // namespace

}  // namespace binary

void register_binary_kernels(KernelRegistry& registry) {
  for (const char* op : {op_names::kConv2D, op_names::kFusedConv2D, op_names::kMatMul,
                         op_names::kFusedMatMul, op_names::kXnorConv2D, op_names::kXnorMatMul}) {
    registry.add(binary::layer_kernel(op, "binary", false, binary::kPriority));
    registry.add(
        binary::layer_kernel(op, "binary_reference", true, binary::kOnlyWhenAskedPriority));
  }
#if defined(__x86_64__)
  registry.add(binary::sign_kernel(op_names::kSignBits, binary::sign_bits));
  registry.add(binary::sign_kernel(op_names::kMaxPoolSignBits, binary::max_pool_sign_bits));
#endif
}

}  // namespace sf
