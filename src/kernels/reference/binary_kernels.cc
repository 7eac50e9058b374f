// Reference kernels for binarized training's ops (ops/binary_ops.h); the weight math is
// codec/binary_weights.h's, which `freeze` and the binary kernels share.
#include <cmath>

#include "codec/binary_weights.h"
#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
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

}  // namespace

void register_reference_binary_kernels(KernelRegistry& r) {
  r.add(simple_kernel(op_names::kBinarizeWeights, DType::f32, "reference", binarize_weights));
  r.add(simple_kernel(op_names::kBinarizeActivation, DType::f32, "reference", binarize_activation));
  r.add(simple_kernel(op_names::kStraightThroughGrad, DType::f32, "reference",
                      straight_through_grad));
}

}  // namespace sf
