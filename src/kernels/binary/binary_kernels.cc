#include "kernels/binary/binary_kernels.h"

#include <algorithm>
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

// Every value is -1 or +1.
bool all_signs(const float* x, int64_t n) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= (x[i] == 1.0f) | (x[i] == -1.0f);
  return ok;
}

// Rows of `k` signs packed into `words` words each (bit set for +1).
void pack_sign_rows(const float* x, int64_t rows, int64_t k, int64_t words, uint64_t* out) {
  std::fill(out, out + rows * words, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i)
      out[r * words + i / 64] |= static_cast<uint64_t>(x[r * k + i] > 0.0f) << (i % 64);
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
    xnor_ = all_signs(x.data<float>(), x.numel());
    const int64_t rows = conv_ ? conv_rows(x) : matmul_rows(x);
    dot_.resize(static_cast<size_t>(rows * packed_->n));
    if (xnor_) {
      if (reference_)
        xnor_gemm_reference(bits_.data(), rows, *packed_, int_dot_.data());
      else
        xnor_gemm(bits_.data(), rows, *packed_, int_dot_.data());
      for (size_t i = 0; i < dot_.size(); ++i) dot_[i] = static_cast<float>(int_dot_[i]);
    } else {
      signed_sum_gemm(conv_ ? columns_.data() : x.data<float>(), rows, *packed_, dot_.data());
    }
    finish(ctx, rows);
  }

  std::string running_impl() const override {
    if (!decided_for_) return "";
    if (!packed_) return dense_->running_impl();  // not a binary layer: what it ran, as is
    // The profile prefixes the registered impl: "binary:xnor_avx512", "binary:ternary_signed_sum".
    const std::string kind = packed_->ternary ? "ternary_" : "";
    if (!xnor_) return kind + "signed_sum";  // float inputs summed by sign (BinaryConnect)
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
    if (conv_) tap_sums(*levels);
  }

  // Per filter tap and output channel, the sum of the levels over input channels: what a
  // zero-padded tap's bits (read as -1) took away, added back for rows at the border.
  void tap_sums(const quant::SignedLevels& levels) {
    const int64_t taps = w_shape_[0] * w_shape_[1], in = w_shape_[2], n = w_shape_[3];
    tap_sum_.assign(static_cast<size_t>(taps * n), 0);
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t c = 0; c < in; ++c)
        for (int64_t o = 0; o < n; ++o)
          tap_sum_[static_cast<size_t>(t * n + o)] +=
              levels.levels[static_cast<size_t>((t * in + c) * n + o)];
  }

  int64_t matmul_rows(const Tensor& x) {
    const int64_t rows = x.dim(0);
    if (xnor_) {
      bits_.resize(static_cast<size_t>(rows * packed_->words));
      pack_sign_rows(x.data<float>(), rows, packed_->k, packed_->words, bits_.data());
      int_dot_.resize(static_cast<size_t>(rows * packed_->n));
    }
    return rows;
  }

  // Lays the conv's input out as one row per output pixel (tap-major, then input channels):
  // packed bits for XNOR, floats otherwise. Returns the number of rows.
  int64_t conv_rows(const Tensor& x) {
    const int64_t batch = x.dim(0), h = x.dim(1), w = x.dim(2), in = x.dim(3);
    const int64_t kh = w_shape_[0], kw = w_shape_[1], n = w_shape_[3];
    const int64_t oh = geometry_.h.out, ow = geometry_.w.out;
    const int64_t rows = batch * oh * ow, k = kh * kw * in, words = words_for(k);
    const float* xp = x.data<float>();
    if (xnor_) {
      const int64_t pixel_words = words_for(in);
      pixel_bits_.resize(static_cast<size_t>(batch * h * w * pixel_words));
      pack_sign_rows(xp, batch * h * w, in, pixel_words, pixel_bits_.data());
      bits_.assign(static_cast<size_t>(rows * words), 0);
      int_dot_.resize(static_cast<size_t>(rows * n));
      border_.assign(static_cast<size_t>(rows * n), 0);
    } else {
      columns_.assign(static_cast<size_t>(rows * k), 0.0f);
    }
#pragma omp parallel for collapse(2) schedule(static) if (rows * k >= (1 << 15))
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xo = 0; xo < ow; ++xo) {
          const int64_t row = (b * oh + y) * ow + xo;
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t tap = i * kw + j;
              const int64_t iy = y * geometry_.h.stride - geometry_.h.pad_before + i * geometry_.h.dilation;
              const int64_t ix = xo * geometry_.w.stride - geometry_.w.pad_before + j * geometry_.w.dilation;
              const bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
              const int64_t pixel = (b * h + iy) * w + ix;
              if (!xnor_) {
                if (inside)
                  std::copy(xp + pixel * in, xp + (pixel + 1) * in,
                            columns_.data() + row * k + tap * in);
              } else if (inside) {
                copy_bits(bits_.data() + row * words, tap * in,
                          pixel_bits_.data() + pixel * words_for(in), in);
              } else {
                for (int64_t o = 0; o < n; ++o)
                  border_[static_cast<size_t>(row * n + o)] += tap_sum_[static_cast<size_t>(tap * n + o)];
              }
            }
        }
    return rows;
  }

  // dot_ (rows x n, scales not applied) -> outputs: scale, border correction, bias, activation.
  void finish(KernelContext& ctx, int64_t rows) {
    const int64_t n = packed_->n;
    const float* bias = has_bias_ ? ctx.inputs[2].data<float>() : nullptr;
    float* y = ctx.outputs[0].data<float>();
    const bool correct = conv_ && xnor_;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < n; ++o) {
        const auto at = static_cast<size_t>(r * n + o);
        const float d = correct ? static_cast<float>(int_dot_[at] + border_[at]) : dot_[at];
        float v = d * packed_->scales[static_cast<size_t>(o)] + (bias ? bias[o] : 0.0f);
        if (activation_ != Activation::None) v = std::max(v, 0.0f);
        if (activation_ == Activation::Relu6) v = std::min(v, 6.0f);
        y[at] = v;
      }
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
  std::vector<int32_t> tap_sum_;
  bool xnor_ = false;
  std::vector<uint64_t> pixel_bits_, bits_;
  std::vector<int32_t> int_dot_, border_;
  std::vector<float> columns_, dot_;
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
