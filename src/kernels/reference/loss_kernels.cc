// Reference kernels for SoftmaxCrossEntropy and its gradient. The loss uses log-sum-exp with
// the row max subtracted, so large logits neither overflow nor lose the loss to rounding.
#include <algorithm>
#include <cmath>

#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/op_names.h"

namespace sf {

namespace {

// The class index of row n, checked against the class count.
int64_t label_at(const KernelContext& ctx, const Tensor& labels, int64_t n, int64_t classes) {
  int64_t label =
      labels.dtype() == DType::i32 ? labels.data<int32_t>()[n] : labels.data<int64_t>()[n];
  if (label < 0 || label >= classes)
    fail("node '{}' ({}): label {} at row {} is out of range for {} classes", ctx.node.name,
         ctx.node.op, label, n, classes);
  return label;
}

void softmax_cross_entropy(KernelContext& ctx) {
  const Tensor& logits = ctx.inputs[0];
  const Tensor& labels = ctx.inputs[1];
  const int64_t rows = logits.dim(0), cols = logits.dim(1);
  const float* x = logits.data<float>();
  float* probs = ctx.outputs[1].data<float>();
  const bool indices = labels.dtype() != DType::f32;
  double total = 0.0;
  for (int64_t n = 0; n < rows; ++n) {
    const float* xr = x + n * cols;
    float* pr = probs + n * cols;
    double lse = 0.0;
    if (cols > 0) {
      const double max = *std::max_element(xr, xr + cols);
      double sum = 0.0;
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - max);
      lse = max + std::log(sum);
    }
    for (int64_t c = 0; c < cols; ++c) pr[c] = static_cast<float>(std::exp(xr[c] - lse));
    if (indices) {
      total += lse - xr[label_at(ctx, labels, n, cols)];
    } else {
      const float* lr = labels.data<float>() + n * cols;
      for (int64_t c = 0; c < cols; ++c) total += lr[c] * (lse - xr[c]);
    }
  }
  *ctx.outputs[0].data<float>() = rows == 0 ? 0.0f : static_cast<float>(total / rows);
}

void softmax_cross_entropy_grad(KernelContext& ctx) {
  const float dloss = *ctx.inputs[0].data<float>();
  const Tensor& probs = ctx.inputs[1];
  const Tensor& labels = ctx.inputs[2];
  const int64_t rows = probs.dim(0), cols = probs.dim(1);
  const float* p = probs.data<float>();
  float* dx = ctx.outputs[0].data<float>();
  const double scale = rows == 0 ? 0.0 : static_cast<double>(dloss) / rows;
  for (int64_t n = 0; n < rows; ++n) {
    const float* pr = p + n * cols;
    float* dr = dx + n * cols;
    if (labels.dtype() != DType::f32) {
      const int64_t label = label_at(ctx, labels, n, cols);
      for (int64_t c = 0; c < cols; ++c)
        dr[c] = static_cast<float>((pr[c] - (c == label ? 1.0 : 0.0)) * scale);
    } else {
      // Exact for label rows that do not sum to 1 as well.
      const float* lr = labels.data<float>() + n * cols;
      double mass = 0.0;
      for (int64_t c = 0; c < cols; ++c) mass += lr[c];
      for (int64_t c = 0; c < cols; ++c) dr[c] = static_cast<float>((pr[c] * mass - lr[c]) * scale);
    }
  }
}

}  // namespace

void register_reference_loss_kernels(KernelRegistry& r) {
  r.add(simple_kernel(op_names::kSoftmaxCrossEntropy, DType::f32, "reference",
                      softmax_cross_entropy));
  r.add(simple_kernel(op_names::kSoftmaxCrossEntropyGrad, DType::f32, "reference",
                      softmax_cross_entropy_grad));
}

}  // namespace sf
