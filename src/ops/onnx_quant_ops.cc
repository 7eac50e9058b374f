// Ops with ONNX's quantization semantics, for imported models that quantize with their own
// scales and zero points (ONNX QuantizeLinear, ConvInteger, QLinearConv, ...). Unlike the
// eightbit ops (ops/quantized_ops.cc), zero points may be u8 or i8 and nonzero on both operands,
// rounding is half to even, and requantization multiplies in floating point as ONNX specifies.
//
// Scales and zero points are tensors: one element (per tensor) or 1-D with one entry per index
// of an axis (per axis, or per output channel / row / column). Images are NHWC and filters HWIO,
// as for Conv2D, whose shape function checks the window geometry.
#include "ops/onnx_quant_ops.h"

#include "graph/op_registry.h"
#include "ops/broadcast.h"
#include "ops/op_names.h"
#include "ops/register.h"

namespace sf {

namespace {

bool is_8bit(DType d) { return d == DType::u8 || d == DType::i8; }

void expect_8bit(const InferContext& ctx, int i, const char* what) {
  if (!is_8bit(ctx.dtype(i)))
    ctx.fail("input '{}' must be u8 or i8, got {}", what, dtype_name(ctx.dtype(i)));
}

// Input i is a zero point with the dtype of input `of` (the value it belongs to).
void expect_zero_point_dtype(const InferContext& ctx, int i, const char* what, int of,
                             const char* of_what) {
  if (ctx.dtype(i) != ctx.dtype(of))
    ctx.fail("input '{}' is {} but '{}' is {}: they must have the same dtype", what,
             dtype_name(ctx.dtype(i)), of_what, dtype_name(ctx.dtype(of)));
}

// Input i holds one value, or (when `count` > 0) may instead hold one per index: 1-D [count].
void expect_count(const InferContext& ctx, int i, const char* what, int64_t count,
                  const char* per) {
  const Shape& s = ctx.shape(i);
  if (s.size() <= 1 && num_elements(s) == 1) return;
  if (count > 0 && s == Shape{count}) return;
  if (count > 0)
    ctx.fail("input '{}' must hold 1 value or [{}] (one per {}), got {}", what, count, per,
             shape_str(s));
  ctx.fail("input '{}' must hold 1 value (per tensor), got {}", what, shape_str(s));
}

void expect_scale(const InferContext& ctx, int i, const char* what, int64_t count,
                  const char* per) {
  ctx.expect_dtype(i, DType::f32, what);
  expect_count(ctx, i, what, count, per);
}

// Zero point i must have scale j's shape (both per tensor or both per axis).
void expect_same_count(const InferContext& ctx, int i, const char* what, int j, const char* scale) {
  if (num_elements(ctx.shape(i)) != num_elements(ctx.shape(j)))
    ctx.fail("input '{}' {} and '{}' {} must have the same number of values", what,
             shape_str(ctx.shape(i)), scale, shape_str(ctx.shape(j)));
}

std::vector<TensorType> typed(DType dtype, Shape shape) {
  return {TensorType{dtype, std::move(shape)}};
}

// The per-axis extent the scale of a (de)quantization of input 0 may have; checks the axis
// when the scale is per axis (ONNX ignores it for per-tensor scales).
int64_t axis_extent(const InferContext& ctx) {
  const Shape& x = ctx.shape(0);
  if (num_elements(ctx.shape(1)) == 1 && ctx.shape(1).size() <= 1) return 0;
  const int64_t rank = static_cast<int64_t>(x.size());
  const int64_t axis = ctx.attrs().get_int("axis");
  if (axis < -rank || axis >= rank)
    ctx.fail("axis {} is out of range for x {} (rank {})", axis, shape_str(x), rank);
  return x[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
}

std::vector<TensorType> infer_quantize_linear(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  expect_scale(ctx, 1, "scale", axis_extent(ctx), "index of x's axis");
  expect_8bit(ctx, 2, "zero_point");
  expect_same_count(ctx, 2, "zero_point", 1, "scale");
  return typed(ctx.dtype(2), ctx.shape(0));
}

std::vector<TensorType> infer_dequantize_linear(const InferContext& ctx) {
  if (!is_8bit(ctx.dtype(0)) && ctx.dtype(0) != DType::i32)
    ctx.fail("input 'q' must be u8, i8 or i32, got {}", dtype_name(ctx.dtype(0)));
  expect_scale(ctx, 1, "scale", axis_extent(ctx), "index of q's axis");
  expect_zero_point_dtype(ctx, 2, "zero_point", 0, "q");
  expect_same_count(ctx, 2, "zero_point", 1, "scale");
  return typed(DType::f32, ctx.shape(0));
}

std::vector<TensorType> infer_dynamic_quantize_linear(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  return {TensorType{DType::u8, ctx.shape(0)}, TensorType{DType::f32, {}},
          TensorType{DType::u8, {}}};
}

// Conv2D's shape function on f32 stand-ins for x (input 0) and w (input `w`), so that its
// window and channel checks, and their messages naming this node, are reused.
Shape conv_shape(const InferContext& ctx, int w) {
  ctx.expect_rank(0, 4, "x");
  ctx.expect_rank(w, 4, "w");
  const std::vector<TensorType> as_f32{{DType::f32, ctx.shape(0)}, {DType::f32, ctx.shape(w)}};
  InferContext conv_ctx(ctx.node(), as_f32);
  const OpDef& conv = OpRegistry::global().get(op_names::kConv2D, "node '" + ctx.node().name + "'");
  return conv.infer(conv_ctx).at(0).shape;
}

// x, w, x_zero_point, w_zero_point.
std::vector<TensorType> infer_conv_integer2d(const InferContext& ctx) {
  expect_8bit(ctx, 0, "x");
  expect_8bit(ctx, 1, "w");
  const Shape y = conv_shape(ctx, 1);
  expect_zero_point_dtype(ctx, 2, "x_zero_point", 0, "x");
  expect_count(ctx, 2, "x_zero_point", 0, "");
  expect_zero_point_dtype(ctx, 3, "w_zero_point", 1, "w");
  expect_count(ctx, 3, "w_zero_point", y.back(), "output channel");
  return typed(DType::i32, y);
}

// x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias.
std::vector<TensorType> infer_qlinear_conv2d(const InferContext& ctx) {
  expect_8bit(ctx, 0, "x");
  expect_8bit(ctx, 3, "w");
  const Shape y = conv_shape(ctx, 3);
  const int64_t channels = y.back();
  expect_scale(ctx, 1, "x_scale", 0, "");
  expect_zero_point_dtype(ctx, 2, "x_zero_point", 0, "x");
  expect_count(ctx, 2, "x_zero_point", 0, "");
  expect_scale(ctx, 4, "w_scale", channels, "output channel");
  expect_zero_point_dtype(ctx, 5, "w_zero_point", 3, "w");
  expect_count(ctx, 5, "w_zero_point", channels, "output channel");
  expect_scale(ctx, 6, "y_scale", 0, "");
  expect_8bit(ctx, 7, "y_zero_point");
  expect_count(ctx, 7, "y_zero_point", 0, "");
  ctx.expect_dtype(8, DType::i32, "bias");
  if (ctx.shape(8) != Shape{channels})
    ctx.fail("input 'bias' must be [{}] (one per output channel), got {}", channels,
             shape_str(ctx.shape(8)));
  return typed(ctx.dtype(7), y);
}

// a [...,M,K] (input 0) times b [...,K,N] (input `b`), batch dimensions broadcast.
Shape matmul_shape(const InferContext& ctx, int b) {
  const Shape& as = ctx.shape(0);
  const Shape& bs = ctx.shape(b);
  if (as.size() < 2 || bs.size() < 2)
    ctx.fail("a {} and b {} must have rank 2 or more", shape_str(as), shape_str(bs));
  if (as[as.size() - 1] != bs[bs.size() - 2])
    ctx.fail("inner dimensions differ: a {} vs b {}", shape_str(as), shape_str(bs));
  const std::optional<Shape> batch =
      broadcast_shapes(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2));
  if (!batch)
    ctx.fail("batch dimensions of a {} and b {} do not broadcast", shape_str(as), shape_str(bs));
  Shape y = *batch;
  y.push_back(as[as.size() - 2]);
  y.push_back(bs.back());
  return y;
}

// a, b, a_zero_point, b_zero_point.
std::vector<TensorType> infer_matmul_integer(const InferContext& ctx) {
  expect_8bit(ctx, 0, "a");
  expect_8bit(ctx, 1, "b");
  const Shape y = matmul_shape(ctx, 1);
  expect_zero_point_dtype(ctx, 2, "a_zero_point", 0, "a");
  expect_count(ctx, 2, "a_zero_point", y[y.size() - 2], "row of a");
  expect_zero_point_dtype(ctx, 3, "b_zero_point", 1, "b");
  expect_count(ctx, 3, "b_zero_point", y.back(), "column of b");
  return typed(DType::i32, y);
}

// a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
std::vector<TensorType> infer_qlinear_matmul(const InferContext& ctx) {
  expect_8bit(ctx, 0, "a");
  expect_8bit(ctx, 3, "b");
  const Shape y = matmul_shape(ctx, 3);
  const int64_t rows = y[y.size() - 2], columns = y.back();
  expect_scale(ctx, 1, "a_scale", rows, "row of a");
  expect_zero_point_dtype(ctx, 2, "a_zero_point", 0, "a");
  expect_count(ctx, 2, "a_zero_point", rows, "row of a");
  expect_scale(ctx, 4, "b_scale", columns, "column of b");
  expect_zero_point_dtype(ctx, 5, "b_zero_point", 3, "b");
  expect_count(ctx, 5, "b_zero_point", columns, "column of b");
  expect_scale(ctx, 6, "y_scale", 0, "");
  expect_8bit(ctx, 7, "y_zero_point");
  expect_count(ctx, 7, "y_zero_point", 0, "");
  return typed(ctx.dtype(7), y);
}

}  // namespace

void register_onnx_quant_ops(OpRegistry& r) {
  // A copy: adding to the registry may move its entries.
  const std::vector<AttrSpec> conv_attrs = r.get(op_names::kConv2D, "ONNX quantization ops").attrs;
  const std::vector<AttrSpec> axis_attr{{"axis", AttrKind::Int, AttrValue{int64_t{1}}}};
  r.add(OpDef{.name = op_names::kQuantizeLinear,
              .inputs = {"x", "scale", "zero_point"},
              .attrs = axis_attr,
              .infer = infer_quantize_linear});
  r.add(OpDef{.name = op_names::kDequantizeLinear,
              .inputs = {"q", "scale", "zero_point"},
              .attrs = axis_attr,
              .infer = infer_dequantize_linear});
  r.add(OpDef{.name = op_names::kDynamicQuantizeLinear,
              .inputs = {"x"},
              .infer = infer_dynamic_quantize_linear});
  // Weights w [KH,KW,C/groups,O] and b [...,K,N]: output channels last.
  r.add(OpDef{.name = op_names::kConvInteger2D,
              .inputs = {"x", "w", "x_zero_point", "w_zero_point"},
              .attrs = conv_attrs,
              .infer = infer_conv_integer2d,
              .weights = {{.input = 1, .channel_axis = -1}}});
  r.add(OpDef{.name = op_names::kQLinearConv2D,
              .inputs = {"x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
                         "y_zero_point", "bias"},
              .attrs = conv_attrs,
              .infer = infer_qlinear_conv2d,
              .weights = {{.input = 3, .channel_axis = -1}}});
  r.add(OpDef{.name = op_names::kMatMulInteger,
              .inputs = {"a", "b", "a_zero_point", "b_zero_point"},
              .infer = infer_matmul_integer,
              .weights = {{.input = 1, .channel_axis = -1}}});
  r.add(OpDef{.name = op_names::kQLinearMatMul,
              .inputs = {"a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
                         "y_zero_point"},
              .infer = infer_qlinear_matmul,
              .weights = {{.input = 3, .channel_axis = -1}}});
}

namespace ops {

Output quantize_linear(Graph& g, Output x, Output scale, Output zero_point, int64_t axis,
                       const std::string& name) {
  return g.add(op_names::kQuantizeLinear, {x, scale, zero_point}, {{"axis", axis}}, name);
}

Output dequantize_linear(Graph& g, Output q, Output scale, Output zero_point, int64_t axis,
                         const std::string& name) {
  return g.add(op_names::kDequantizeLinear, {q, scale, zero_point}, {{"axis", axis}}, name);
}

Output dynamic_quantize_linear(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kDynamicQuantizeLinear, {x}, {}, name);
}

Output conv_integer2d(Graph& g, Output x, Output w, Output x_zero_point, Output w_zero_point,
                      const Conv2DOptions& options, const std::string& name) {
  return g.add(op_names::kConvInteger2D, {x, w, x_zero_point, w_zero_point}, conv2d_attrs(options),
               name);
}

Output matmul_integer(Graph& g, Output a, Output b, Output a_zero_point, Output b_zero_point,
                      const std::string& name) {
  return g.add(op_names::kMatMulInteger, {a, b, a_zero_point, b_zero_point}, {}, name);
}

Output qlinear_conv2d(Graph& g, const QLinearInputs& in, Output bias, const Conv2DOptions& options,
                      const std::string& name) {
  return g.add(op_names::kQLinearConv2D,
               {in.x, in.x_scale, in.x_zero_point, in.w, in.w_scale, in.w_zero_point, in.y_scale,
                in.y_zero_point, bias},
               conv2d_attrs(options), name);
}

Output qlinear_matmul(Graph& g, const QLinearInputs& in, const std::string& name) {
  return g.add(op_names::kQLinearMatMul,
               {in.x, in.x_scale, in.x_zero_point, in.w, in.w_scale, in.w_zero_point, in.y_scale,
                in.y_zero_point},
               {}, name);
}

}  // namespace ops
}  // namespace sf
