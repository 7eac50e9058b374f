// Ops that move or reinterpret elements without arithmetic: Identity, Reshape, Flatten,
// Concat, Slice, Cast.
#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

int64_t checked_axis(const InferContext& ctx, int64_t axis, int64_t rank, int64_t limit) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= limit)
    ctx.fail("axis {} is out of range for input {}", axis, shape_str(ctx.shape(0)));
  return a;
}

// Reshapes a gradient back to x's shape. Dimension 0 (the batch) is left as -1 so that the
// node stays valid when the graph is re-inferred for another batch size.
Output reshape_back(GradContext& ctx) {
  Shape shape = ctx.graph.type(ctx.input(0)).shape;
  if (!shape.empty() && num_elements(shape) > 0) shape[0] = -1;
  return ops::reshape(ctx.graph, ctx.grad(), shape, ctx.name("dx"));
}

}  // namespace

void register_array_ops(OpRegistry& r) {
  r.add(OpDef{
      .name = op_names::kIdentity,
      .inputs = {"x"},
      .infer = [](const InferContext& ctx) -> std::vector<TensorType> { return {ctx.input(0)}; },
      .grad = [](GradContext& ctx) -> std::vector<Output> { return {ctx.grad()}; }});
  r.add(OpDef{.name = op_names::kReshape,
              .inputs = {"x"},
              .attrs = {{"shape", AttrKind::Ints, std::nullopt}},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                Shape shape = ctx.attrs().get_ints("shape");
                const int64_t count = num_elements(ctx.shape(0));
                int64_t known = 1;
                int inferred = -1;
                for (size_t i = 0; i < shape.size(); ++i) {
                  if (shape[i] == -1 && inferred < 0) {
                    inferred = static_cast<int>(i);
                  } else if (shape[i] < 0) {
                    ctx.fail("shape {} may hold one -1 and no other negative dimension",
                             shape_str(shape));
                  } else {
                    known *= shape[i];
                  }
                }
                if (inferred >= 0) {
                  if (known == 0 || count % known != 0)
                    ctx.fail("cannot reshape {} ({} elements) to {}", shape_str(ctx.shape(0)),
                             count, shape_str(shape));
                  shape[static_cast<size_t>(inferred)] = count / known;
                } else if (known != count) {
                  ctx.fail("cannot reshape {} ({} elements) to {} ({} elements)",
                           shape_str(ctx.shape(0)), count, shape_str(shape), known);
                }
                return {TensorType{ctx.dtype(0), shape}};
              },
              .grad = [](GradContext& ctx) -> std::vector<Output> { return {reshape_back(ctx)}; }});
  r.add(OpDef{.name = op_names::kFlatten,
              .inputs = {"x"},
              .attrs = {{"axis", AttrKind::Int, AttrValue{int64_t{1}}}},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                const Shape& x = ctx.shape(0);
                const int64_t rank = static_cast<int64_t>(x.size());
                // axis == rank is allowed: everything goes into the first dimension.
                int64_t axis = checked_axis(ctx, ctx.attrs().get_int("axis"), rank, rank + 1);
                int64_t outer = 1, inner = 1;
                for (int64_t i = 0; i < rank; ++i)
                  (i < axis ? outer : inner) *= x[static_cast<size_t>(i)];
                return {TensorType{ctx.dtype(0), {outer, inner}}};
              },
              .grad = [](GradContext& ctx) -> std::vector<Output> { return {reshape_back(ctx)}; }});
  r.add(OpDef{.name = op_names::kConcat,
              .inputs = {"xs"},
              .variadic = true,
              .attrs = {{"axis", AttrKind::Int, std::nullopt}},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                Shape out = ctx.shape(0);
                const int64_t rank = static_cast<int64_t>(out.size());
                if (rank == 0) ctx.fail("cannot concatenate scalars");
                const int64_t axis = checked_axis(ctx, ctx.attrs().get_int("axis"), rank, rank);
                for (int i = 1; i < ctx.num_inputs(); ++i) {
                  const Shape& s = ctx.shape(i);
                  if (ctx.dtype(i) != ctx.dtype(0))
                    ctx.fail("input {} is {}, input 0 is {}: dtypes differ", i,
                             type_str(ctx.input(i)), type_str(ctx.input(0)));
                  bool fits = s.size() == out.size();
                  for (size_t d = 0; fits && d < s.size(); ++d)
                    fits = static_cast<int64_t>(d) == axis || s[d] == ctx.shape(0)[d];
                  if (!fits)
                    ctx.fail("input {} {} vs input 0 {}: shapes must match except on axis {}", i,
                             shape_str(s), shape_str(ctx.shape(0)), axis);
                  out[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
                }
                return {TensorType{ctx.dtype(0), out}};
              },
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                Graph& g = ctx.graph;
                const int64_t rank = static_cast<int64_t>(g.type(ctx.input(0)).shape.size());
                int64_t axis = ctx.attrs().get_int("axis");
                if (axis < 0) axis += rank;
                std::vector<Output> grads;
                int64_t begin = 0;
                for (size_t i = 0; i < ctx.node.inputs.size(); ++i) {
                  int64_t size = g.type(ctx.node.inputs[i]).shape[static_cast<size_t>(axis)];
                  grads.push_back(ops::slice(g, ctx.grad(), axis, begin, begin + size,
                                             ctx.name(fmt::format("d{}", i))));
                  begin += size;
                }
                return grads;
              }});
  r.add(OpDef{.name = op_names::kSlice,
              .inputs = {"x"},
              .attrs = {{"axis", AttrKind::Int, std::nullopt},
                        {"begin", AttrKind::Int, std::nullopt},
                        {"end", AttrKind::Int, std::nullopt}},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                Shape out = ctx.shape(0);
                const int64_t rank = static_cast<int64_t>(out.size());
                const int64_t axis = checked_axis(ctx, ctx.attrs().get_int("axis"), rank, rank);
                const int64_t begin = ctx.attrs().get_int("begin");
                const int64_t end = ctx.attrs().get_int("end");
                int64_t& dim = out[static_cast<size_t>(axis)];
                if (begin < 0 || begin > end || end > dim)
                  ctx.fail("range [{}, {}) does not fit axis {} of {}", begin, end, axis,
                           shape_str(ctx.shape(0)));
                dim = end - begin;
                return {TensorType{ctx.dtype(0), out}};
              },
              // The one-axis case of StridedSlice's gradient: dy into zeros of x's shape.
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                const Attrs& a = ctx.attrs();
                return {ctx.graph.add(op_names::kStridedSliceGrad, {ctx.grad(), ctx.input(0)},
                                      {{"starts", std::vector<int64_t>{a.get_int("begin")}},
                                       {"ends", std::vector<int64_t>{a.get_int("end")}},
                                       {"axes", std::vector<int64_t>{a.get_int("axis")}}},
                                      ctx.name("dx"))};
              }});
  r.add(OpDef{.name = op_names::kCast,
              .inputs = {"x"},
              .attrs = {{"dtype", AttrKind::String, std::nullopt}},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                DType dtype;
                try {
                  dtype = parse_dtype(ctx.attrs().get_string("dtype"));
                } catch (const Error& e) {
                  ctx.fail("{}", e.what());
                }
                return {TensorType{dtype, ctx.shape(0)}};
              },
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                // Only a float-to-float cast passes gradients; integers have none.
                bool floats = ctx.graph.type(ctx.input(0)).dtype == DType::f32 &&
                              ctx.graph.type(ctx.output(0)).dtype == DType::f32;
                return {floats ? ctx.grad() : Output{}};
              }});
}

namespace ops {

Output identity(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kIdentity, {x}, {}, name);
}
Output reshape(Graph& g, Output x, Shape shape, const std::string& name) {
  return g.add(op_names::kReshape, {x}, {{"shape", std::move(shape)}}, name);
}
Output flatten(Graph& g, Output x, int64_t axis, const std::string& name) {
  return g.add(op_names::kFlatten, {x}, {{"axis", axis}}, name);
}
Output concat(Graph& g, std::vector<Output> xs, int64_t axis, const std::string& name) {
  return g.add(op_names::kConcat, std::move(xs), {{"axis", axis}}, name);
}
Output slice(Graph& g, Output x, int64_t axis, int64_t begin, int64_t end,
             const std::string& name) {
  return g.add(op_names::kSlice, {x}, {{"axis", axis}, {"begin", begin}, {"end", end}}, name);
}
Output cast(Graph& g, Output x, DType dtype, const std::string& name) {
  return g.add(op_names::kCast, {x}, {{"dtype", std::string(dtype_name(dtype))}}, name);
}

}  // namespace ops
}  // namespace sf
