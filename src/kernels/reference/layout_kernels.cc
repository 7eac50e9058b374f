// Reference kernels for the layout ops (layout_ops.cc): Transpose, Pad, StridedSlice, Gather.
// Each walks the output in row-major order and reads the input element it comes from; the
// index geometry is ops/layout_geometry.h, the same code the shape functions use. The gradients
// (StridedSliceGrad, GatherGrad) walk dy the same way and write or add where it came from.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/layout_geometry.h"
#include "ops/op_names.h"

namespace sf {

namespace {

// Row-major element strides of `shape`.
std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// Calls fn(o, index) for every element o of `shape`, index being its coordinates.
template <typename Fn>
void for_each_index(const Shape& shape, Fn fn) {
  const int64_t total = num_elements(shape);
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t o = 0; o < total; ++o) {
    fn(o, index);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

template <typename T>
void transpose(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  std::vector<int64_t> perm;
  std::string err = transpose_perm(ctx.node.attrs.get_ints("perm"), x.rank(), &perm);
  SF_CHECK(err.empty(), "{}", err);
  const std::vector<int64_t> xs = strides_of(x.shape());
  const T* in = x.data<T>();
  T* out = ctx.outputs[0].data<T>();
  for_each_index(ctx.outputs[0].shape(), [&](int64_t o, const std::vector<int64_t>& index) {
    int64_t i = 0;
    for (size_t d = 0; d < perm.size(); ++d) i += index[d] * xs[static_cast<size_t>(perm[d])];
    out[o] = in[i];
  });
}

// The pad value as T; integer outputs clamp it to their range instead of overflowing.
template <typename T>
T pad_value(double value) {
  if constexpr (std::is_integral_v<T>)
    value = std::clamp(value, static_cast<double>(std::numeric_limits<T>::lowest()),
                       static_cast<double>(std::numeric_limits<T>::max()));
  return static_cast<T>(value);
}

template <typename T>
void pad(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Attrs& a = ctx.node.attrs;
  const std::vector<int64_t>& pads = a.get_ints("pads");
  const std::string& mode = a.get_string("mode");
  const T value = pad_value<T>(a.get_float("value"));
  const size_t rank = static_cast<size_t>(x.rank());
  const std::vector<int64_t> xs = strides_of(x.shape());
  const T* in = x.data<T>();
  T* out = ctx.outputs[0].data<T>();
  for_each_index(ctx.outputs[0].shape(), [&](int64_t o, const std::vector<int64_t>& index) {
    int64_t i = 0;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t n = x.dim(static_cast<int>(d));
      int64_t src = index[d] - pads[d];
      if (src < 0 || src >= n) {
        if (mode == "constant") {
          out[o] = value;
          return;
        }
        // reflect mirrors about the edge element (which is not repeated); edge repeats it.
        if (mode == "reflect")
          src = src < 0 ? -src : 2 * (n - 1) - src;
        else
          src = std::clamp<int64_t>(src, 0, n - 1);
      }
      i += src * xs[d];
    }
    out[o] = in[i];
  });
}

template <typename T>
void strided_slice(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Attrs& a = ctx.node.attrs;
  std::vector<SliceAxis> ranges;
  std::string err = slice_ranges(x.shape(), a.get_ints("starts"), a.get_ints("ends"),
                                 a.get_ints("axes"), a.get_ints("steps"), &ranges);
  SF_CHECK(err.empty(), "{}", err);
  const std::vector<int64_t> xs = strides_of(x.shape());
  const T* in = x.data<T>();
  T* out = ctx.outputs[0].data<T>();
  for_each_index(ctx.outputs[0].shape(), [&](int64_t o, const std::vector<int64_t>& index) {
    int64_t i = 0;
    for (size_t d = 0; d < ranges.size(); ++d)
      i += (ranges[d].start + index[d] * ranges[d].step) * xs[d];
    out[o] = in[i];
  });
}

// dx = zeros of x's shape (input 1) with dy written where StridedSlice read it.
void strided_slice_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.inputs[0];
  const Tensor& x = ctx.inputs[1];
  const Attrs& a = ctx.node.attrs;
  std::vector<SliceAxis> ranges;
  std::string err = slice_ranges(x.shape(), a.get_ints("starts"), a.get_ints("ends"),
                                 a.get_ints("axes"), a.get_ints("steps"), &ranges);
  SF_CHECK(err.empty(), "{}", err);
  const std::vector<int64_t> xs = strides_of(x.shape());
  const float* in = dy.data<float>();
  float* out = ctx.outputs[0].data<float>();
  std::fill_n(out, ctx.outputs[0].numel(), 0.0f);
  // Each x element is read at most once, so writes never collide.
  for_each_index(dy.shape(), [&](int64_t o, const std::vector<int64_t>& index) {
    int64_t i = 0;
    for (size_t d = 0; d < ranges.size(); ++d)
      i += (ranges[d].start + index[d] * ranges[d].step) * xs[d];
    out[i] = in[o];
  });
}

// Gather's view of x as [outer, n, inner] around `axis`, with the indices resolved (negative
// ones count from the end): row `rows[j]` of each outer slice of x is row j of that slice of y.
struct GatherRows {
  int64_t outer = 1, n = 0, inner = 1;
  std::vector<int64_t> rows;
};

// Indices are data, not attributes, so they are only checked when a kernel reads them; the
// range check names the node and the op that ran.
template <typename I>
GatherRows resolve_gather_rows_as(const KernelContext& ctx, const Shape& x_shape,
                                  const Tensor& indices) {
  int64_t axis = ctx.node.attrs.get_int("axis");
  if (axis < 0) axis += static_cast<int64_t>(x_shape.size());
  GatherRows g;
  for (size_t d = 0; d < x_shape.size(); ++d) {
    if (static_cast<int64_t>(d) < axis) g.outer *= x_shape[d];
    if (static_cast<int64_t>(d) > axis) g.inner *= x_shape[d];
  }
  g.n = x_shape[static_cast<size_t>(axis)];
  const I* idx = indices.data<I>();
  g.rows.resize(static_cast<size_t>(indices.numel()));
  for (size_t j = 0; j < g.rows.size(); ++j) {
    const int64_t k = idx[j] < 0 ? idx[j] + g.n : idx[j];
    if (k < 0 || k >= g.n)
      fail("node '{}' ({}): index {} is out of range for axis {} of x {}", ctx.node.name,
           ctx.node.op, static_cast<int64_t>(idx[j]), axis, shape_str(x_shape));
    g.rows[j] = k;
  }
  return g;
}

GatherRows resolve_gather_rows(const KernelContext& ctx, const Shape& x_shape,
                               const Tensor& indices) {
  return indices.dtype() == DType::i32 ? resolve_gather_rows_as<int32_t>(ctx, x_shape, indices)
                                       : resolve_gather_rows_as<int64_t>(ctx, x_shape, indices);
}

template <typename T>
void gather(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const GatherRows g = resolve_gather_rows(ctx, x.shape(), ctx.inputs[1]);
  const int64_t count = static_cast<int64_t>(g.rows.size());
  const T* in = x.data<T>();
  T* out = ctx.outputs[0].data<T>();
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t j = 0; j < count; ++j)
      std::copy_n(in + (o * g.n + g.rows[static_cast<size_t>(j)]) * g.inner, g.inner,
                  out + (o * count + j) * g.inner);
}

// dx = zeros of x's shape (input 1) plus each row of dy at the index it was gathered from;
// repeated indices add up.
void gather_grad(KernelContext& ctx) {
  const GatherRows g = resolve_gather_rows(ctx, ctx.inputs[1].shape(), ctx.inputs[2]);
  const int64_t count = static_cast<int64_t>(g.rows.size());
  const float* in = ctx.inputs[0].data<float>();
  float* out = ctx.outputs[0].data<float>();
  std::fill_n(out, ctx.outputs[0].numel(), 0.0f);
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t j = 0; j < count; ++j) {
      const float* from = in + (o * count + j) * g.inner;
      float* to = out + (o * g.n + g.rows[static_cast<size_t>(j)]) * g.inner;
      for (int64_t e = 0; e < g.inner; ++e) to[e] += from[e];
    }
}

template <typename T>
void add_layout_kernels(KernelRegistry& r) {
  const DType dtype = dtype_of<T>();
  r.add(simple_kernel(op_names::kTranspose, dtype, "reference", transpose<T>));
  r.add(simple_kernel(op_names::kPad, dtype, "reference", pad<T>));
  r.add(simple_kernel(op_names::kStridedSlice, dtype, "reference", strided_slice<T>));
  r.add(simple_kernel(op_names::kGather, dtype, "reference", gather<T>));
}

}  // namespace

void register_reference_layout_kernels(KernelRegistry& r) {
  add_layout_kernels<float>(r);
  r.add(simple_kernel(op_names::kStridedSliceGrad, DType::f32, "reference", strided_slice_grad));
  r.add(simple_kernel(op_names::kGatherGrad, DType::f32, "reference", gather_grad));
  add_layout_kernels<int32_t>(r);
  add_layout_kernels<int64_t>(r);
  add_layout_kernels<uint8_t>(r);
  add_layout_kernels<int8_t>(r);
}

}  // namespace sf
