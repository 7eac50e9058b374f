// Activations. Each gradient is one grad op (ReluGrad, ...) that takes dy and whichever of x
// or y the derivative is cheapest from; grad ops are not differentiable themselves.
#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

std::vector<TensorType> infer_unary(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  return {ctx.input(0)};
}

std::vector<TensorType> infer_grad(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "dy");
  if (ctx.input(0) != ctx.input(1))
    ctx.fail("dy {} vs {} {}: types differ", type_str(ctx.input(0)), ctx.node().op,
             type_str(ctx.input(1)));
  return {ctx.input(0)};
}

// Declares `name` and its grad op `grad_op`(dy, x or y).
void add_activation(OpRegistry& r, const std::string& name, const std::string& grad_op,
                    bool grad_from_output, InferFn infer = infer_unary) {
  r.add(OpDef{.name = name,
              .inputs = {"x"},
              .infer = std::move(infer),
              .grad = [grad_op, grad_from_output](GradContext& ctx) -> std::vector<Output> {
                Output saved = grad_from_output ? ctx.output(0) : ctx.input(0);
                return {ctx.graph.add(grad_op, {ctx.grad(), saved}, {}, ctx.name("dx"))};
              }});
  r.add(
      OpDef{.name = grad_op, .inputs = {"dy", grad_from_output ? "y" : "x"}, .infer = infer_grad});
}

}  // namespace

void register_activation_ops(OpRegistry& r) {
  add_activation(r, op_names::kRelu, op_names::kReluGrad, false);
  add_activation(r, op_names::kRelu6, op_names::kRelu6Grad, false);
  add_activation(r, op_names::kSigmoid, op_names::kSigmoidGrad, true);
  add_activation(r, op_names::kTanh, op_names::kTanhGrad, true);
  add_activation(r, op_names::kSoftmax, op_names::kSoftmaxGrad, true,
                 [](const InferContext& ctx) -> std::vector<TensorType> {
                   ctx.expect_dtype(0, DType::f32, "x");
                   if (ctx.shape(0).empty()) ctx.fail("x must have rank 1 or more, got a scalar");
                   return {ctx.input(0)};
                 });
  r.add(OpDef{.name = op_names::kGelu,
              .inputs = {"x"},
              .infer = infer_unary,
              .grad = inference_only_gradient});
}

namespace ops {

Output relu(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kRelu, {x}, {}, name);
}
Output relu6(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kRelu6, {x}, {}, name);
}
Output sigmoid(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kSigmoid, {x}, {}, name);
}
Output tanh(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kTanh, {x}, {}, name);
}
Output gelu(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kGelu, {x}, {}, name);
}
Output softmax(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kSoftmax, {x}, {}, name);
}

}  // namespace ops
}  // namespace sf
