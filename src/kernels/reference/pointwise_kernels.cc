// Reference kernels for the elementwise ops of pointwise_ops.cc and their grad ops. Values are
// computed in double and rounded once, so they are the oracle for faster float versions.
#include <algorithm>
#include <cmath>

#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/broadcast.h"
#include "ops/op_names.h"

namespace sf {

namespace {

constexpr int64_t kParallelMin = 1 << 15;  // below this, threads cost more than they save

// y = f(x) elementwise, where f = make(attrs): attributes are read once, not per element.
template <typename Make>
KernelDef unary(const char* op_name, Make make) {
  return simple_kernel(op_name, DType::f32, "reference", [make](KernelContext& ctx) {
    const auto f = make(ctx.node.attrs);
    const float* x = ctx.inputs[0].data<float>();
    float* y = ctx.outputs[0].data<float>();
    const int64_t n = ctx.outputs[0].numel();
#pragma omp parallel for if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(f(static_cast<double>(x[i])));
  });
}

// dx = dy * f(x) elementwise, f = make(attrs) being the local derivative.
template <typename Make>
KernelDef grad(const char* op_name, Make make) {
  return simple_kernel(op_name, DType::f32, "reference", [make](KernelContext& ctx) {
    const auto f = make(ctx.node.attrs);
    const float* dy = ctx.inputs[0].data<float>();
    const float* x = ctx.inputs[1].data<float>();
    float* dx = ctx.outputs[0].data<float>();
    const int64_t n = ctx.outputs[0].numel();
#pragma omp parallel for if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i)
      dx[i] = static_cast<float>(dy[i] * f(static_cast<double>(x[i])));
  });
}

void pow(KernelContext& ctx) {
  const float* a = ctx.inputs[0].data<float>();
  const float* b = ctx.inputs[1].data<float>();
  float* y = ctx.outputs[0].data<float>();
  for_each_broadcast(
      ctx.outputs[0].shape(), ctx.inputs[0].shape(), ctx.inputs[1].shape(),
      [&](int64_t o, int64_t ia, int64_t ib) {
        y[o] = static_cast<float>(std::pow(static_cast<double>(a[ia]), static_cast<double>(b[ib])));
      });
}

// y = x >= 0 ? x : slope * x, slope broadcast to x.
void prelu(KernelContext& ctx) {
  const float* x = ctx.inputs[0].data<float>();
  const float* s = ctx.inputs[1].data<float>();
  float* y = ctx.outputs[0].data<float>();
  const Shape& shape = ctx.inputs[0].shape();
  for_each_broadcast(shape, shape, ctx.inputs[1].shape(), [&](int64_t o, int64_t ix, int64_t is) {
    y[o] = x[ix] >= 0.0f ? x[ix] : s[is] * x[ix];
  });
}

// Outputs dx = dy * (x >= 0 ? 1 : slope) and dslope = dy * (x >= 0 ? 0 : x), both x-shaped.
void prelu_grad(KernelContext& ctx) {
  const float* dy = ctx.inputs[0].data<float>();
  const float* x = ctx.inputs[1].data<float>();
  const float* s = ctx.inputs[2].data<float>();
  float* dx = ctx.outputs[0].data<float>();
  float* ds = ctx.outputs[1].data<float>();
  const Shape& shape = ctx.inputs[1].shape();
  for_each_broadcast(shape, shape, ctx.inputs[2].shape(), [&](int64_t o, int64_t ix, int64_t is) {
    const bool pos = x[ix] >= 0.0f;
    dx[o] = pos ? dy[o] : dy[o] * s[is];
    ds[o] = pos ? 0.0f : dy[o] * x[ix];
  });
}

double hard_sigmoid(double x, double alpha, double beta) {
  return std::clamp(alpha * x + beta, 0.0, 1.0);
}

}  // namespace

void register_reference_pointwise_kernels(KernelRegistry& r) {
  using A = const Attrs&;
  r.add(simple_kernel(op_names::kPow, DType::f32, "reference", pow));
  r.add(unary(op_names::kSqrt, [](A) { return [](double x) { return std::sqrt(x); }; }));
  r.add(unary(op_names::kExp, [](A) { return [](double x) { return std::exp(x); }; }));
  r.add(unary(op_names::kLog, [](A) { return [](double x) { return std::log(x); }; }));
  // min(max(x, lo), hi): when lo > hi every element becomes hi, as ONNX specifies.
  r.add(unary(op_names::kClip, [](A a) {
    return [lo = a.get_float("min"), hi = a.get_float("max")](double x) {
      return std::min(std::max(x, lo), hi);
    };
  }));
  r.add(grad(op_names::kClipGrad, [](A a) {
    return [lo = a.get_float("min"), hi = a.get_float("max")](double x) {
      return x >= lo && x <= hi ? 1.0 : 0.0;
    };
  }));
  r.add(unary(op_names::kLeakyRelu, [](A a) {
    return [alpha = a.get_float("alpha")](double x) { return x >= 0 ? x : alpha * x; };
  }));
  r.add(grad(op_names::kLeakyReluGrad, [](A a) {
    return [alpha = a.get_float("alpha")](double x) { return x >= 0 ? 1.0 : alpha; };
  }));
  r.add(unary(op_names::kHardSigmoid, [](A a) {
    return [alpha = a.get_float("alpha"), beta = a.get_float("beta")](double x) {
      return hard_sigmoid(x, alpha, beta);
    };
  }));
  r.add(grad(op_names::kHardSigmoidGrad, [](A a) {
    return [alpha = a.get_float("alpha"), beta = a.get_float("beta")](double x) {
      const double v = alpha * x + beta;
      return v > 0.0 && v < 1.0 ? alpha : 0.0;
    };
  }));
  // HardSwish(x) = x * HardSigmoid(x) with alpha 1/6, beta 0.5.
  r.add(unary(op_names::kHardSwish,
              [](A) { return [](double x) { return x * hard_sigmoid(x, 1.0 / 6.0, 0.5); }; }));
  r.add(grad(op_names::kHardSwishGrad, [](A) {
    return [](double x) { return x <= -3.0 ? 0.0 : x >= 3.0 ? 1.0 : x / 3.0 + 0.5; };
  }));
  r.add(simple_kernel(op_names::kPRelu, DType::f32, "reference", prelu));
  r.add(simple_kernel(op_names::kPReluGrad, DType::f32, "reference", prelu_grad));
}

}  // namespace sf
