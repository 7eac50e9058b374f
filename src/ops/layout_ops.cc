// Layout ops with ONNX semantics: Transpose, Pad, StridedSlice (ONNX Slice) and Gather. They
// move elements without arithmetic, so every dtype is accepted. Index geometry lives in
// ops/layout_geometry.h, shared with the reference kernels.
//
// ONNX Slice is declared as StridedSlice because "Slice" is already the single-axis slice that
// Concat's gradient uses (array_ops.cc).
//
// The gradients of StridedSlice and Gather are ops of their own (StridedSliceGrad, GatherGrad)
// that take x as an input for its shape only: pads or scatter targets computed from x's shape at
// graph-building time would go stale when the session re-infers shapes for another input.
#include <limits>

#include "graph/op_registry.h"
#include "ops/layout_geometry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

const AttrValue kNoInts{std::vector<int64_t>{}};

std::vector<int64_t> checked_perm(const InferContext& ctx, int64_t rank) {
  std::vector<int64_t> perm;
  std::string err = transpose_perm(ctx.attrs().get_ints("perm"), rank, &perm);
  if (!err.empty()) ctx.fail("x {}: {}", shape_str(ctx.shape(0)), err);
  return perm;
}

std::vector<TensorType> infer_transpose(const InferContext& ctx) {
  const Shape& x = ctx.shape(0);
  std::vector<int64_t> perm = checked_perm(ctx, static_cast<int64_t>(x.size()));
  Shape y;
  for (int64_t p : perm) y.push_back(x[static_cast<size_t>(p)]);
  return {TensorType{ctx.dtype(0), y}};
}

std::vector<Output> grad_transpose(GradContext& ctx) {
  std::vector<int64_t> perm;
  const int64_t rank = static_cast<int64_t>(ctx.graph.type(ctx.input(0)).shape.size());
  std::string err = transpose_perm(ctx.attrs().get_ints("perm"), rank, &perm);
  SF_CHECK(err.empty(), "{}", err);
  return {ops::transpose(ctx.graph, ctx.grad(), inverse_perm(perm), ctx.name("dx"))};
}

std::vector<TensorType> infer_pad(const InferContext& ctx) {
  const Shape& x = ctx.shape(0);
  const size_t rank = x.size();
  const std::vector<int64_t>& pads = ctx.attrs().get_ints("pads");
  const std::string& mode = ctx.attrs().get_string("mode");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    ctx.fail("mode must be constant, reflect or edge, got '{}'", mode);
  if (pads.size() != 2 * rank)
    ctx.fail("pads [{}] must have 2 * rank = {} entries (all begins, then all ends) for x {}",
             fmt::join(pads, ","), 2 * rank, shape_str(x));
  Shape y = x;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t begin = pads[d], end = pads[d + rank];
    if (begin < 0 || end < 0) ctx.fail("pads [{}] must be non-negative", fmt::join(pads, ","));
    // Reflection mirrors without repeating the edge, so it needs more elements than padding.
    if (mode == "reflect" && (begin > 0 || end > 0) && (begin >= x[d] || end >= x[d]))
      ctx.fail("reflect pads [{}] must be smaller than axis {} of x {}", fmt::join(pads, ","), d,
               shape_str(x));
    if (mode == "edge" && (begin > 0 || end > 0) && x[d] == 0)
      ctx.fail("edge pads [{}] need a non-empty axis {}, x is {}", fmt::join(pads, ","), d,
               shape_str(x));
    y[d] = x[d] + begin + end;
  }
  return {TensorType{ctx.dtype(0), y}};
}

// Constant padding is linear: its gradient is the slice of dy that x came from. The ends count
// from the end of each axis, so the slice stays right when shapes are re-inferred.
std::vector<Output> grad_pad(GradContext& ctx) {
  if (ctx.attrs().get_string("mode") != "constant")
    fail("node '{}' (Pad): no gradient for mode '{}' (only constant)", ctx.node.name,
         ctx.attrs().get_string("mode"));
  const std::vector<int64_t>& pads = ctx.attrs().get_ints("pads");
  const size_t rank = pads.size() / 2;
  std::vector<int64_t> starts, ends;
  for (size_t d = 0; d < rank; ++d) {
    starts.push_back(pads[d]);
    ends.push_back(pads[d + rank] == 0 ? std::numeric_limits<int64_t>::max() : -pads[d + rank]);
  }
  return {ops::strided_slice(ctx.graph, ctx.grad(), starts, ends, {}, {}, ctx.name("dx"))};
}

// The shape StridedSlice gives for the x of input `x_input`.
Shape sliced_shape(const InferContext& ctx, int x_input) {
  const Attrs& a = ctx.attrs();
  const Shape& x = ctx.shape(x_input);
  std::vector<SliceAxis> ranges;
  std::string err = slice_ranges(x, a.get_ints("starts"), a.get_ints("ends"), a.get_ints("axes"),
                                 a.get_ints("steps"), &ranges);
  if (!err.empty()) ctx.fail("x {}: {}", shape_str(x), err);
  Shape y;
  for (const SliceAxis& r : ranges) y.push_back(r.count);
  return y;
}

std::vector<TensorType> infer_strided_slice(const InferContext& ctx) {
  return {TensorType{ctx.dtype(0), sliced_shape(ctx, 0)}};
}

// dy must be the f32 output StridedSlice gave for x (input 1); the result has x's shape.
std::vector<TensorType> infer_strided_slice_grad(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "dy");
  const Shape want = sliced_shape(ctx, 1);
  if (ctx.shape(0) != want)
    ctx.fail("dy {} does not match the slice {} of x {}", shape_str(ctx.shape(0)), shape_str(want),
             shape_str(ctx.shape(1)));
  return {TensorType{DType::f32, ctx.shape(1)}};
}

std::vector<Output> grad_strided_slice(GradContext& ctx) {
  return {ctx.graph.add(op_names::kStridedSliceGrad, {ctx.grad(), ctx.input(0)}, ctx.attrs(),
                        ctx.name("dx"))};
}

// StridedSliceGrad is linear in dy: its adjoint is the slice again.
std::vector<Output> grad_strided_slice_grad(GradContext& ctx) {
  return {ctx.graph.add(op_names::kStridedSlice, {ctx.grad()}, ctx.attrs(), ctx.name("dy")),
          Output{}};
}

// The shape Gather gives for the x of input `x_input` and the indices of input `x_input + 1`.
Shape gathered_shape(const InferContext& ctx, int x_input) {
  const Shape& x = ctx.shape(x_input);
  const Shape& indices = ctx.shape(x_input + 1);
  if (ctx.dtype(x_input + 1) != DType::i32 && ctx.dtype(x_input + 1) != DType::i64)
    ctx.fail("input 'indices' must be i32 or i64, got {}", dtype_name(ctx.dtype(x_input + 1)));
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = ctx.attrs().get_int("axis");
  if (axis < -rank || axis >= rank)
    ctx.fail("axis {} is out of range for x {}", axis, shape_str(x));
  if (axis < 0) axis += rank;
  // y = x[:axis] + indices + x[axis+1:]
  Shape y(x.begin(), x.begin() + axis);
  y.insert(y.end(), indices.begin(), indices.end());
  y.insert(y.end(), x.begin() + axis + 1, x.end());
  return y;
}

std::vector<TensorType> infer_gather(const InferContext& ctx) {
  return {TensorType{ctx.dtype(0), gathered_shape(ctx, 0)}};
}

// GatherGrad(dy, x, indices): dy must be what Gather gave for x and indices.
std::vector<TensorType> infer_gather_grad(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "dy");
  const Shape want = gathered_shape(ctx, 1);
  if (ctx.shape(0) != want)
    ctx.fail("dy {} does not match the gather {} from x {}", shape_str(ctx.shape(0)),
             shape_str(want), shape_str(ctx.shape(1)));
  return {TensorType{DType::f32, ctx.shape(1)}};
}

// Indices select, they are not differentiable.
std::vector<Output> grad_gather(GradContext& ctx) {
  return {ctx.graph.add(op_names::kGatherGrad, {ctx.grad(), ctx.input(0), ctx.input(1)},
                        ctx.attrs(), ctx.name("dx")),
          Output{}};
}

// GatherGrad is linear in dy: its adjoint gathers again.
std::vector<Output> grad_gather_grad(GradContext& ctx) {
  return {ctx.graph.add(op_names::kGather, {ctx.grad(), ctx.input(2)}, ctx.attrs(), ctx.name("dy")),
          Output{}, Output{}};
}

}  // namespace

void register_layout_ops(OpRegistry& r) {
  r.add(OpDef{.name = op_names::kTranspose,
              .inputs = {"x"},
              .attrs = {{"perm", AttrKind::Ints, kNoInts}},
              .infer = infer_transpose,
              .grad = grad_transpose});
  r.add(OpDef{.name = op_names::kPad,
              .inputs = {"x"},
              .attrs = {{"pads", AttrKind::Ints, std::nullopt},
                        {"mode", AttrKind::String, AttrValue{std::string("constant")}},
                        {"value", AttrKind::Float, AttrValue{0.0}}},
              .infer = infer_pad,
              .grad = grad_pad});
  r.add(OpDef{.name = op_names::kStridedSlice,
              .inputs = {"x"},
              .attrs = {{"starts", AttrKind::Ints, std::nullopt},
                        {"ends", AttrKind::Ints, std::nullopt},
                        {"axes", AttrKind::Ints, kNoInts},
                        {"steps", AttrKind::Ints, kNoInts}},
              .infer = infer_strided_slice,
              .grad = grad_strided_slice});
  r.add(OpDef{.name = op_names::kStridedSliceGrad,
              .inputs = {"dy", "x"},
              .attrs = {{"starts", AttrKind::Ints, std::nullopt},
                        {"ends", AttrKind::Ints, std::nullopt},
                        {"axes", AttrKind::Ints, kNoInts},
                        {"steps", AttrKind::Ints, kNoInts}},
              .infer = infer_strided_slice_grad,
              .grad = grad_strided_slice_grad});
  r.add(OpDef{.name = op_names::kGather,
              .inputs = {"x", "indices"},
              .attrs = {{"axis", AttrKind::Int, AttrValue{int64_t{0}}}},
              .infer = infer_gather,
              .grad = grad_gather});
  r.add(OpDef{.name = op_names::kGatherGrad,
              .inputs = {"dy", "x", "indices"},
              .attrs = {{"axis", AttrKind::Int, AttrValue{int64_t{0}}}},
              .infer = infer_gather_grad,
              .grad = grad_gather_grad});
}

namespace ops {

Output transpose(Graph& g, Output x, std::vector<int64_t> perm, const std::string& name) {
  return g.add(op_names::kTranspose, {x}, {{"perm", std::move(perm)}}, name);
}
Output pad(Graph& g, Output x, std::vector<int64_t> pads, const std::string& mode, double value,
           const std::string& name) {
  return g.add(op_names::kPad, {x}, {{"pads", std::move(pads)}, {"mode", mode}, {"value", value}},
               name);
}
Output strided_slice(Graph& g, Output x, std::vector<int64_t> starts, std::vector<int64_t> ends,
                     std::vector<int64_t> axes, std::vector<int64_t> steps,
                     const std::string& name) {
  return g.add(op_names::kStridedSlice, {x},
               {{"starts", std::move(starts)},
                {"ends", std::move(ends)},
                {"axes", std::move(axes)},
                {"steps", std::move(steps)}},
               name);
}
Output gather(Graph& g, Output x, Output indices, int64_t axis, const std::string& name) {
  return g.add(op_names::kGather, {x, indices}, {{"axis", axis}}, name);
}

}  // namespace ops
}  // namespace sf
