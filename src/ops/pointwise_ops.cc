// Elementwise ops the ONNX importer needs: Pow (NumPy broadcasting), Sqrt, Exp, Log, Erf, Clip and
// the piecewise activations LeakyRelu, PRelu, HardSigmoid and HardSwish. Smooth gradients are
// written with other ops; piecewise ones use a grad op taking (dy, x) and the forward attrs.
#include "graph/op_registry.h"
#include "ops/broadcast.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

// Close to float's range but finite, so attribute files never need to spell infinity.
constexpr double kFloatMax = 3.4e38;

std::vector<TensorType> infer_unary(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  return {ctx.input(0)};
}

std::vector<TensorType> infer_grad(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "dy");
  if (ctx.input(0) != ctx.input(1))
    ctx.fail("dy {} vs x {}: types differ", type_str(ctx.input(0)), type_str(ctx.input(1)));
  return {ctx.input(0)};
}

// Declares `name`(x) and `grad_op`(dy, x) with the same attributes; the grad op copies them.
void add_piecewise(OpRegistry& r, const std::string& name, const std::string& grad_op,
                   std::vector<AttrSpec> attrs, InferFn infer = infer_unary) {
  r.add(OpDef{
      .name = name,
      .inputs = {"x"},
      .attrs = attrs,
      .infer = std::move(infer),
      .grad = [grad_op](GradContext& ctx) -> std::vector<Output> {
        return {ctx.graph.add(grad_op, {ctx.grad(), ctx.input(0)}, ctx.attrs(), ctx.name("dx"))};
      }});
  r.add(OpDef{.name = grad_op, .inputs = {"dy", "x"}, .attrs = attrs, .infer = infer_grad});
}

// Sums a gradient of the broadcast output back to the shape of input `i` (see math_ops.cc).
Output unbroadcast(GradContext& ctx, Output grad, int i, const std::string& suffix) {
  if (ctx.graph.type(grad).shape == ctx.graph.type(ctx.input(i)).shape) return grad;
  return ops::sum_to_like(ctx.graph, grad, ctx.input(i), ctx.name(suffix));
}

// A float base takes a float exponent; an i32/i64 base (ONNX) takes an f32, i32 or i64 one, and
// the result has the base's type.
std::vector<TensorType> infer_pow(const InferContext& ctx) {
  const DType base = ctx.dtype(0), exponent = ctx.dtype(1);
  const auto number = [](DType d) { return d == DType::f32 || d == DType::i32 || d == DType::i64; };
  if (base == DType::f32)
    ctx.expect_dtype(1, DType::f32, "b");
  else if (!number(base) || !number(exponent))
    ctx.fail("a is {} and b is {}; expected an f32 base with an f32 exponent, or an i32/i64 base "
             "with an f32, i32 or i64 exponent",
             dtype_name(base), dtype_name(exponent));
  std::optional<Shape> shape = broadcast_shapes(ctx.shape(0), ctx.shape(1));
  if (!shape)
    ctx.fail("shapes do not broadcast: a {} vs b {}", shape_str(ctx.shape(0)),
             shape_str(ctx.shape(1)));
  return {TensorType{base, *shape}};
}

// d(a^b)/da = b * a^(b-1); d(a^b)/db = a^b * log(a), defined where a > 0.
std::vector<Output> grad_pow(GradContext& ctx) {
  Graph& g = ctx.graph;
  Output a = ctx.input(0), b = ctx.input(1), dy = ctx.grad();
  Output b_minus_1 = ops::sub(g, b, ops::scalar(g, 1.0f, ctx.name("one")), ctx.name("b_minus_1"));
  Output slope_a = ops::mul(g, b, ops::pow(g, a, b_minus_1, ctx.name("pow")), ctx.name("slope_a"));
  Output slope_b =
      ops::mul(g, ctx.output(0), ops::log(g, a, ctx.name("log_a")), ctx.name("slope_b"));
  return {unbroadcast(ctx, ops::mul(g, dy, slope_a, ctx.name("dy_da")), 0, "da"),
          unbroadcast(ctx, ops::mul(g, dy, slope_b, ctx.name("dy_db")), 1, "db")};
}

std::vector<TensorType> infer_prelu(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  ctx.expect_dtype(1, DType::f32, "slope");
  if (!broadcasts_to(ctx.shape(1), ctx.shape(0)))
    ctx.fail("slope {} does not broadcast to x {}", shape_str(ctx.shape(1)),
             shape_str(ctx.shape(0)));
  return {ctx.input(0)};
}

// Outputs dx and dslope before summing over broadcast axes (x's shape).
std::vector<TensorType> infer_prelu_grad(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "dy");
  if (ctx.input(0) != ctx.input(1))
    ctx.fail("dy {} vs x {}: types differ", type_str(ctx.input(0)), type_str(ctx.input(1)));
  ctx.expect_dtype(2, DType::f32, "slope");
  if (!broadcasts_to(ctx.shape(2), ctx.shape(1)))
    ctx.fail("slope {} does not broadcast to x {}", shape_str(ctx.shape(2)),
             shape_str(ctx.shape(1)));
  return {ctx.input(1), ctx.input(1)};
}

std::vector<Output> grad_prelu(GradContext& ctx) {
  int id = ctx.graph.add_node(op_names::kPReluGrad, {ctx.grad(), ctx.input(0), ctx.input(1)}, {},
                              ctx.name("dx"));
  Output dslope{id, 1};
  if (ctx.graph.type(ctx.input(1)).shape != ctx.graph.type(ctx.input(0)).shape)
    dslope = ops::sum_to_like(ctx.graph, dslope, ctx.input(1), ctx.name("dslope"));
  return {Output{id, 0}, dslope};
}

}  // namespace

void register_pointwise_ops(OpRegistry& r) {
  r.add(OpDef{.name = op_names::kPow, .inputs = {"a", "b"}, .infer = infer_pow, .grad = grad_pow});
  r.add(OpDef{.name = op_names::kSqrt,
              .inputs = {"x"},
              .infer = infer_unary,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                // d sqrt(x) = dy / (2 y)
                Graph& g = ctx.graph;
                Output half = ops::mul(g, ctx.grad(), ops::scalar(g, 0.5f, ctx.name("half")),
                                       ctx.name("half_dy"));
                return {ops::div(g, half, ctx.output(0), ctx.name("dx"))};
              }});
  r.add(OpDef{.name = op_names::kExp,
              .inputs = {"x"},
              .infer = infer_unary,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                return {ops::mul(ctx.graph, ctx.grad(), ctx.output(0), ctx.name("dx"))};
              }});
  r.add(OpDef{.name = op_names::kLog,
              .inputs = {"x"},
              .infer = infer_unary,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                return {ops::div(ctx.graph, ctx.grad(), ctx.input(0), ctx.name("dx"))};
              }});
  r.add(OpDef{.name = op_names::kErf,
              .inputs = {"x"},
              .infer = infer_unary,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                // d erf(x) = 2 / sqrt(pi) exp(-x^2)
                Graph& g = ctx.graph;
                Output x = ctx.input(0);
                Output minus_x2 =
                    ops::neg(g, ops::mul(g, x, x, ctx.name("x2")), ctx.name("neg_x2"));
                Output slope =
                    ops::mul(g, ops::exp(g, minus_x2, ctx.name("exp")),
                             ops::scalar(g, 1.1283791670955126f, ctx.name("two_over_sqrt_pi")),
                             ctx.name("slope"));
                return {ops::mul(g, ctx.grad(), slope, ctx.name("dx"))};
              }});
  // Clip also bounds integer tensors (ONNX), its bounds rounded inward to the tensor's type.
  add_piecewise(r, op_names::kClip, op_names::kClipGrad,
                {{"min", AttrKind::Float, AttrValue{-kFloatMax}},
                 {"max", AttrKind::Float, AttrValue{kFloatMax}}},
                [](const InferContext& ctx) { return std::vector<TensorType>{ctx.input(0)}; });
  add_piecewise(r, op_names::kLeakyRelu, op_names::kLeakyReluGrad,
                {{"alpha", AttrKind::Float, AttrValue{0.01}}});
  add_piecewise(
      r, op_names::kHardSigmoid, op_names::kHardSigmoidGrad,
      {{"alpha", AttrKind::Float, AttrValue{0.2}}, {"beta", AttrKind::Float, AttrValue{0.5}}});
  add_piecewise(r, op_names::kHardSwish, op_names::kHardSwishGrad, {});
  r.add(OpDef{.name = op_names::kPRelu,
              .inputs = {"x", "slope"},
              .infer = infer_prelu,
              .grad = grad_prelu});
  r.add(OpDef{
      .name = op_names::kPReluGrad, .inputs = {"dy", "x", "slope"}, .infer = infer_prelu_grad});
}

namespace ops {

Output pow(Graph& g, Output a, Output b, const std::string& name) {
  return g.add(op_names::kPow, {a, b}, {}, name);
}
Output sqrt(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kSqrt, {x}, {}, name);
}
Output exp(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kExp, {x}, {}, name);
}
Output log(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kLog, {x}, {}, name);
}
Output erf(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kErf, {x}, {}, name);
}
Output clip(Graph& g, Output x, double min, double max, const std::string& name) {
  return g.add(op_names::kClip, {x}, {{"min", min}, {"max", max}}, name);
}
Output leaky_relu(Graph& g, Output x, double alpha, const std::string& name) {
  return g.add(op_names::kLeakyRelu, {x}, {{"alpha", alpha}}, name);
}
Output prelu(Graph& g, Output x, Output slope, const std::string& name) {
  return g.add(op_names::kPRelu, {x, slope}, {}, name);
}
Output hard_sigmoid(Graph& g, Output x, double alpha, double beta, const std::string& name) {
  return g.add(op_names::kHardSigmoid, {x}, {{"alpha", alpha}, {"beta", beta}}, name);
}
Output hard_swish(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kHardSwish, {x}, {}, name);
}

}  // namespace ops
}  // namespace sf
