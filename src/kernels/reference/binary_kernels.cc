// Reference kernels for binarized training's ops (ops/binary_ops.h); the weight math is
// codec/binary_weights.h's, which `freeze` and the binary kernels share.
#include <algorithm>
#include <cmath>
#include <limits>

#include "codec/binary_weights.h"
#include "core/activation.h"
#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/binary_ops.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf {

namespace {

void binarize_weights(KernelContext& ctx) {
  const Tensor& w = ctx.inputs[0];
  const Tensor out = ctx.node.attrs.get_string("mode") == "ternary" ? quant::ternarize_weights(w)
                                                                     : quant::binarize_weights(w);
  ctx.outputs[0].copy_from(out);
}

void binarize_activation(KernelContext& ctx) {
  const float* x = ctx.inputs[0].data<float>();
  float* y = ctx.outputs[0].data<float>();
  const int64_t n = ctx.inputs[0].numel();
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? 1.0f : -1.0f;
}

void straight_through_grad(KernelContext& ctx) {
  const float* dy = ctx.inputs[0].data<float>();
  const float* x = ctx.inputs[1].data<float>();
  float* dx = ctx.outputs[0].data<float>();
  const int64_t n = ctx.inputs[0].numel();
  for (int64_t i = 0; i < n; ++i) dx[i] = std::fabs(x[i]) <= 1.0f ? dy[i] : 0.0f;
}

// --- packed sign bits (ops/binary_ops.h), made by the execution pass for XNOR layers ---

// The +-1 value that bit c of a row of packed signs stands for.
double sign_of(const int32_t* bits, int64_t c) {
  return (static_cast<uint32_t>(bits[c / 32]) >> (c % 32)) & 1u ? 1.0 : -1.0;
}

// positive(c) for each of `channels` channels into a row of packed signs.
template <typename Positive>
void pack_row(int64_t channels, int32_t* bits, Positive positive) {
  for (int64_t e = 0; e < sign_bit_elements(channels); ++e) {
    uint32_t word = 0;
    for (int64_t c = e * 32; c < std::min(channels, e * 32 + 32); ++c)
      word |= static_cast<uint32_t>(positive(c)) << (c % 32);
    bits[e] = static_cast<int32_t>(word);
  }
}

void sign_bits(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t channels = x.dim(-1), elements = sign_bit_elements(channels);
  const int64_t rows = x.last_axis_rows();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data<float>() + r * channels;
    pack_row(channels, ctx.outputs[0].data<int32_t>() + r * elements,
             [&](int64_t c) { return row[c] > 0.0f; });
  }
}

// A window's maximum is > 0 exactly when one of its values is: MaxPool then sign.
void max_pool_sign_bits(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), channels = x.dim(3);
  const Window2D g = pool_window(ctx.node.attrs, x.shape());
  const int64_t elements = sign_bit_elements(channels);
  const float* xp = x.data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oy = 0; oy < g.h.out; ++oy)
      for (int64_t ox = 0; ox < g.w.out; ++ox)
        pack_row(channels, ctx.outputs[0].data<int32_t>() + ((b * g.h.out + oy) * g.w.out + ox) * elements,
                 [&](int64_t c) {
                   float m = -std::numeric_limits<float>::infinity();
                   for (int64_t i = 0; i < g.h.k; ++i)
                     for (int64_t j = 0; j < g.w.k; ++j) {
                       const int64_t iy = oy * g.h.stride - g.h.pad_before + i;
                       const int64_t ix = ox * g.w.stride - g.w.pad_before + j;
                       if (iy >= 0 && iy < h && ix >= 0 && ix < w)
                         m = std::max(m, xp[((b * h + iy) * w + ix) * channels + c]);
                     }
                   return m > 0.0f;
                 });
}

void xnor_conv2d(KernelContext& ctx) {
  const Tensor& bits = ctx.inputs[0];
  const Tensor& filter = ctx.inputs[1];
  const int64_t n = bits.dim(0), h = bits.dim(1), w = bits.dim(2), elements = bits.dim(3);
  const int64_t kh = filter.dim(0), kw = filter.dim(1), in = filter.dim(2), out = filter.dim(3);
  const Window2D g = conv_window(ctx.node.attrs, {n, h, w, in}, filter.shape());
  const Activation activation = activation_of(ctx.node);
  const float* wp = filter.data<float>();
  const float* bias = ctx.inputs[2].data<float>();
  float* y = ctx.outputs[0].data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oy = 0; oy < g.h.out; ++oy)
      for (int64_t ox = 0; ox < g.w.out; ++ox)
        for (int64_t o = 0; o < out; ++o) {
          double acc = bias[o];
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t iy = oy * g.h.stride - g.h.pad_before + i * g.h.dilation;
              const int64_t ix = ox * g.w.stride - g.w.pad_before + j * g.w.dilation;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              const int32_t* pixel = bits.data<int32_t>() + ((b * h + iy) * w + ix) * elements;
              for (int64_t c = 0; c < in; ++c)
                acc += sign_of(pixel, c) * wp[((i * kw + j) * in + c) * out + o];
            }
          y[((b * g.h.out + oy) * g.w.out + ox) * out + o] = static_cast<float>(activated(acc, activation));
        }
}

void xnor_matmul(KernelContext& ctx) {
  const Tensor& bits = ctx.inputs[0];
  const Tensor& b = ctx.inputs[1];
  const int64_t rows = bits.dim(0), k = b.dim(0), out = b.dim(1);
  const int64_t elements = rows == 0 ? 0 : bits.numel() / rows;
  const Activation activation = activation_of(ctx.node);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = ctx.inputs[2].data<float>()[o];
      for (int64_t c = 0; c < k; ++c)
        acc += sign_of(bits.data<int32_t>() + r * elements, c) * b.data<float>()[c * out + o];
      ctx.outputs[0].data<float>()[r * out + o] = static_cast<float>(activated(acc, activation));
    }
}

}  // namespace

void register_reference_binary_kernels(KernelRegistry& r) {
  r.add(simple_kernel(op_names::kSignBits, DType::f32, "reference", sign_bits));
  r.add(simple_kernel(op_names::kMaxPoolSignBits, DType::f32, "reference", max_pool_sign_bits));
  r.add(simple_kernel(op_names::kXnorConv2D, DType::i32, "reference", xnor_conv2d));
  r.add(simple_kernel(op_names::kXnorMatMul, DType::i32, "reference", xnor_matmul));
  r.add(simple_kernel(op_names::kBinarizeWeights, DType::f32, "reference", binarize_weights));
  r.add(simple_kernel(op_names::kBinarizeActivation, DType::f32, "reference", binarize_activation));
  r.add(simple_kernel(op_names::kStraightThroughGrad, DType::f32, "reference",
                      straight_through_grad));
}

}  // namespace sf
