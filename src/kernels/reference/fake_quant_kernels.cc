// Reference kernels for quantization-aware training's fake-quantization ops
// (ops/fake_quant_ops.h). The rounding is the one the quantized model will use: weights through
// codec/weight_codec.h's linear grid, activations through codec/quant_params.h's u8 params.
#include <algorithm>
#include <cmath>
#include <limits>

#include "codec/quant_params.h"
#include "codec/weight_codec.h"
#include "cpu/parallel_for.h"
#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/op_names.h"

namespace sf {

namespace {

constexpr int64_t kParallelMin = 1 << 15;

void fake_quant_weights(KernelContext& ctx) {
  const Tensor& w = ctx.inputs[0];
  const auto bits = static_cast<int>(ctx.node.attrs.get_int("bits"));
  quant::fake_quantize_linear(w, bits, static_cast<int>(w.rank()) - 1, ctx.outputs[0]);
}

// The learned range, or the batch's own before anything has been learned (NaN).
QuantParams effective_params(const Tensor& range, const Tensor& observed) {
  const float* r = range.data<float>();
  const float* o = observed.data<float>();
  const bool learned = !std::isnan(r[0]) && !std::isnan(r[1]);
  return learned ? choose_quant_params(r[0], r[1]) : choose_quant_params(o[0], o[1]);
}

// Within one step of dequantize_value(quantize_value(x)): rounding here is in float, ties to
// even, which only moves values lying exactly between two steps; it runs on every training step.
void fake_quant_activation(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const float* xp = x.data<float>();
  const int64_t n = x.numel();
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  parallel_region(n >= kParallelMin, [&] {
#pragma omp for reduction(min : lo) reduction(max : hi)
    for (int64_t i = 0; i < n; ++i)
      if (std::isfinite(xp[i])) {
        lo = std::min(lo, xp[i]);
        hi = std::max(hi, xp[i]);
      }
  });
  float* observed = ctx.outputs[1].data<float>();
  observed[0] = lo <= hi ? lo : 0.0f;
  observed[1] = lo <= hi ? hi : 0.0f;
  const QuantParams p = effective_params(ctx.inputs[1], ctx.outputs[1]);
  const float inverse = 1.0f / p.scale, scale = p.scale;
  const auto lowest = static_cast<float>(-p.zero_point),
             highest = static_cast<float>(255 - p.zero_point);
  float* y = ctx.outputs[0].data<float>();
  parallel_for(0, n, n >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
    for (int64_t i = share_begin; i < share_end; ++i)
      y[i] = std::clamp(std::nearbyint(xp[i] * inverse), lowest, highest) * scale;
  });
}

// Straight through where x lies within the grid's range; zero where quantization saturates.
void fake_quant_activation_grad(KernelContext& ctx) {
  const float* dy = ctx.inputs[0].data<float>();
  const float* x = ctx.inputs[1].data<float>();
  const QuantParams p = effective_params(ctx.inputs[2], ctx.inputs[3]);
  const float lo = dequantize_value(0, p), hi = dequantize_value(255, p);
  float* dx = ctx.outputs[0].data<float>();
  const int64_t n = ctx.outputs[0].numel();
  parallel_for(0, n, n >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
    for (int64_t i = share_begin; i < share_end; ++i)
      dx[i] = x[i] >= lo && x[i] <= hi ? dy[i] : 0.0f;
  });
}

}  // namespace

void register_reference_fake_quant_kernels(KernelRegistry& r) {
  r.add(simple_kernel(op_names::kFakeQuantWeights, DType::f32, "reference", fake_quant_weights));
  r.add(simple_kernel(op_names::kFakeQuantActivation, DType::f32, "reference",
                      fake_quant_activation));
  r.add(simple_kernel(op_names::kFakeQuantActivationGrad, DType::f32, "reference",
                      fake_quant_activation_grad));
}

}  // namespace sf
