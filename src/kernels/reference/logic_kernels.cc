// Reference kernels for the comparisons, mask logic and Where of logic_ops.cc. Masks are u8
// 0/1; a nonzero mask element counts as true.
#include <functional>

#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/broadcast.h"
#include "ops/op_names.h"

namespace sf {

namespace {

template <typename T, typename Op>
void compare(KernelContext& ctx, Op op) {
  const T* a = ctx.inputs[0].data<T>();
  const T* b = ctx.inputs[1].data<T>();
  uint8_t* y = ctx.outputs[0].data<uint8_t>();
  for_each_broadcast(ctx.outputs[0].shape(), ctx.inputs[0].shape(), ctx.inputs[1].shape(),
                     [&](int64_t o, int64_t ia, int64_t ib) { y[o] = op(a[ia], b[ib]) ? 1 : 0; });
}

template <typename T>
void add_comparisons(KernelRegistry& r, DType dtype) {
  const auto add = [&](const char* op, auto predicate) {
    r.add(simple_kernel(op, dtype, "reference",
                        [predicate](KernelContext& ctx) { compare<T>(ctx, predicate); }));
  };
  add(op_names::kEqual, std::equal_to<T>{});
  add(op_names::kLess, std::less<T>{});
  add(op_names::kGreater, std::greater<T>{});
  add(op_names::kLessOrEqual, std::less_equal<T>{});
  add(op_names::kGreaterOrEqual, std::greater_equal<T>{});
}

// y = condition ? x : y over the broadcast of all three.
template <typename T>
void where(KernelContext& ctx) {
  const Shape& out = ctx.outputs[0].shape();
  const uint8_t* c = ctx.inputs[0].data<uint8_t>();
  const T* x = ctx.inputs[1].data<T>();
  const T* y = ctx.inputs[2].data<T>();
  T* o = ctx.outputs[0].data<T>();
  const std::vector<int64_t> sc = broadcast_strides(ctx.inputs[0].shape(), out);
  const std::vector<int64_t> sx = broadcast_strides(ctx.inputs[1].shape(), out);
  const std::vector<int64_t> sy = broadcast_strides(ctx.inputs[2].shape(), out);
  const int64_t total = num_elements(out);
  for (int64_t i = 0; i < total; ++i) {
    int64_t rest = i, ic = 0, ix = 0, iy = 0;
    for (size_t d = out.size(); d-- > 0;) {
      const int64_t at = rest % out[d];
      rest /= out[d];
      ic += at * sc[d];
      ix += at * sx[d];
      iy += at * sy[d];
    }
    o[i] = c[ic] ? x[ix] : y[iy];
  }
}

}  // namespace

void register_reference_logic_kernels(KernelRegistry& r) {
  add_comparisons<float>(r, DType::f32);
  add_comparisons<int32_t>(r, DType::i32);
  add_comparisons<int64_t>(r, DType::i64);
  add_comparisons<uint8_t>(r, DType::u8);
  add_comparisons<int8_t>(r, DType::i8);
  const auto logic = [&](const char* op, auto combine) {
    r.add(simple_kernel(op, DType::u8, "reference", [combine](KernelContext& ctx) {
      compare<uint8_t>(ctx, [combine](uint8_t a, uint8_t b) { return combine(a != 0, b != 0); });
    }));
  };
  logic(op_names::kAnd, std::logical_and<bool>{});
  logic(op_names::kOr, std::logical_or<bool>{});
  logic(op_names::kXor, std::not_equal_to<bool>{});
  r.add(simple_kernel(op_names::kNot, DType::u8, "reference", [](KernelContext& ctx) {
    const uint8_t* x = ctx.inputs[0].data<uint8_t>();
    uint8_t* y = ctx.outputs[0].data<uint8_t>();
    for (int64_t i = 0; i < ctx.outputs[0].numel(); ++i) y[i] = x[i] ? 0 : 1;
  }));
  // Keyed by the condition's dtype (u8); the values' dtype picks the loop.
  r.add(simple_kernel(op_names::kWhere, DType::u8, "reference", [](KernelContext& ctx) {
    switch (ctx.inputs[1].dtype()) {
      case DType::f32:
        return where<float>(ctx);
      case DType::i32:
        return where<int32_t>(ctx);
      case DType::i64:
        return where<int64_t>(ctx);
      case DType::u8:
        return where<uint8_t>(ctx);
      case DType::i8:
        return where<int8_t>(ctx);
    }
  }));
}

}  // namespace sf
