// Elementwise arithmetic with NumPy broadcasting (Add .. Div, Maximum, Minimum), Round, sums and
// reductions. Gradients of broadcast inputs are summed back to the input's shape with SumTo; the
// target shapes of gradient nodes follow their forward tensors (the `like` input) so
// re-inferring for a new batch size works.
//
// Gradients through a selection (Maximum/Minimum, ReduceMax/ReduceMin) go to the selected
// element. Ties follow TensorFlow: Maximum/Minimum give all of dy to `a`; ReduceMax/ReduceMin
// split dy equally among the tied elements. NaN counts as the extreme (it propagates, as in
// NumPy), so its gradient goes to the NaN element.
#include "graph/op_registry.h"
#include "ops/broadcast.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

std::vector<TensorType> infer_binary(const InferContext& ctx) {
  if (ctx.dtype(0) != ctx.dtype(1))
    ctx.fail("dtypes differ: a {} vs b {}", type_str(ctx.input(0)), type_str(ctx.input(1)));
  std::optional<Shape> shape = broadcast_shapes(ctx.shape(0), ctx.shape(1));
  if (!shape)
    ctx.fail("shapes do not broadcast: a {} vs b {}", shape_str(ctx.shape(0)),
             shape_str(ctx.shape(1)));
  return {TensorType{ctx.dtype(0), *shape}};
}

std::vector<TensorType> infer_same(const InferContext& ctx) { return {ctx.input(0)}; }

// MaximumGrad / MinimumGrad (dy, a, b): da and db at the broadcast (dy's) shape, so that the
// gradient sums them down to each input's shape as for Add.
std::vector<TensorType> infer_selection_grad(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "dy");
  ctx.expect_dtype(1, DType::f32, "a");
  ctx.expect_dtype(2, DType::f32, "b");
  std::optional<Shape> shape = broadcast_shapes(ctx.shape(1), ctx.shape(2));
  if (!shape || *shape != ctx.shape(0))
    ctx.fail("a {} and b {} do not broadcast to dy {}", shape_str(ctx.shape(1)),
             shape_str(ctx.shape(2)), shape_str(ctx.shape(0)));
  return {ctx.input(0), ctx.input(0)};
}

// Sums a gradient of the broadcast output back to the shape of input `i`. Inputs of equal
// shapes are never broadcast, so their gradients pass through unchanged.
Output unbroadcast(GradContext& ctx, Output grad, int i, const std::string& suffix) {
  const Shape& a = ctx.graph.type(ctx.input(0)).shape;
  const Shape& b = ctx.graph.type(ctx.input(1)).shape;
  if (a == b) return grad;
  return ops::sum_to_like(ctx.graph, grad, ctx.input(i), ctx.name(suffix));
}

std::vector<int64_t> checked_axes(const InferContext& ctx, const std::vector<int64_t>& axes,
                                  int64_t rank) {
  std::optional<std::vector<int64_t>> normalized = normalize_axes(axes, rank);
  if (!normalized)
    ctx.fail("axes {} are out of range or repeated for rank {} input {}", shape_str(axes), rank,
             shape_str(ctx.shape(0)));
  return *normalized;
}

std::vector<TensorType> infer_reduce(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  const Shape& x = ctx.shape(0);
  std::vector<int64_t> axes =
      checked_axes(ctx, ctx.attrs().get_ints("axes"), static_cast<int64_t>(x.size()));
  return {TensorType{DType::f32, reduced_shape(x, axes, ctx.attrs().get_bool("keep_dims"))}};
}

// The gradient of Maximum or Minimum: a dedicated op picks the selected side of each element.
GradFn selection_grad(const std::string& grad_op) {
  return [grad_op](GradContext& ctx) -> std::vector<Output> {
    int id = ctx.graph.add_node(grad_op, {ctx.grad(), ctx.input(0), ctx.input(1)}, {},
                                ctx.name("select"));
    return {unbroadcast(ctx, Output{id, 0}, 0, "da"), unbroadcast(ctx, Output{id, 1}, 1, "db")};
  };
}

// The output shape of the node's reduction (attrs axes, keep_dims) applied to input `x`.
Shape checked_reduced_shape(const InferContext& ctx, int x) {
  const Shape& shape = ctx.shape(x);
  std::vector<int64_t> axes =
      checked_axes(ctx, ctx.attrs().get_ints("axes"), static_cast<int64_t>(shape.size()));
  return reduced_shape(shape, axes, ctx.attrs().get_bool("keep_dims"));
}

// SumTo and BroadcastTo take their target from input 1 when present, else from attr `shape`.
Shape target_shape(const InferContext& ctx) {
  if (ctx.num_inputs() > 2) ctx.fail("expects 1 or 2 inputs (x, like), got {}", ctx.num_inputs());
  ctx.expect_dtype(0, DType::f32, "x");
  return ctx.num_inputs() == 2 ? ctx.shape(1) : Shape(ctx.attrs().get_ints("shape"));
}

std::vector<Output> no_grad_for_like(GradContext& ctx, Output grad) {
  std::vector<Output> grads{grad};
  if (ctx.node.inputs.size() == 2) grads.push_back(Output{});
  return grads;
}

}  // namespace

void register_math_ops(OpRegistry& r) {
  r.add(
      OpDef{.name = op_names::kAdd,
            .inputs = {"a", "b"},
            .infer = infer_binary,
            .grad = [](GradContext& ctx) -> std::vector<Output> {
              return {unbroadcast(ctx, ctx.grad(), 0, "da"), unbroadcast(ctx, ctx.grad(), 1, "db")};
            }});
  r.add(OpDef{.name = op_names::kSub,
              .inputs = {"a", "b"},
              .infer = infer_binary,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                Output neg = ops::neg(ctx.graph, ctx.grad(), ctx.name("neg"));
                return {unbroadcast(ctx, ctx.grad(), 0, "da"), unbroadcast(ctx, neg, 1, "db")};
              }});
  r.add(OpDef{.name = op_names::kMul,
              .inputs = {"a", "b"},
              .infer = infer_binary,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                Graph& g = ctx.graph;
                Output da = ops::mul(g, ctx.grad(), ctx.input(1), ctx.name("dy_b"));
                Output db = ops::mul(g, ctx.grad(), ctx.input(0), ctx.name("dy_a"));
                return {unbroadcast(ctx, da, 0, "da"), unbroadcast(ctx, db, 1, "db")};
              }});
  r.add(OpDef{.name = op_names::kDiv,
              .inputs = {"a", "b"},
              .infer = infer_binary,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                // d(a/b)/db = -a/b^2 = -y/b.
                Graph& g = ctx.graph;
                Output da = ops::div(g, ctx.grad(), ctx.input(1), ctx.name("dy_over_b"));
                Output dy_y = ops::mul(g, ctx.grad(), ctx.output(0), ctx.name("dy_y"));
                Output db = ops::neg(g, ops::div(g, dy_y, ctx.input(1), ctx.name("dy_y_over_b")),
                                     ctx.name("neg"));
                return {unbroadcast(ctx, da, 0, "da"), unbroadcast(ctx, db, 1, "db")};
              }});
  r.add(OpDef{.name = op_names::kMaximum,
              .inputs = {"a", "b"},
              .infer = infer_binary,
              .grad = selection_grad(op_names::kMaximumGrad)});
  r.add(OpDef{.name = op_names::kMinimum,
              .inputs = {"a", "b"},
              .infer = infer_binary,
              .grad = selection_grad(op_names::kMinimumGrad)});
  r.add(OpDef{
      .name = op_names::kMaximumGrad, .inputs = {"dy", "a", "b"}, .infer = infer_selection_grad});
  r.add(OpDef{
      .name = op_names::kMinimumGrad, .inputs = {"dy", "a", "b"}, .infer = infer_selection_grad});
  // Not differentiable: the derivative is zero almost everywhere, and a silent zero would stop
  // training unnoticed (quantization-aware training uses FakeQuantize's straight-through one).
  r.add(OpDef{.name = op_names::kRound,
              .inputs = {"x"},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                ctx.expect_dtype(0, DType::f32, "x");
                return {ctx.input(0)};
              }});
  r.add(OpDef{.name = op_names::kNeg,
              .inputs = {"x"},
              .infer = infer_same,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                return {ops::neg(ctx.graph, ctx.grad(), ctx.name("dx"))};
              }});
  r.add(OpDef{.name = op_names::kAddN,
              .inputs = {"xs"},
              .variadic = true,
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                ctx.expect_dtype(0, DType::f32, "xs");
                for (int i = 1; i < ctx.num_inputs(); ++i)
                  if (ctx.input(i) != ctx.input(0))
                    ctx.fail("input {} is {}, input 0 is {}: all inputs must match", i,
                             type_str(ctx.input(i)), type_str(ctx.input(0)));
                return {ctx.input(0)};
              },
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                return std::vector<Output>(ctx.node.inputs.size(), ctx.grad());
              }});
  r.add(OpDef{.name = op_names::kSumTo,
              .inputs = {"x"},
              .variadic = true,
              .attrs = {{"shape", AttrKind::Ints, AttrValue{std::vector<int64_t>{}}}},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                Shape target = target_shape(ctx);
                if (!broadcasts_to(target, ctx.shape(0)))
                  ctx.fail("cannot sum {} down to {}: {} does not broadcast to it",
                           shape_str(ctx.shape(0)), shape_str(target), shape_str(target));
                return {TensorType{DType::f32, target}};
              },
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                return no_grad_for_like(
                    ctx, ops::broadcast_to_like(ctx.graph, ctx.grad(), ctx.input(0), {},
                                                ctx.name("dx")));
              }});
  r.add(OpDef{
      .name = op_names::kBroadcastTo,
      .inputs = {"x"},
      .variadic = true,
      .attrs = {{"shape", AttrKind::Ints, AttrValue{std::vector<int64_t>{}}},
                {"axes", AttrKind::Ints, AttrValue{std::vector<int64_t>{}}}},
      .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
        Shape target = target_shape(ctx);
        const std::vector<int64_t>& axes = ctx.attrs().get_ints("axes");
        int64_t rank = static_cast<int64_t>(ctx.shape(0).size() + axes.size());
        // Unlike for reductions, no axes here means none are inserted.
        Shape expanded =
            axes.empty() ? ctx.shape(0) : expand_shape(ctx.shape(0), checked_axes(ctx, axes, rank));
        if (!broadcasts_to(expanded, target))
          ctx.fail("x {} does not broadcast to {}", shape_str(expanded), shape_str(target));
        return {TensorType{DType::f32, target}};
      },
      .grad = [](GradContext& ctx) -> std::vector<Output> {
        Graph& g = ctx.graph;
        Output grad = ctx.grad();
        const std::vector<int64_t>& axes = ctx.attrs().get_ints("axes");
        if (!axes.empty()) {
          // The inserted axes sit after any leading axes the broadcast added.
          int64_t lead = static_cast<int64_t>(g.type(ctx.output(0)).shape.size()) -
                         static_cast<int64_t>(g.type(ctx.input(0)).shape.size() + axes.size());
          int64_t expanded_rank =
              static_cast<int64_t>(g.type(ctx.input(0)).shape.size() + axes.size());
          std::vector<int64_t> shifted = *normalize_axes(axes, expanded_rank);
          for (int64_t& a : shifted) a += lead;
          grad = ops::reduce_sum(g, grad, shifted, false, ctx.name("sum"));
        }
        return no_grad_for_like(ctx, ops::sum_to_like(g, grad, ctx.input(0), ctx.name("dx")));
      }});
  r.add(OpDef{
      .name = op_names::kReduceSum,
      .inputs = {"x"},
      .attrs = {{"axes", AttrKind::Ints, AttrValue{std::vector<int64_t>{}}},
                {"keep_dims", AttrKind::Bool, AttrValue{false}}},
      .infer = infer_reduce,
      .grad = [](GradContext& ctx) -> std::vector<Output> {
        std::vector<int64_t> axes;
        if (!ctx.attrs().get_bool("keep_dims"))
          axes = *normalize_axes(ctx.attrs().get_ints("axes"),
                                 static_cast<int64_t>(ctx.graph.type(ctx.input(0)).shape.size()));
        return {ops::broadcast_to_like(ctx.graph, ctx.grad(), ctx.input(0), axes, ctx.name("dx"))};
      }});
  r.add(OpDef{.name = op_names::kReduceMean,
              .inputs = {"x"},
              .attrs = {{"axes", AttrKind::Ints, AttrValue{std::vector<int64_t>{}}},
                        {"keep_dims", AttrKind::Bool, AttrValue{false}}},
              .infer = infer_reduce,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                // A dedicated op: the element count is only known once shapes are re-inferred.
                return {ctx.graph.add(op_names::kReduceMeanGrad, {ctx.grad(), ctx.input(0)},
                                      ctx.node.attrs, ctx.name("dx"))};
              }});
  for (const char* name : {op_names::kReduceMax, op_names::kReduceMin})
    r.add(OpDef{.name = name,
                .inputs = {"x"},
                .attrs = {{"axes", AttrKind::Ints, AttrValue{std::vector<int64_t>{}}},
                          {"keep_dims", AttrKind::Bool, AttrValue{false}}},
                .infer = infer_reduce,
                .grad = [](GradContext& ctx) -> std::vector<Output> {
                  return {ctx.graph.add(op_names::kReduceExtremumGrad,
                                        {ctx.grad(), ctx.input(0), ctx.output(0)}, ctx.node.attrs,
                                        ctx.name("dx"))};
                }});
  // dx = dy at the elements of x equal to the reduction's result y (split among ties), else 0.
  r.add(OpDef{.name = op_names::kReduceExtremumGrad,
              .inputs = {"dy", "x", "y"},
              .attrs = {{"axes", AttrKind::Ints, AttrValue{std::vector<int64_t>{}}},
                        {"keep_dims", AttrKind::Bool, AttrValue{false}}},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                ctx.expect_dtype(0, DType::f32, "dy");
                ctx.expect_dtype(1, DType::f32, "x");
                ctx.expect_dtype(2, DType::f32, "y");
                Shape want = checked_reduced_shape(ctx, 1);
                for (int i : {0, 2})
                  if (ctx.shape(i) != want)
                    ctx.fail("{} {} vs x {}: it must be {}", i == 0 ? "dy" : "y",
                             shape_str(ctx.shape(i)), shape_str(ctx.shape(1)), shape_str(want));
                return {ctx.input(1)};
              }});
  // dx = dy broadcast over the reduced axes of x, divided by their element count.
  r.add(OpDef{.name = op_names::kReduceMeanGrad,
              .inputs = {"dy", "x"},
              .attrs = {{"axes", AttrKind::Ints, AttrValue{std::vector<int64_t>{}}},
                        {"keep_dims", AttrKind::Bool, AttrValue{false}}},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                const Shape& x = ctx.shape(1);
                Shape want = checked_reduced_shape(ctx, 1);
                if (ctx.shape(0) != want)
                  ctx.fail("dy {} vs x {}: dy must be {}", shape_str(ctx.shape(0)), shape_str(x),
                           shape_str(want));
                return {TensorType{DType::f32, x}};
              }});
}

namespace ops {

Output add(Graph& g, Output a, Output b, const std::string& name) {
  return g.add(op_names::kAdd, {a, b}, {}, name);
}
Output sub(Graph& g, Output a, Output b, const std::string& name) {
  return g.add(op_names::kSub, {a, b}, {}, name);
}
Output mul(Graph& g, Output a, Output b, const std::string& name) {
  return g.add(op_names::kMul, {a, b}, {}, name);
}
Output div(Graph& g, Output a, Output b, const std::string& name) {
  return g.add(op_names::kDiv, {a, b}, {}, name);
}
Output neg(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kNeg, {x}, {}, name);
}
Output add_n(Graph& g, std::vector<Output> xs, const std::string& name) {
  return g.add(op_names::kAddN, std::move(xs), {}, name);
}
Output sum_to(Graph& g, Output x, Shape shape, const std::string& name) {
  return g.add(op_names::kSumTo, {x}, {{"shape", std::move(shape)}}, name);
}
Output broadcast_to(Graph& g, Output x, Shape shape, const std::string& name) {
  return g.add(op_names::kBroadcastTo, {x}, {{"shape", std::move(shape)}}, name);
}
Output sum_to_like(Graph& g, Output x, Output like, const std::string& name) {
  return g.add(op_names::kSumTo, {x, like}, {}, name);
}
Output broadcast_to_like(Graph& g, Output x, Output like, std::vector<int64_t> axes,
                         const std::string& name) {
  return g.add(op_names::kBroadcastTo, {x, like}, {{"axes", std::move(axes)}}, name);
}
Output reduce_sum(Graph& g, Output x, std::vector<int64_t> axes, bool keep_dims,
                  const std::string& name) {
  return g.add(op_names::kReduceSum, {x}, {{"axes", std::move(axes)}, {"keep_dims", keep_dims}},
               name);
}
Output reduce_mean(Graph& g, Output x, std::vector<int64_t> axes, bool keep_dims,
                   const std::string& name) {
  return g.add(op_names::kReduceMean, {x}, {{"axes", std::move(axes)}, {"keep_dims", keep_dims}},
               name);
}
Output reduce_max(Graph& g, Output x, std::vector<int64_t> axes, bool keep_dims,
                  const std::string& name) {
  return g.add(op_names::kReduceMax, {x}, {{"axes", std::move(axes)}, {"keep_dims", keep_dims}},
               name);
}
Output reduce_min(Graph& g, Output x, std::vector<int64_t> axes, bool keep_dims,
                  const std::string& name) {
  return g.add(op_names::kReduceMin, {x}, {{"axes", std::move(axes)}, {"keep_dims", keep_dims}},
               name);
}
Output maximum(Graph& g, Output a, Output b, const std::string& name) {
  return g.add(op_names::kMaximum, {a, b}, {}, name);
}
Output minimum(Graph& g, Output a, Output b, const std::string& name) {
  return g.add(op_names::kMinimum, {a, b}, {}, name);
}
Output round(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kRound, {x}, {}, name);
}

}  // namespace ops
}  // namespace sf
