#include "kernels/binary/binary_kernels.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "codec/binary_weights.h"
#include "kernels/binary/bit_gemm.h"
#include "kernels/register.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf {

namespace binary {

namespace {

bool is_conv(const Node& node) {
  return node.op == op_names::kConv2D || node.op == op_names::kFusedConv2D;
}

class BinaryLayerKernel : public Kernel {
 public:
  BinaryLayerKernel(const KernelSpec& spec, bool reference)
      : reference_(reference),
        conv_(is_conv(spec.node)),
        has_bias_(spec.inputs.size() > 2),
        activation_(activation_of(spec.node)),
        x_shape_(spec.inputs[0].shape),
        w_shape_(spec.inputs[1].shape) {
    // Weights that turn out not binary go to the next kernel; under binary_reference, to the
    // reference kernel, so that forcing it on a whole model runs its float layers too.
    dense_ = reference_ ? KernelRegistry::global().select(spec, "reference").create(spec)
                        : KernelRegistry::global().select_below(spec, kPriority).create(spec);
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
      if (reference_)
        xnor_gemm_reference(bits_.data(), rows, *packed_, int_dot_.data());
      else
        xnor_gemm(bits_.data(), rows, *packed_, int_dot_.data());
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
    if (!xnor_) return reference_ ? kind + "signed_sum" : "float_inputs:" + dense_->running_impl();
    return kind + "xnor_" + (reference_ ? "reference" : xnor_gemm_impl());
  }

 private:
  void decide(const Tensor& weights) {
    decided_for_ = weights.raw();
    packed_.reset();
    const std::optional<quant::SignedLevels> levels = quant::signed_levels(weights);
    if (!levels) return;
    const int64_t n = w_shape_.back();
    packed_ = pack_weights(*levels, weights.numel() / n, n);
    if (conv_) border_corrections(*levels);
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
            const int64_t iy = y * geometry_.h.stride - geometry_.h.pad_before + i * geometry_.h.dilation;
            const int64_t ix = xo * geometry_.w.stride - geometry_.w.pad_before + j * geometry_.w.dilation;
            if (iy >= 0 && iy < h && ix >= 0 && ix < w) continue;
            for (int64_t o = 0; o < n; ++o)
              border_[static_cast<size_t>((y * ow + xo) * n + o)] +=
                  tap_sum[static_cast<size_t>((i * kw + j) * n + o)];
          }
  }

  // Packs the rows when they are all signs (xnor_), else leaves them to the float path.
  int64_t matmul_rows(const Tensor& x) {
    const int64_t rows = x.dim(0);
    bits_.resize(static_cast<size_t>(rows * packed_->words));
    xnor_ = pack_signs(x.data<float>(), rows, packed_->k, packed_->words, bits_.data());
    return rows;
  }

  // Lays the conv's input out as one row per output pixel (tap-major, then input channels):
  // packed bits for XNOR, floats otherwise. Returns the number of rows.
  int64_t conv_rows(const Tensor& x) {
    const int64_t batch = x.dim(0), h = x.dim(1), w = x.dim(2), in = x.dim(3);
    const int64_t rows = batch * geometry_.h.out * geometry_.w.out;
    // An NHWC image row is one run of w * in floats, packed as one bit stream.
    const int64_t row_bits = w * in, row_words = words_for(row_bits);
    image_rows_.resize(static_cast<size_t>(batch * h * row_words));
    xnor_ = pack_signs(x.data<float>(), batch * h, row_bits, row_words, image_rows_.data());
    if (xnor_)
      pack_columns(batch, h, w, in);
    else
      float_columns(x);
    return rows;
  }

  void pack_columns(int64_t batch, int64_t h, int64_t w, int64_t in) {
    const int64_t kh = w_shape_[0], kw = w_shape_[1];
    const Window1D& gh = geometry_.h;
    const Window1D& gw = geometry_.w;
    const int64_t words = packed_->words;
    // Each image row again with its left and right padding as zero bits, and one word more, so
    // that a window's taps in a row are one range of bits (kw * in of them when not dilated).
    const int64_t pad_left = gw.pad_before;
    const int64_t pad_right =
        std::max<int64_t>(0, (gw.out - 1) * gw.stride + (kw - 1) * gw.dilation - pad_left - (w - 1));
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
#pragma omp parallel for collapse(2) schedule(static) if (batch * gh.out * gw.out * words >= (1 << 12))
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t y = 0; y < gh.out; ++y)
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

  void float_columns(const Tensor& x) {
    const int64_t batch = x.dim(0), h = x.dim(1), w = x.dim(2), in = x.dim(3);
    const int64_t kh = w_shape_[0], kw = w_shape_[1];
    const int64_t oh = geometry_.h.out, ow = geometry_.w.out;
    const int64_t rows = batch * oh * ow, k = kh * kw * in;
    const float* xp = x.data<float>();
    columns_.assign(static_cast<size_t>(rows * k), 0.0f);
#pragma omp parallel for collapse(2) schedule(static) if (rows * k >= (1 << 15))
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xo = 0; xo < ow; ++xo) {
          const int64_t row = (b * oh + y) * ow + xo;
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t iy = y * geometry_.h.stride - geometry_.h.pad_before + i * geometry_.h.dilation;
              const int64_t ix = xo * geometry_.w.stride - geometry_.w.pad_before + j * geometry_.w.dilation;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              const int64_t pixel = (b * h + iy) * w + ix;
              std::copy(xp + pixel * in, xp + (pixel + 1) * in, columns_.data() + row * k + (i * kw + j) * in);
            }
        }
  }

  // The products (rows x n, scales not applied) -> outputs: border correction, scale, bias,
  // activation.
  void finish(KernelContext& ctx, int64_t rows) {
    const int64_t n = packed_->n;
    const float* bias = has_bias_ ? ctx.inputs[2].data<float>() : zeros(n);
    const float* scale = packed_->scales.data();
    float* y = ctx.outputs[0].data<float>();
    const float lo = activation_ == Activation::None ? -std::numeric_limits<float>::infinity() : 0.0f;
    const float hi = activation_ == Activation::Relu6 ? 6.0f : std::numeric_limits<float>::infinity();
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
  bool has_bias_;
  Activation activation_;
  Shape x_shape_, w_shape_;
  Window2D geometry_;
  std::unique_ptr<Kernel> dense_;
  const void* decided_for_ = nullptr;
  std::optional<PackedWeights> packed_;
  bool xnor_ = false;
  std::vector<uint64_t> image_rows_, streams_, bits_;
  std::vector<int32_t> int_dot_, border_;
  std::vector<float> columns_, dot_, no_bias_;
};

bool accepts(const KernelSpec& spec) {
  if (!spec.input_is_constant(1)) return false;
  for (const TensorType& t : spec.inputs)
    if (t.dtype != DType::f32 || num_elements(t.shape) == 0) return false;
  const Shape& x = spec.inputs[0].shape;
  const Shape& w = spec.inputs[1].shape;
  if (is_conv(spec.node))
    return x.size() == 4 && w.size() == 4 && spec.node.attrs.get_int("groups") == 1 &&
           w[2] == x[3];
  return x.size() == 2 && w.size() == 2 && !spec.node.attrs.get_bool("transpose_a") &&
         !spec.node.attrs.get_bool("transpose_b");
}

KernelDef layer_kernel(const char* op, const char* impl, bool reference, int priority) {
  KernelDef def;
  def.op = op;
  def.impl = impl;
  def.priority = priority;
  def.accepts = accepts;
  def.create = [reference](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<BinaryLayerKernel>(spec, reference);
  };
  return def;
}

}  // namespace

}  // namespace binary

void register_binary_kernels(KernelRegistry& registry) {
  for (const char* op : {op_names::kConv2D, op_names::kFusedConv2D, op_names::kMatMul,
                         op_names::kFusedMatMul}) {
    registry.add(binary::layer_kernel(op, "binary", false, binary::kPriority));
    registry.add(binary::layer_kernel(op, "binary_reference", true, binary::kOnlyWhenAskedPriority));
  }
}

}  // namespace sf
