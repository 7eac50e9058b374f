// Reference kernels for the array ops. Copies are byte-wise, so one kernel serves every dtype.
#include <cstring>

#include "core/saturating_cast.h"
#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/op_names.h"

namespace sf {

namespace {

constexpr DType kAllDTypes[] = {DType::f32, DType::i32, DType::i64, DType::u8, DType::i8};

void copy(KernelContext& ctx) { ctx.outputs[0].copy_from(ctx.inputs[0]); }

// Rows before `axis` and bytes per unit step along it, for row-major block copies.
void split_at(const Tensor& t, int64_t axis, int64_t& outer, size_t& unit_bytes) {
  outer = 1;
  int64_t inner = 1;
  for (int d = 0; d < t.rank(); ++d) {
    if (d < axis) outer *= t.dim(d);
    if (d > axis) inner *= t.dim(d);
  }
  unit_bytes = static_cast<size_t>(inner) * dtype_size(t.dtype());
}

int64_t node_axis(const KernelContext& ctx, int rank) {
  int64_t axis = ctx.node.attrs.get_int("axis");
  return axis < 0 ? axis + rank : axis;
}

void concat(KernelContext& ctx) {
  Tensor& y = ctx.outputs[0];
  const int64_t axis = node_axis(ctx, y.rank());
  int64_t outer;
  size_t unit;
  split_at(y, axis, outer, unit);
  const size_t row = unit * static_cast<size_t>(y.dim(static_cast<int>(axis)));
  char* out = static_cast<char*>(y.raw());
  size_t offset = 0;
  for (const Tensor& x : ctx.inputs) {
    const size_t chunk = unit * static_cast<size_t>(x.dim(static_cast<int>(axis)));
    const char* in = static_cast<const char*>(x.raw());
    for (int64_t o = 0; o < outer; ++o)
      if (chunk > 0)
        std::memcpy(out + static_cast<size_t>(o) * row + offset,
                    in + static_cast<size_t>(o) * chunk, chunk);
    offset += chunk;
  }
}

void slice(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t axis = node_axis(ctx, x.rank());
  int64_t outer;
  size_t unit;
  split_at(x, axis, outer, unit);
  const size_t row = unit * static_cast<size_t>(x.dim(static_cast<int>(axis)));
  const size_t begin = unit * static_cast<size_t>(ctx.node.attrs.get_int("begin"));
  const size_t chunk = unit * static_cast<size_t>(ctx.outputs[0].dim(static_cast<int>(axis)));
  const char* in = static_cast<const char*>(x.raw());
  char* out = static_cast<char*>(ctx.outputs[0].raw());
  for (int64_t o = 0; o < outer; ++o)
    if (chunk > 0)
      std::memcpy(out + static_cast<size_t>(o) * chunk, in + static_cast<size_t>(o) * row + begin,
                  chunk);
}

template <typename From, typename To>
void cast_as(const Tensor& x, Tensor& y) {
  const From* in = x.data<From>();
  To* out = y.data<To>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = saturating_cast<To>(in[i]);
}

template <typename From>
void cast_from(const Tensor& x, Tensor& y) {
  switch (y.dtype()) {
    case DType::f32:
      return cast_as<From, float>(x, y);
    case DType::i32:
      return cast_as<From, int32_t>(x, y);
    case DType::i64:
      return cast_as<From, int64_t>(x, y);
    case DType::u8:
      return cast_as<From, uint8_t>(x, y);
    case DType::i8:
      return cast_as<From, int8_t>(x, y);
  }
}

void cast(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  Tensor& y = ctx.outputs[0];
  switch (x.dtype()) {
    case DType::f32:
      return cast_from<float>(x, y);
    case DType::i32:
      return cast_from<int32_t>(x, y);
    case DType::i64:
      return cast_from<int64_t>(x, y);
    case DType::u8:
      return cast_from<uint8_t>(x, y);
    case DType::i8:
      return cast_from<int8_t>(x, y);
  }
}

// The tensor comes from the other device as it is: no copy.
void recv(KernelContext& ctx) {
  SF_CHECK(ctx.transfers != nullptr, "node '{}': a Recv outside a partitioned graph",
           ctx.node.name);
  Tensor value = ctx.transfers->receive(ctx.node);
  const TensorType& want = ctx.node.outputs[0];
  if (value.dtype() != want.dtype || value.shape() != want.shape)
    fail("edge '{}': Recv '{}' on {} expects {}, got {}{}", ctx.node.attrs.get_string("edge"),
         ctx.node.name, ctx.node.device, type_str(want), dtype_name(value.dtype()),
         shape_str(value.shape()));
  ctx.outputs.assign(1, std::move(value));
}

}  // namespace

void register_reference_array_kernels(KernelRegistry& r) {
  for (DType dtype : kAllDTypes) {
    r.add(simple_kernel(op_names::kRecv, dtype, "reference", recv));
    r.add(simple_kernel(op_names::kIdentity, dtype, "reference", copy));
    r.add(simple_kernel(op_names::kReshape, dtype, "reference", copy));
    r.add(simple_kernel(op_names::kFlatten, dtype, "reference", copy));
    r.add(simple_kernel(op_names::kConcat, dtype, "reference", concat));
    r.add(simple_kernel(op_names::kSlice, dtype, "reference", slice));
    r.add(simple_kernel(op_names::kCast, dtype, "reference", cast));
  }
}

}  // namespace sf
