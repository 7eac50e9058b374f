// Reference kernels for the integer ops (ops/quantized_ops.cc): plain loops over u8 / i8 data
// that accumulate in int64 and requantize with the shared fixed-point helpers
// (codec/quant_params.h), so optimized kernels can be held to within one unit of them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/quantized_args.h"
#include "kernels/reference/reference.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf {

namespace {

int32_t saturate_i32(int64_t v) {
  return static_cast<int32_t>(std::clamp<int64_t>(v, std::numeric_limits<int32_t>::min(),
                                                  std::numeric_limits<int32_t>::max()));
}

// --- float <-> u8 ---

// Non-finite values are left out of the range: one inf would otherwise make every other value
// quantize to the zero point.
void choose_qparams(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const float* xp = x.data<float>();
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (std::isfinite(xp[i])) {
      lo = std::min(lo, xp[i]);
      hi = std::max(hi, xp[i]);
    }
  write_params(ctx.outputs[0], choose_quant_params(lo, hi));
}

void quantize(KernelContext& ctx) {
  const QuantParams p = params_input(ctx, 1);
  const float* xp = ctx.inputs[0].data<float>();
  uint8_t* yp = ctx.outputs[0].data<uint8_t>();
  for (int64_t i = 0; i < ctx.outputs[0].numel(); ++i) yp[i] = quantize_value(xp[i], p);
}

void dequantize(KernelContext& ctx) {
  const QuantParams p = params_input(ctx, 1);
  const uint8_t* qp = ctx.inputs[0].data<uint8_t>();
  float* yp = ctx.outputs[0].data<float>();
  for (int64_t i = 0; i < ctx.outputs[0].numel(); ++i) yp[i] = dequantize_value(qp[i], p);
}

// --- conv and matmul accumulators ---

// The i32 accumulator of QuantizedConv2D: x [N,H,W,C] u8, w [KH,KW,C/groups,O] i8, y [N,OH,OW,O].
// Padding taps are skipped, i.e. they contribute (x - zp_x) = 0: real zero.
std::vector<int32_t> conv_accumulators(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& w = ctx.inputs[2];
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const Window2D g = conv_window(ctx.node.attrs, xs, ws);
  const int64_t n = xs[0], h = xs[1], wd = xs[2], c = xs[3];
  const int64_t kh = ws[0], kw = ws[1], ig = ws[2], o = ws[3];
  const int64_t og = o / ctx.node.attrs.get_int("groups");
  const int64_t oh = g.h.out, ow = g.w.out;
  const QuantParams xq = params_input(ctx, 1);
  const std::vector<float> scales = scales_input(ctx, 3, o);
  const std::vector<int32_t> bias = quantized_bias(ctx.inputs[4].data<float>(), xq.scale, scales);
  const uint8_t* xp = x.data<uint8_t>();
  const int8_t* wp = w.data<int8_t>();
  std::vector<int32_t> y(static_cast<size_t>(n * oh * ow * o));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t yr = 0; yr < oh; ++yr)
      for (int64_t yc = 0; yc < ow; ++yc)
        for (int64_t oc = 0; oc < o; ++oc) {
          const int64_t group = oc / og;
          int64_t acc = bias[static_cast<size_t>(oc)];
          for (int64_t fr = 0; fr < kh; ++fr) {
            const int64_t xr = yr * g.h.stride - g.h.pad_before + fr * g.h.dilation;
            if (xr < 0 || xr >= h) continue;
            for (int64_t fc = 0; fc < kw; ++fc) {
              const int64_t xc = yc * g.w.stride - g.w.pad_before + fc * g.w.dilation;
              if (xc < 0 || xc >= wd) continue;
              for (int64_t i = 0; i < ig; ++i) {
                const int64_t xv = xp[((b * h + xr) * wd + xc) * c + group * ig + i];
                acc += (xv - xq.zero_point) * wp[((fr * kw + fc) * ig + i) * o + oc];
              }
            }
          }
          y[static_cast<size_t>(((b * oh + yr) * ow + yc) * o + oc)] = saturate_i32(acc);
        }
  return y;
}

// The i32 accumulator of QuantizedMatMul: a [M,K] u8, b [K,N] i8.
std::vector<int32_t> matmul_accumulators(const KernelContext& ctx) {
  const Tensor& a = ctx.inputs[0];
  const Tensor& b = ctx.inputs[2];
  const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
  const QuantParams aq = params_input(ctx, 1);
  const std::vector<float> scales = scales_input(ctx, 3, n);
  const std::vector<int32_t> bias = quantized_bias(ctx.inputs[4].data<float>(), aq.scale, scales);
  const uint8_t* ap = a.data<uint8_t>();
  const int8_t* bp = b.data<int8_t>();
  std::vector<int32_t> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = bias[static_cast<size_t>(j)];
      for (int64_t p = 0; p < k; ++p)
        acc += (int64_t{ap[i * k + p]} - aq.zero_point) * bp[p * n + j];
      y[static_cast<size_t>(i * n + j)] = saturate_i32(acc);
    }
  return y;
}

void store_i32(const std::vector<int32_t>& acc, const Tensor& out) {
  std::copy(acc.begin(), acc.end(), out.data<int32_t>());
}

// Requantizes accumulators whose last axis has `channels` entries. Inputs x_params, w_scales
// and out_params are at the given positions.
void requantize_into(const KernelContext& ctx, const int32_t* acc, int64_t count,
                     int64_t channels, int x_params, int w_scales, int out_params) {
  const QuantParams xq = params_input(ctx, x_params);
  const QuantParams out = params_input(ctx, out_params);
  const std::vector<QuantizedMultiplier> m =
      requantize_multipliers(xq.scale, scales_input(ctx, w_scales, channels), out.scale);
  const QuantClamp clamp = activation_clamp(activation_of(ctx.node), out);
  uint8_t* yp = ctx.outputs[0].data<uint8_t>();
  for (int64_t i = 0; i < count; ++i)
    yp[i] = requantize_value(acc[i], m[static_cast<size_t>(i % channels)], out.zero_point, clamp);
}

void quantized_conv2d(KernelContext& ctx) { store_i32(conv_accumulators(ctx), ctx.outputs[0]); }

void quantized_matmul(KernelContext& ctx) { store_i32(matmul_accumulators(ctx), ctx.outputs[0]); }

void quantized_conv2d_requantized(KernelContext& ctx) {
  const std::vector<int32_t> acc = conv_accumulators(ctx);
  requantize_into(ctx, acc.data(), ctx.outputs[0].numel(), ctx.outputs[0].dim(-1), 1, 3, 5);
}

void quantized_matmul_requantized(KernelContext& ctx) {
  const std::vector<int32_t> acc = matmul_accumulators(ctx);
  requantize_into(ctx, acc.data(), ctx.outputs[0].numel(), ctx.outputs[0].dim(-1), 1, 3, 5);
}

// --- requantization ---

void requantize(KernelContext& ctx) {
  const Tensor& acc = ctx.inputs[0];
  requantize_into(ctx, acc.data<int32_t>(), acc.numel(), acc.dim(-1), 1, 2, 3);
}

void requantization_range(KernelContext& ctx) {
  const Tensor& acc = ctx.inputs[0];
  const int64_t channels = acc.dim(-1);
  const QuantParams xq = params_input(ctx, 1);
  const std::vector<float> scales = scales_input(ctx, 2, channels);
  const Activation act = activation_of(ctx.node);
  const int32_t* ap = acc.data<int32_t>();
  double lo = 0.0, hi = 0.0;
  for (int64_t i = 0; i < acc.numel(); ++i) {
    double real = ap[i] * static_cast<double>(xq.scale) * scales[static_cast<size_t>(i % channels)];
    real = activated(real, act);
    lo = std::min(lo, real);
    hi = std::max(hi, real);
  }
  write_params(ctx.outputs[0],
               choose_quant_params(static_cast<float>(lo), static_cast<float>(hi)));
}

// --- pooling ---

// Calls fn(y index, sum or max of the window's in-bounds values, their count, window size).
template <typename Fn>
void for_each_pool_window(const KernelContext& ctx, bool want_max, Fn fn) {
  const Shape& xs = ctx.inputs[0].shape();
  const Window2D g = pool_window(ctx.node.attrs, xs);
  const int64_t n = xs[0], h = xs[1], w = xs[2], c = xs[3];
  const uint8_t* xp = ctx.inputs[0].data<uint8_t>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t yr = 0; yr < g.h.out; ++yr)
      for (int64_t yc = 0; yc < g.w.out; ++yc)
        for (int64_t ch = 0; ch < c; ++ch) {
          int64_t value = 0, count = 0;
          for (int64_t kr = 0; kr < g.h.k; ++kr) {
            const int64_t xr = yr * g.h.stride - g.h.pad_before + kr;
            if (xr < 0 || xr >= h) continue;
            for (int64_t kc = 0; kc < g.w.k; ++kc) {
              const int64_t xc = yc * g.w.stride - g.w.pad_before + kc;
              if (xc < 0 || xc >= w) continue;
              const int64_t v = xp[((b * h + xr) * w + xc) * c + ch];
              value = want_max ? std::max(value, v) : value + v;
              ++count;
            }
          }
          fn(((b * g.h.out + yr) * g.w.out + yc) * c + ch, value, count, g.h.k * g.w.k);
        }
}

// The output keeps the input's params, and max commutes with the monotonic dequantization.
void quantized_max_pool(KernelContext& ctx) {
  uint8_t* yp = ctx.outputs[0].data<uint8_t>();
  for_each_pool_window(ctx, true, [&](int64_t yi, int64_t max, int64_t, int64_t) {
    yp[yi] = static_cast<uint8_t>(max);
  });
}

// Padding is excluded from the average (the shape function rejects count_include_pad, whose
// padding would be worth the zero point, which this op is not given).
void quantized_avg_pool(KernelContext& ctx) {
  uint8_t* yp = ctx.outputs[0].data<uint8_t>();
  for_each_pool_window(ctx, false, [&](int64_t yi, int64_t sum, int64_t count, int64_t) {
    // Non-negative sum: adding half the divisor rounds ties away from zero.
    yp[yi] = static_cast<uint8_t>((sum + count / 2) / count);
  });
}

// --- add and concat ---

void quantized_add(KernelContext& ctx) {
  const QuantParams out = params_input(ctx, 4);
  const QuantizedAddParams p = quantized_add_params(params_input(ctx, 1), params_input(ctx, 3), out,
                                                    activation_clamp(activation_of(ctx.node), out));
  const uint8_t* ap = ctx.inputs[0].data<uint8_t>();
  const uint8_t* bp = ctx.inputs[2].data<uint8_t>();
  uint8_t* yp = ctx.outputs[0].data<uint8_t>();
  for (int64_t i = 0; i < ctx.outputs[0].numel(); ++i) yp[i] = quantized_add_value(ap[i], bp[i], p);
}

// Each input is requantized to out_params with multiplier scale_in / scale_out; inputs already
// in out_params are copied.
void quantized_concat(KernelContext& ctx) {
  const ConcatRows c = concat_rows_of(ctx);
  uint8_t* yp = ctx.outputs[0].data<uint8_t>();
  int64_t offset = 0;
  for (const ConcatInput& in : c.inputs) {
    for (int64_t o = 0; o < c.outer; ++o) {
      const uint8_t* src = in.x + o * in.row;
      uint8_t* dst = yp + o * c.y_row + offset;
      if (in.same) {
        if (in.row > 0) std::memcpy(dst, src, static_cast<size_t>(in.row));
        continue;
      }
      for (int64_t i = 0; i < in.row; ++i)
        dst[i] = requantize_value(src[i] - in.params.zero_point, in.multiplier,
                                  c.out.zero_point, QuantClamp{});
    }
    offset += in.row;
  }
}

}  // namespace

void register_reference_quantized_kernels(KernelRegistry& r) {
  auto add = [&](const char* op, DType dtype, void (*fn)(KernelContext&)) {
    r.add(simple_kernel(op, dtype, "reference", fn));
  };
  add(op_names::kChooseQParams, DType::f32, choose_qparams);
  add(op_names::kQuantize, DType::f32, quantize);
  add(op_names::kDequantize, DType::u8, dequantize);
  add(op_names::kQuantizedConv2D, DType::u8, quantized_conv2d);
  add(op_names::kQuantizedMatMul, DType::u8, quantized_matmul);
  add(op_names::kQuantizedConv2DRequantized, DType::u8, quantized_conv2d_requantized);
  add(op_names::kQuantizedMatMulRequantized, DType::u8, quantized_matmul_requantized);
  add(op_names::kRequantize, DType::i32, requantize);
  add(op_names::kRequantizationRange, DType::i32, requantization_range);
  add(op_names::kQuantizedMaxPool, DType::u8, quantized_max_pool);
  add(op_names::kQuantizedAvgPool, DType::u8, quantized_avg_pool);
  add(op_names::kQuantizedAdd, DType::u8, quantized_add);
  add(op_names::kQuantizedConcat, DType::u8, quantized_concat);
}

}  // namespace sf
