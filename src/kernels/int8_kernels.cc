// Vectorized kernels (impl "simd") for the element-wise int8 ops: Requantize and QuantizedAdd.
// They produce exactly the reference kernels' bytes (kernels/int8_loops.h), only faster, and
// outrank them when no implementation is forced.
#include "kernels/int8_loops.h"
#include "kernels/kernel.h"
#include "kernels/quantized_args.h"
#include "kernels/register.h"

namespace sf {

namespace {

constexpr int kPriority = 5;

void requantize(KernelContext& ctx) {
  const Tensor& acc = ctx.inputs[0];
  const int64_t channels = acc.dim(-1);
  if (acc.numel() == 0) return;
  const QuantParams xq = params_input(ctx, 1);
  const QuantParams out = params_input(ctx, 3);
  requantize_rows(acc.data<int32_t>(), acc.numel() / channels, channels,
                  requantize_multipliers(xq.scale, scales_input(ctx, 2, channels), out.scale),
                  out.zero_point, activation_clamp(ctx.node.attrs.get_string("activation"), out),
                  ctx.outputs[0].data<uint8_t>());
}

void quantized_add(KernelContext& ctx) {
  const QuantParams out = params_input(ctx, 4);
  const QuantizedAddParams p =
      quantized_add_params(params_input(ctx, 1), params_input(ctx, 3), out,
                           activation_clamp(ctx.node.attrs.get_string("activation"), out));
  quantized_add_elements(ctx.inputs[0].data<uint8_t>(), ctx.inputs[2].data<uint8_t>(),
                         ctx.outputs[0].numel(), p, ctx.outputs[0].data<uint8_t>());
}

}  // namespace

void register_int8_kernels(KernelRegistry& r) {
  r.add(simple_kernel("Requantize", DType::i32, "simd", requantize, kPriority));
  r.add(simple_kernel("QuantizedAdd", DType::u8, "simd", quantized_add, kPriority));
}

}  // namespace sf
