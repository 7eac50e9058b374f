// Reference kernels for elementwise arithmetic, sums and reductions. Broadcasting walks the
// shapes with for_each_broadcast (ops/broadcast.h); sums accumulate in double, in a fixed
// order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/parallel_for.h"
#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/broadcast.h"
#include "ops/execution_ops.h"
#include "ops/op_names.h"

namespace sf {

namespace {

constexpr int64_t kParallelMin = 1 << 15;  // below this, threads cost more than they save

template <typename T, typename Op>
void binary(KernelContext& ctx, Op op) {
  const Tensor& a = ctx.inputs[0];
  const Tensor& b = ctx.inputs[1];
  Tensor& y = ctx.outputs[0];
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* py = y.data<T>();
  if (a.shape() == b.shape()) {
    const int64_t n = y.numel();
    parallel_for(0, n, n >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
      for (int64_t i = share_begin; i < share_end; ++i) py[i] = op(pa[i], pb[i]);
    });
    return;
  }
  for_each_broadcast(y.shape(), a.shape(), b.shape(),
                     [&](int64_t o, int64_t ia, int64_t ib) { py[o] = op(pa[ia], pb[ib]); });
}

// Whether Maximum (Pick = std::greater_equal) or Minimum (std::less_equal) selects `a`: on ties,
// and whenever `a` is NaN; a NaN `b` fails the comparison, so NaN propagates from either side.
template <typename Pick, typename T>
bool selects_a(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a)) return true;
  return Pick{}(a, b);
}

// Integers wrap around as in ONNX (two's complement): the arithmetic runs unsigned, where
// overflow is defined, and converts back.
template <typename T, typename Op>
T wrapping(T a, T b, Op op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<std::conditional_t<(sizeof(T) < sizeof(unsigned)), int, T>>;
    return static_cast<T>(op(static_cast<U>(a), static_cast<U>(b)));
  } else {
    return op(a, b);
  }
}

template <typename T>
void add_binary_kernels(KernelRegistry& r, DType dtype) {
  r.add(simple_kernel(op_names::kAdd, dtype, "reference", [](KernelContext& ctx) {
    binary<T>(ctx, [](T a, T b) { return wrapping(a, b, std::plus<>{}); });
  }));
  r.add(simple_kernel(op_names::kSub, dtype, "reference", [](KernelContext& ctx) {
    binary<T>(ctx, [](T a, T b) { return wrapping(a, b, std::minus<>{}); });
  }));
  r.add(simple_kernel(op_names::kMul, dtype, "reference", [](KernelContext& ctx) {
    binary<T>(ctx, [](T a, T b) { return wrapping(a, b, std::multiplies<>{}); });
  }));
  r.add(simple_kernel(op_names::kMaximum, dtype, "reference", [](KernelContext& ctx) {
    binary<T>(ctx, [](T a, T b) { return selects_a<std::greater_equal<>>(a, b) ? a : b; });
  }));
  r.add(simple_kernel(op_names::kMinimum, dtype, "reference", [](KernelContext& ctx) {
    binary<T>(ctx, [](T a, T b) { return selects_a<std::less_equal<>>(a, b) ? a : b; });
  }));
  r.add(simple_kernel(op_names::kNeg, dtype, "reference", [](KernelContext& ctx) {
    const T* x = ctx.inputs[0].data<T>();
    T* y = ctx.outputs[0].data<T>();
    const int64_t n = ctx.outputs[0].numel();
    for (int64_t i = 0; i < n; ++i) y[i] = wrapping(T{0}, x[i], std::minus<>{});
  }));
}

// Integer a / b truncated toward zero, as ONNX's integer Div; a zero divisor gives 0 and
// INT_MIN / -1 wraps, where C++ would trap.
template <typename T>
void integer_div(KernelContext& ctx) {
  binary<T>(ctx, [](T a, T b) {
    if (b == 0) return T{0};
    if constexpr (std::is_signed_v<T>)
      if (b == -1) return wrapping(T{0}, a, std::minus<>{});
    return static_cast<T>(a / b);
  });
}

// da, db (at dy's shape) of Maximum or Minimum: dy goes to the side the forward op selected.
template <typename Pick>
void selection_grad(KernelContext& ctx) {
  const float* dy = ctx.inputs[0].data<float>();
  const float* a = ctx.inputs[1].data<float>();
  const float* b = ctx.inputs[2].data<float>();
  float* da = ctx.outputs[0].data<float>();
  float* db = ctx.outputs[1].data<float>();
  for_each_broadcast(ctx.outputs[0].shape(), ctx.inputs[1].shape(), ctx.inputs[2].shape(),
                     [&](int64_t o, int64_t ia, int64_t ib) {
                       const bool to_a = selects_a<Pick>(a[ia], b[ib]);
                       da[o] = to_a ? dy[o] : 0.0f;
                       db[o] = to_a ? 0.0f : dy[o];
                     });
}

// Sums x into `target` (which broadcasts to x's shape), writing float results to out.
void sum_into(const Tensor& x, const Shape& target, float* out) {
  std::vector<double> acc(static_cast<size_t>(num_elements(target)), 0.0);
  const float* px = x.data<float>();
  for_each_broadcast(x.shape(), x.shape(), target, [&](int64_t o, int64_t, int64_t it) {
    acc[static_cast<size_t>(it)] += px[o];
  });
  for (size_t i = 0; i < acc.size(); ++i) out[i] = static_cast<float>(acc[i]);
}

// Copies x (of shape `from`, which broadcasts to y's shape) into y, times `scale`.
void broadcast_into(const Tensor& x, const Shape& from, Tensor& y, float scale) {
  const float* px = x.data<float>();
  float* py = y.data<float>();
  for_each_broadcast(y.shape(), from, from,
                     [&](int64_t o, int64_t ix, int64_t) { py[o] = px[ix] * scale; });
}

std::vector<int64_t> node_axes(const KernelContext& ctx, int64_t rank) {
  std::optional<std::vector<int64_t>> axes = normalize_axes(ctx.node.attrs.get_ints("axes"), rank);
  SF_CHECK(axes.has_value(), "node '{}': axes were not checked", ctx.node.name);
  return *axes;
}

void reduce(KernelContext& ctx, bool mean) {
  const Tensor& x = ctx.inputs[0];
  std::vector<int64_t> axes = node_axes(ctx, x.rank());
  Shape kept = reduced_shape(x.shape(), axes, true);
  float* out = ctx.outputs[0].data<float>();
  sum_into(x, kept, out);
  if (mean) {
    const int64_t n = ctx.outputs[0].numel();
    const double count = n == 0 ? 1.0 : static_cast<double>(x.numel()) / static_cast<double>(n);
    // count is 0 when a reduced axis is empty: NaN, as NumPy's mean of nothing.
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(out[i] / count);
  }
}

// ReduceMax (Pick = std::greater) or ReduceMin (std::less) over the node's axes. `empty` is the
// result of reducing nothing (-inf for max); a NaN element wins and then stays.
template <typename Pick>
void reduce_extremum(KernelContext& ctx, float empty) {
  const Tensor& x = ctx.inputs[0];
  Shape kept = reduced_shape(x.shape(), node_axes(ctx, x.rank()), true);
  const float* px = x.data<float>();
  float* y = ctx.outputs[0].data<float>();
  std::fill(y, y + ctx.outputs[0].numel(), empty);
  for_each_broadcast(x.shape(), x.shape(), kept, [&](int64_t o, int64_t, int64_t k) {
    if (std::isnan(px[o]) || Pick{}(px[o], y[k])) y[k] = px[o];
  });
}

// dx = dy at the elements of x equal to the result y (NaN matching NaN), shared equally among
// those ties; 0 elsewhere.
void reduce_extremum_grad(KernelContext& ctx) {
  const float* dy = ctx.inputs[0].data<float>();
  const Tensor& x = ctx.inputs[1];
  const float* y = ctx.inputs[2].data<float>();
  Shape kept = reduced_shape(x.shape(), node_axes(ctx, x.rank()), true);
  const float* px = x.data<float>();
  float* dx = ctx.outputs[0].data<float>();
  auto is_result = [&](int64_t o, int64_t k) {
    return px[o] == y[k] || (std::isnan(px[o]) && std::isnan(y[k]));
  };
  std::vector<int64_t> ties(static_cast<size_t>(num_elements(kept)), 0);
  for_each_broadcast(x.shape(), x.shape(), kept, [&](int64_t o, int64_t, int64_t k) {
    if (is_result(o, k)) ++ties[static_cast<size_t>(k)];
  });
  for_each_broadcast(x.shape(), x.shape(), kept, [&](int64_t o, int64_t, int64_t k) {
    dx[o] = is_result(o, k) ? dy[k] / static_cast<float>(ties[static_cast<size_t>(k)]) : 0.0f;
  });
}

// AddN, and FusedAddN with its activation: each sum in double, inputs in order, rounded once.
void add_n(KernelContext& ctx) {
  const Activation activation = activation_of(ctx.node);
  float* y = ctx.outputs[0].data<float>();
  const int64_t n = ctx.outputs[0].numel();
  std::vector<const float*> xs;
  for (const Tensor& t : ctx.inputs) xs.push_back(t.data<float>());
  parallel_for(0, n, n >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
    for (int64_t i = share_begin; i < share_end; ++i) {
      double sum = 0.0;
      for (const float* x : xs) sum += x[i];
      y[i] = static_cast<float>(activated(sum, activation));
    }
  });
}

}  // namespace

void register_reference_math_kernels(KernelRegistry& r) {
  add_binary_kernels<float>(r, DType::f32);
  add_binary_kernels<int32_t>(r, DType::i32);
  add_binary_kernels<int64_t>(r, DType::i64);
  add_binary_kernels<int8_t>(r, DType::i8);
  add_binary_kernels<uint8_t>(r, DType::u8);
  r.add(simple_kernel(op_names::kDiv, DType::f32, "reference", [](KernelContext& ctx) {
    binary<float>(ctx, [](float a, float b) { return a / b; });
  }));
  r.add(simple_kernel(op_names::kDiv, DType::i32, "reference", integer_div<int32_t>));
  r.add(simple_kernel(op_names::kDiv, DType::i64, "reference", integer_div<int64_t>));
  r.add(simple_kernel(op_names::kDiv, DType::i8, "reference", integer_div<int8_t>));
  r.add(simple_kernel(op_names::kDiv, DType::u8, "reference", integer_div<uint8_t>));
  r.add(simple_kernel(op_names::kAddN, DType::f32, "reference", add_n));
  r.add(simple_kernel(op_names::kFusedAddN, DType::f32, "reference", add_n));
  r.add(simple_kernel(op_names::kSumTo, DType::f32, "reference", [](KernelContext& ctx) {
    sum_into(ctx.inputs[0], ctx.outputs[0].shape(), ctx.outputs[0].data<float>());
  }));
  r.add(simple_kernel(op_names::kBroadcastTo, DType::f32, "reference", [](KernelContext& ctx) {
    const Tensor& x = ctx.inputs[0];
    const std::vector<int64_t>& axes = ctx.node.attrs.get_ints("axes");
    Shape from =
        axes.empty()
            ? x.shape()
            : expand_shape(x.shape(), node_axes(ctx, x.rank() + static_cast<int64_t>(axes.size())));
    broadcast_into(x, from, ctx.outputs[0], 1.0f);
  }));
  r.add(simple_kernel(op_names::kReduceSum, DType::f32, "reference",
                      [](KernelContext& ctx) { reduce(ctx, false); }));
  r.add(simple_kernel(op_names::kReduceMean, DType::f32, "reference",
                      [](KernelContext& ctx) { reduce(ctx, true); }));
  r.add(simple_kernel(op_names::kReduceMax, DType::f32, "reference", [](KernelContext& ctx) {
    reduce_extremum<std::greater<>>(ctx, -std::numeric_limits<float>::infinity());
  }));
  r.add(simple_kernel(op_names::kReduceMin, DType::f32, "reference", [](KernelContext& ctx) {
    reduce_extremum<std::less<>>(ctx, std::numeric_limits<float>::infinity());
  }));
  r.add(
      simple_kernel(op_names::kReduceExtremumGrad, DType::f32, "reference", reduce_extremum_grad));
  r.add(simple_kernel(op_names::kMaximumGrad, DType::f32, "reference",
                      selection_grad<std::greater_equal<>>));
  r.add(simple_kernel(op_names::kMinimumGrad, DType::f32, "reference",
                      selection_grad<std::less_equal<>>));
  r.add(simple_kernel(op_names::kRound, DType::f32, "reference", [](KernelContext& ctx) {
    const float* x = ctx.inputs[0].data<float>();
    float* y = ctx.outputs[0].data<float>();
    const int64_t n = ctx.outputs[0].numel();
    // nearbyint rounds in the default mode, to nearest with ties to even, as ONNX asks.
    for (int64_t i = 0; i < n; ++i) y[i] = std::nearbyint(x[i]);
  }));
  r.add(simple_kernel(op_names::kReduceMeanGrad, DType::f32, "reference", [](KernelContext& ctx) {
    const Tensor& dy = ctx.inputs[0];
    const Tensor& x = ctx.inputs[1];
    Shape kept = reduced_shape(x.shape(), node_axes(ctx, x.rank()), true);
    const int64_t n = num_elements(kept);
    const double count = n == 0 ? 1.0 : static_cast<double>(x.numel()) / static_cast<double>(n);
    broadcast_into(dy, kept, ctx.outputs[0], static_cast<float>(1.0 / count));
  }));
}

}  // namespace sf
