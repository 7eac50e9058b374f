// Reference kernels for the elementwise ops of pointwise_ops.cc and their grad ops. Values are
// computed in double and rounded once, so they are the oracle for faster float versions.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/saturating_cast.h"
#include "cpu/parallel_for.h"
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
    parallel_for(0, n, n >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
      for (int64_t i = share_begin; i < share_end; ++i)
        y[i] = static_cast<float>(f(static_cast<double>(x[i])));
    });
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
    parallel_for(0, n, n >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
      for (int64_t i = share_begin; i < share_end; ++i)
        dx[i] = static_cast<float>(dy[i] * f(static_cast<double>(x[i])));
    });
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

// b^e for an integer exponent, exactly, wrapping around as integer arithmetic does in ONNX
// (numpy's integer power); a negative exponent leaves only 1 and -1 nonzero.
template <typename T>
T integer_power(T base, int64_t e) {
  if (e < 0) return base == 1 ? T{1} : base == -1 ? static_cast<T>(e % 2 ? -1 : 1) : T{0};
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);
  for (; e > 0; e >>= 1, b = static_cast<U>(b * b))
    if (e & 1) result = static_cast<U>(result * b);
  return static_cast<T>(result);
}

// Pow with an integer base: an integer exponent raises exactly; a float one computes in double
// and truncates toward zero (saturating), as ONNX's reference casts numpy's float result.
template <typename T>
void integer_pow(KernelContext& ctx) {
  const T* a = ctx.inputs[0].data<T>();
  const Tensor& e = ctx.inputs[1];
  T* y = ctx.outputs[0].data<T>();
  auto each = [&](auto exponent_at) {
    for_each_broadcast(ctx.outputs[0].shape(), ctx.inputs[0].shape(), e.shape(),
                       [&](int64_t o, int64_t ia, int64_t ie) { y[o] = exponent_at(a[ia], ie); });
  };
  switch (e.dtype()) {
    case DType::i32:
      return each([p = e.data<int32_t>()](T b, int64_t i) { return integer_power(b, p[i]); });
    case DType::i64:
      return each([p = e.data<int64_t>()](T b, int64_t i) { return integer_power(b, p[i]); });
    default:
      return each([p = e.data<float>()](T b, int64_t i) {
        return saturating_cast<T>(
            std::trunc(std::pow(static_cast<double>(b), static_cast<double>(p[i]))));
      });
  }
}

// Clip of an integer tensor: the bounds rounded inward to T (saturating), compared exactly in T.
template <typename T>
void integer_clip(KernelContext& ctx) {
  const T lo = saturating_cast<T>(std::ceil(ctx.node.attrs.get_float("min")));
  const T hi = saturating_cast<T>(std::floor(ctx.node.attrs.get_float("max")));
  const T* x = ctx.inputs[0].data<T>();
  T* y = ctx.outputs[0].data<T>();
  for (int64_t i = 0; i < ctx.outputs[0].numel(); ++i) y[i] = std::min(std::max(x[i], lo), hi);
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
  r.add(simple_kernel(op_names::kPow, DType::i32, "reference", integer_pow<int32_t>));
  r.add(simple_kernel(op_names::kPow, DType::i64, "reference", integer_pow<int64_t>));
  r.add(simple_kernel(op_names::kClip, DType::i8, "reference", integer_clip<int8_t>));
  r.add(simple_kernel(op_names::kClip, DType::u8, "reference", integer_clip<uint8_t>));
  r.add(simple_kernel(op_names::kClip, DType::i32, "reference", integer_clip<int32_t>));
  r.add(simple_kernel(op_names::kClip, DType::i64, "reference", integer_clip<int64_t>));
  r.add(unary(op_names::kSqrt, [](A) { return [](double x) { return std::sqrt(x); }; }));
  r.add(unary(op_names::kExp, [](A) { return [](double x) { return std::exp(x); }; }));
  r.add(unary(op_names::kLog, [](A) { return [](double x) { return std::log(x); }; }));
  r.add(unary(op_names::kErf, [](A) { return [](double x) { return std::erf(x); }; }));
  r.add(unary(op_names::kGelu, [](A) {
    return [](double x) { return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440)); };
  }));
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
