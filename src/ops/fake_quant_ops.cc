// Ops of quantization-aware training (declared in ops/fake_quant_ops.h).
#include "ops/fake_quant_ops.h"

#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/register.h"

namespace sf {

namespace {

std::vector<TensorType> infer_fake_quant_weights(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "w");
  if (ctx.shape(0).empty()) ctx.fail("w must have rank 1 or more (channels last), got a scalar");
  const int64_t bits = ctx.attrs().get_int("bits");
  if (bits < 2 || bits > 8) ctx.fail("bits {} is outside [2, 8]", bits);
  return {ctx.input(0)};
}

void expect_range(const InferContext& ctx, int i, const char* what) {
  ctx.expect_dtype(i, DType::f32, what);
  if (ctx.shape(i) != Shape{2})
    ctx.fail("input '{}' must be f32[2] = [min, max], got {}", what, shape_str(ctx.shape(i)));
}

std::vector<TensorType> infer_fake_quant_activation(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  expect_range(ctx, 1, "range");
  return {ctx.input(0), TensorType{DType::f32, {2}}};
}

std::vector<TensorType> infer_fake_quant_activation_grad(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "dy");
  if (ctx.input(0) != ctx.input(1))
    ctx.fail("dy {} vs x {}: types differ", type_str(ctx.input(0)), type_str(ctx.input(1)));
  expect_range(ctx, 2, "range");
  expect_range(ctx, 3, "observed");
  return {ctx.input(0)};
}

}  // namespace

void register_fake_quant_ops(OpRegistry& r) {
  r.add(OpDef{.name = op_names::kFakeQuantWeights,
              .inputs = {"w"},
              .attrs = {{"bits", AttrKind::Int, AttrValue{int64_t{8}}}},
              .infer = infer_fake_quant_weights,
              .grad = [](GradContext& ctx) -> std::vector<Output> { return {ctx.grad()}; }});
  r.add(OpDef{.name = op_names::kFakeQuantActivation,
              .inputs = {"x", "range"},
              .infer = infer_fake_quant_activation,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                if (!ctx.grad(0).valid()) return {Output{}, Output{}};
                Output dx = ctx.graph.add(op_names::kFakeQuantActivationGrad,
                                          {ctx.grad(0), ctx.input(0), ctx.input(1), ctx.output(1)},
                                          {}, ctx.name("dx"));
                return {dx, Output{}};
              }});
  r.add(OpDef{.name = op_names::kFakeQuantActivationGrad,
              .inputs = {"dy", "x", "range", "observed"},
              .infer = infer_fake_quant_activation_grad});
}

namespace ops {

Output fake_quant_weights(Graph& g, Output w, int64_t bits, const std::string& name) {
  return g.add(op_names::kFakeQuantWeights, {w}, {{"bits", bits}}, name);
}

Output fake_quant_activation(Graph& g, Output x, Output range, const std::string& name) {
  return g.add(op_names::kFakeQuantActivation, {x, range}, {}, name);
}

}  // namespace ops

}  // namespace sf
