// Ops of binarized training (declared in ops/binary_ops.h).
#include "ops/binary_ops.h"

#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/register.h"

namespace sf {

namespace {

std::vector<TensorType> infer_binarize_weights(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "w");
  if (ctx.shape(0).empty()) ctx.fail("w must have rank 1 or more (channels last), got a scalar");
  const std::string mode = ctx.attrs().get_string("mode");
  if (mode != "binary" && mode != "ternary")
    ctx.fail("mode '{}' must be binary or ternary", mode);
  return {ctx.input(0)};
}

std::vector<TensorType> infer_binarize_activation(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  return {ctx.input(0)};
}

std::vector<TensorType> infer_straight_through_grad(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "dy");
  if (ctx.input(0) != ctx.input(1))
    ctx.fail("dy {} vs x {}: types differ", type_str(ctx.input(0)), type_str(ctx.input(1)));
  return {ctx.input(0)};
}

// The straight-through gradient of both ops: dy where |x| <= 1.
std::vector<Output> straight_through(GradContext& ctx) {
  if (!ctx.grad().valid()) return {Output{}};
  return {ctx.graph.add(op_names::kStraightThroughGrad, {ctx.grad(), ctx.input(0)}, {},
                        ctx.name("dx"))};
}

}  // namespace

void register_binary_ops(OpRegistry& r) {
  r.add(OpDef{.name = op_names::kBinarizeWeights,
              .inputs = {"w"},
              .attrs = {{"mode", AttrKind::String, AttrValue{std::string("binary")}}},
              .infer = infer_binarize_weights,
              .grad = straight_through});
  r.add(OpDef{.name = op_names::kBinarizeActivation,
              .inputs = {"x"},
              .infer = infer_binarize_activation,
              .grad = straight_through});
  r.add(OpDef{.name = op_names::kStraightThroughGrad,
              .inputs = {"dy", "x"},
              .infer = infer_straight_through_grad});
}

namespace ops {

Output binarize_weights(Graph& g, Output w, bool ternary, const std::string& name) {
  return g.add(op_names::kBinarizeWeights, {w},
               {{"mode", std::string(ternary ? "ternary" : "binary")}}, name);
}

Output binarize_activation(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kBinarizeActivation, {x}, {}, name);
}

}  // namespace ops

}  // namespace sf
