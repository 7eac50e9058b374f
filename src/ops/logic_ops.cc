// Comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual), logic on masks (And, Or, Xor,
// Not) and Where. A mask is a u8 tensor of 0s and 1s: ONNX's bool tensors are imported as such.
// Comparisons and logic have no gradient; Where passes dy to the side each element came from.
#include "graph/op_registry.h"
#include "ops/broadcast.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

Shape broadcast_or_fail(const InferContext& ctx, const Shape& a, const Shape& b) {
  std::optional<Shape> shape = broadcast_shapes(a, b);
  if (!shape) ctx.fail("shapes do not broadcast: {} vs {}", shape_str(a), shape_str(b));
  return *shape;
}

std::vector<TensorType> infer_comparison(const InferContext& ctx) {
  if (ctx.dtype(0) != ctx.dtype(1))
    ctx.fail("dtypes differ: a {} vs b {}", type_str(ctx.input(0)), type_str(ctx.input(1)));
  return {TensorType{DType::u8, broadcast_or_fail(ctx, ctx.shape(0), ctx.shape(1))}};
}

std::vector<TensorType> infer_logic(const InferContext& ctx) {
  for (int i = 0; i < ctx.num_inputs(); ++i) ctx.expect_dtype(i, DType::u8, "mask");
  if (ctx.num_inputs() == 1) return {ctx.input(0)};
  return {TensorType{DType::u8, broadcast_or_fail(ctx, ctx.shape(0), ctx.shape(1))}};
}

std::vector<TensorType> infer_where(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::u8, "condition");
  if (ctx.dtype(1) != ctx.dtype(2))
    ctx.fail("dtypes differ: x {} vs y {}", type_str(ctx.input(1)), type_str(ctx.input(2)));
  const Shape xy = broadcast_or_fail(ctx, ctx.shape(1), ctx.shape(2));
  return {TensorType{ctx.dtype(1), broadcast_or_fail(ctx, ctx.shape(0), xy)}};
}

// dx = dy where the condition holds, dy' = dy elsewhere, each summed to its input's shape.
std::vector<Output> grad_where(GradContext& ctx) {
  Graph& g = ctx.graph;
  Output taken = ops::cast(g, ctx.input(0), DType::f32, ctx.name("taken"));
  Output dx = ops::mul(g, ctx.grad(), taken, ctx.name("dy_x"));
  Output dy = ops::sub(g, ctx.grad(), dx, ctx.name("dy_y"));
  const auto to_input = [&](Output grad, int i, const std::string& suffix) {
    if (g.type(grad).shape == g.type(ctx.input(i)).shape) return grad;
    return ops::sum_to_like(g, grad, ctx.input(i), ctx.name(suffix));
  };
  return {Output{}, to_input(dx, 1, "dx"), to_input(dy, 2, "dy")};
}

}  // namespace

void register_logic_ops(OpRegistry& r) {
  for (const char* name : {op_names::kEqual, op_names::kLess, op_names::kGreater,
                           op_names::kLessOrEqual, op_names::kGreaterOrEqual})
    r.add(OpDef{.name = name, .inputs = {"a", "b"}, .infer = infer_comparison});
  for (const char* name : {op_names::kAnd, op_names::kOr, op_names::kXor})
    r.add(OpDef{.name = name, .inputs = {"a", "b"}, .infer = infer_logic});
  r.add(OpDef{.name = op_names::kNot, .inputs = {"x"}, .infer = infer_logic});
  r.add(OpDef{.name = op_names::kWhere,
              .inputs = {"condition", "x", "y"},
              .infer = infer_where,
              .grad = grad_where});
}

namespace ops {

Output where(Graph& g, Output condition, Output x, Output y, const std::string& name) {
  return g.add(op_names::kWhere, {condition, x, y}, {}, name);
}

}  // namespace ops
}  // namespace sf
