// Kernels (impl "int8_loops") for the element-wise int8 ops (Quantize, Dequantize, ChooseQParams,
// Requantize, RequantizationRange, QuantizedAdd, QuantizedConcat), QuantizedAvgPool and
// QuantizedMaxPool, made of kernels/int8_loops.h: AVX-512 where the CPU has it, portable loops
// elsewhere, so they run on every CPU. They produce exactly the reference kernels' bytes, only
// faster, and outrank them when no implementation is forced (the max pool outranks oneDNN's too).
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "kernels/int8_loops.h"
#include "kernels/kernel.h"
#include "kernels/quantized_args.h"
#include "kernels/register.h"
#include "ops/op_names.h"

namespace sf {

namespace {

constexpr int kPriority = 5;
constexpr int kMaxPoolPriority = 11;  // above oneDNN's u8 pooling

void choose_qparams(KernelContext& ctx) {
  const FloatRange r = finite_range(ctx.inputs[0].data<float>(), ctx.inputs[0].numel());
  write_params(ctx.outputs[0], choose_quant_params(r.lo, r.hi));
}

void quantize(KernelContext& ctx) {
  quantize_elements(ctx.inputs[0].data<float>(), ctx.outputs[0].numel(), params_input(ctx, 1),
                    ctx.outputs[0].data<uint8_t>());
}

void dequantize(KernelContext& ctx) {
  dequantize_elements(ctx.inputs[0].data<uint8_t>(), ctx.outputs[0].numel(), params_input(ctx, 1),
                      ctx.outputs[0].data<float>());
}

void requantize(KernelContext& ctx) {
  const Tensor& acc = ctx.inputs[0];
  const int64_t channels = acc.dim(-1);
  if (acc.numel() == 0) return;
  const QuantParams xq = params_input(ctx, 1);
  const QuantParams out = params_input(ctx, 3);
  requantize_rows(acc.data<int32_t>(), acc.numel() / channels, channels,
                  requantize_multipliers(xq.scale, scales_input(ctx, 2, channels), out.scale),
                  out.zero_point, activation_clamp(activation_of(ctx.node), out),
                  ctx.outputs[0].data<uint8_t>());
}

// The reference's range of real values, from each channel's extreme accumulators: the real
// value (acc * x_scale) * w_scale, rounded in double, and the activation's clamps never
// decrease as acc grows (scales are positive), so the extremes map to the extremes.
void requantization_range(KernelContext& ctx) {
  const Tensor& acc = ctx.inputs[0];
  const int64_t channels = acc.dim(-1);
  double lo = 0.0, hi = 0.0;
  if (acc.numel() > 0) {
    const QuantParams xq = params_input(ctx, 1);
    const std::vector<float> scales = scales_input(ctx, 2, channels);
    const Activation act = activation_of(ctx.node);
    std::vector<int32_t> acc_lo(static_cast<size_t>(channels)), acc_hi(acc_lo.size());
    channel_ranges(acc.data<int32_t>(), acc.numel() / channels, channels, acc_lo.data(),
                   acc_hi.data());
    auto real = [&](int32_t a, float scale) {
      double r = a * static_cast<double>(xq.scale) * scale;
      r = activated(r, act);
      return r;
    };
    for (size_t c = 0; c < acc_lo.size(); ++c) {
      lo = std::min(lo, real(acc_lo[c], scales[c]));
      hi = std::max(hi, real(acc_hi[c], scales[c]));
    }
  }
  write_params(ctx.outputs[0], choose_quant_params(static_cast<float>(lo), static_cast<float>(hi)));
}

void quantized_avg_pool(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  if (ctx.outputs[0].numel() == 0) return;
  average_pool(x.data<uint8_t>(), x.dim(0), x.dim(3), pool_window(ctx.node.attrs, x.shape()),
               ctx.outputs[0].data<uint8_t>());
}

void quantized_max_pool(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  if (ctx.outputs[0].numel() == 0) return;
  max_pool(x.data<uint8_t>(), x.dim(0), x.dim(3), pool_window(ctx.node.attrs, x.shape()),
           ctx.outputs[0].data<uint8_t>());
}

void quantized_add(KernelContext& ctx) {
  const QuantParams out = params_input(ctx, 4);
  const QuantizedAddParams p = quantized_add_params(params_input(ctx, 1), params_input(ctx, 3), out,
                                                    activation_clamp(activation_of(ctx.node), out));
  quantized_add_elements(ctx.inputs[0].data<uint8_t>(), ctx.inputs[2].data<uint8_t>(),
                         ctx.outputs[0].numel(), p, ctx.outputs[0].data<uint8_t>());
}

// As the reference, with each input's requantization precomputed for its 256 codes.
void quantized_concat(KernelContext& ctx) {
  const ConcatRows c = concat_rows_of(ctx);
  if (ctx.outputs[0].numel() == 0) return;
  std::vector<std::array<uint8_t, 256>> tables(c.inputs.size());
  std::vector<ConcatPart> parts;
  for (size_t p = 0; p < c.inputs.size(); ++p) {
    const ConcatInput& in = c.inputs[p];
    ConcatPart part{in.x, in.row, nullptr};
    if (!in.same) {
      for (int code = 0; code < 256; ++code)
        tables[p][static_cast<size_t>(code)] = requantize_value(
            code - in.params.zero_point, in.multiplier, c.out.zero_point, QuantClamp{});
      part.table = tables[p].data();
    }
    parts.push_back(part);
  }
  concat_rows(parts, c.outer, c.y_row, ctx.outputs[0].data<uint8_t>());
}

}  // namespace

void register_int8_kernels(KernelRegistry& r) {
  r.add(
      simple_kernel(op_names::kChooseQParams, DType::f32, "int8_loops", choose_qparams, kPriority));
  r.add(simple_kernel(op_names::kQuantize, DType::f32, "int8_loops", quantize, kPriority));
  r.add(simple_kernel(op_names::kDequantize, DType::u8, "int8_loops", dequantize, kPriority));
  r.add(simple_kernel(op_names::kRequantize, DType::i32, "int8_loops", requantize, kPriority));
  r.add(simple_kernel(op_names::kRequantizationRange, DType::i32, "int8_loops",
                      requantization_range, kPriority));
  r.add(simple_kernel(op_names::kQuantizedAvgPool, DType::u8, "int8_loops", quantized_avg_pool,
                      kPriority));
  r.add(simple_kernel(op_names::kQuantizedMaxPool, DType::u8, "int8_loops", quantized_max_pool,
                      kMaxPoolPriority));
  r.add(simple_kernel(op_names::kQuantizedAdd, DType::u8, "int8_loops", quantized_add, kPriority));
  r.add(simple_kernel(op_names::kQuantizedConcat, DType::u8, "int8_loops", quantized_concat,
                      kPriority));
}

}  // namespace sf
