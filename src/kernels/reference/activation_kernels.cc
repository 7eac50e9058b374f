// Reference kernels for activations and their grad ops.
#include <algorithm>
#include <cmath>

#include "core/activation.h"
#include "cpu/parallel_for.h"
#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/op_names.h"

namespace sf {

namespace {

constexpr int64_t kParallelMin = 1 << 15;  // below this, threads cost more than they save

template <typename Op>
KernelDef unary(const char* op_name, Op op) {
  return simple_kernel(op_name, DType::f32, "reference", [op](KernelContext& ctx) {
    const float* x = ctx.inputs[0].data<float>();
    float* y = ctx.outputs[0].data<float>();
    const int64_t n = ctx.outputs[0].numel();
    parallel_for(0, n, n >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
      for (int64_t i = share_begin; i < share_end; ++i) y[i] = op(x[i]);
    });
  });
}

// Grad ops: dx = op(dy, saved) elementwise.
template <typename Op>
KernelDef binary(const char* op_name, Op op) {
  return simple_kernel(op_name, DType::f32, "reference", [op](KernelContext& ctx) {
    const float* dy = ctx.inputs[0].data<float>();
    const float* s = ctx.inputs[1].data<float>();
    float* dx = ctx.outputs[0].data<float>();
    const int64_t n = ctx.outputs[0].numel();
    parallel_for(0, n, n >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
      for (int64_t i = share_begin; i < share_end; ++i) dx[i] = op(dy[i], s[i]);
    });
  });
}

void softmax(KernelContext& ctx) {
  const float* x = ctx.inputs[0].data<float>();
  float* y = ctx.outputs[0].data<float>();
  const int64_t rows = ctx.inputs[0].last_axis_rows(), cols = ctx.inputs[0].last_axis();
  parallel_for(0, rows, rows * cols >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
    for (int64_t r = share_begin; r < share_end; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      // Subtracting the row max keeps exp() from overflowing.
      const float max = *std::max_element(xr, xr + cols);
      double sum = 0.0;
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(xr[c]) - max);
      for (int64_t c = 0; c < cols; ++c)
        yr[c] = static_cast<float>(std::exp(static_cast<double>(xr[c]) - max) / sum);
    }
  });
}

// dx = y * (dy - sum(dy * y)) per row.
void softmax_grad(KernelContext& ctx) {
  const float* dy = ctx.inputs[0].data<float>();
  const float* y = ctx.inputs[1].data<float>();
  float* dx = ctx.outputs[0].data<float>();
  const int64_t rows = ctx.inputs[0].last_axis_rows(), cols = ctx.inputs[0].last_axis();
  parallel_for(0, rows, rows * cols >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
    for (int64_t r = share_begin; r < share_end; ++r) {
      const int64_t base = r * cols;
      double dot = 0.0;
      for (int64_t c = 0; c < cols; ++c) dot += static_cast<double>(dy[base + c]) * y[base + c];
      for (int64_t c = 0; c < cols; ++c)
        dx[base + c] = static_cast<float>(y[base + c] * (dy[base + c] - dot));
    }
  });
}

}  // namespace

void register_reference_activation_kernels(KernelRegistry& r) {
  r.add(unary(op_names::kRelu, [](float x) { return activation_op_value(x, Activation::Relu); }));
  r.add(unary(op_names::kRelu6, [](float x) { return activation_op_value(x, Activation::Relu6); }));
  r.add(unary(op_names::kSigmoid, [](float x) { return 1.0f / (1.0f + std::exp(-x)); }));
  r.add(unary(op_names::kTanh, [](float x) { return std::tanh(x); }));
  r.add(simple_kernel(op_names::kSoftmax, DType::f32, "reference", softmax));
  r.add(binary(op_names::kReluGrad, [](float dy, float x) {
    return activation_grad_op_value(dy, x, Activation::Relu);
  }));
  r.add(binary(op_names::kRelu6Grad, [](float dy, float x) {
    return activation_grad_op_value(dy, x, Activation::Relu6);
  }));
  r.add(binary(op_names::kSigmoidGrad, [](float dy, float y) { return dy * y * (1.0f - y); }));
  r.add(binary(op_names::kTanhGrad, [](float dy, float y) { return dy * (1.0f - y * y); }));
  r.add(simple_kernel(op_names::kSoftmaxGrad, DType::f32, "reference", softmax_grad));
}

}  // namespace sf
