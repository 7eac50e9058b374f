// Reference kernels for elementwise arithmetic, sums and reductions. Broadcasting walks the
// shapes with for_each_broadcast (ops/broadcast.h); sums accumulate in double, in a fixed
// order, so results do not depend on the thread count.
#include <vector>

#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/broadcast.h"

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
#pragma omp parallel for if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) py[i] = op(pa[i], pb[i]);
    return;
  }
  for_each_broadcast(y.shape(), a.shape(), b.shape(),
                     [&](int64_t o, int64_t ia, int64_t ib) { py[o] = op(pa[ia], pb[ib]); });
}

template <typename T>
void add_binary_kernels(KernelRegistry& r, DType dtype) {
  r.add(simple_kernel("Add", dtype, "reference", [](KernelContext& ctx) {
    binary<T>(ctx, [](T a, T b) { return static_cast<T>(a + b); });
  }));
  r.add(simple_kernel("Sub", dtype, "reference", [](KernelContext& ctx) {
    binary<T>(ctx, [](T a, T b) { return static_cast<T>(a - b); });
  }));
  r.add(simple_kernel("Mul", dtype, "reference", [](KernelContext& ctx) {
    binary<T>(ctx, [](T a, T b) { return static_cast<T>(a * b); });
  }));
  r.add(simple_kernel("Neg", dtype, "reference", [](KernelContext& ctx) {
    const T* x = ctx.inputs[0].data<T>();
    T* y = ctx.outputs[0].data<T>();
    const int64_t n = ctx.outputs[0].numel();
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(-x[i]);
  }));
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

}  // namespace

void register_reference_math_kernels(KernelRegistry& r) {
  add_binary_kernels<float>(r, DType::f32);
  add_binary_kernels<int32_t>(r, DType::i32);
  add_binary_kernels<int64_t>(r, DType::i64);
  r.add(simple_kernel("Div", DType::f32, "reference", [](KernelContext& ctx) {
    binary<float>(ctx, [](float a, float b) { return a / b; });
  }));
  r.add(simple_kernel("AddN", DType::f32, "reference", [](KernelContext& ctx) {
    float* y = ctx.outputs[0].data<float>();
    const int64_t n = ctx.outputs[0].numel();
    std::vector<const float*> xs;
    for (const Tensor& t : ctx.inputs) xs.push_back(t.data<float>());
#pragma omp parallel for if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0.0;
      for (const float* x : xs) sum += x[i];
      y[i] = static_cast<float>(sum);
    }
  }));
  r.add(simple_kernel("SumTo", DType::f32, "reference", [](KernelContext& ctx) {
    sum_into(ctx.inputs[0], ctx.outputs[0].shape(), ctx.outputs[0].data<float>());
  }));
  r.add(simple_kernel("BroadcastTo", DType::f32, "reference", [](KernelContext& ctx) {
    const Tensor& x = ctx.inputs[0];
    const std::vector<int64_t>& axes = ctx.node.attrs.get_ints("axes");
    Shape from =
        axes.empty()
            ? x.shape()
            : expand_shape(x.shape(), node_axes(ctx, x.rank() + static_cast<int64_t>(axes.size())));
    broadcast_into(x, from, ctx.outputs[0], 1.0f);
  }));
  r.add(simple_kernel("ReduceSum", DType::f32, "reference",
                      [](KernelContext& ctx) { reduce(ctx, false); }));
  r.add(simple_kernel("ReduceMean", DType::f32, "reference",
                      [](KernelContext& ctx) { reduce(ctx, true); }));
  r.add(simple_kernel("ReduceMeanGrad", DType::f32, "reference", [](KernelContext& ctx) {
    const Tensor& dy = ctx.inputs[0];
    const Tensor& x = ctx.inputs[1];
    Shape kept = reduced_shape(x.shape(), node_axes(ctx, x.rank()), true);
    const int64_t n = num_elements(kept);
    const double count = n == 0 ? 1.0 : static_cast<double>(x.numel()) / static_cast<double>(n);
    broadcast_into(dy, kept, ctx.outputs[0], static_cast<float>(1.0 / count));
  }));
}

}  // namespace sf
