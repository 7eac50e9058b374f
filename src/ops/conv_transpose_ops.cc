// ConvTranspose2D with ONNX semantics on NHWC images: x [N,H,W,Cin], filter
// [kh, kw, Cout/groups, Cin]. It is the adjoint of a Conv2D (same strides, pads and dilations)
// from Cout to Cin channels, whose filter has exactly this layout; the output size is ONNX's
//   out = (in - 1) * stride - pad_begin - pad_end + dilation * (k - 1) + output_padding + 1.
// Strides, dilations and pads are validated by ops/conv_geometry.h like every other window op.
#include <limits>

#include "graph/op_registry.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

const AttrValue kOnePair{std::vector<int64_t>{1, 1}};
const AttrValue kZeroPair{std::vector<int64_t>{0, 0}};
const AttrValue kNoPads{std::vector<int64_t>{0, 0, 0, 0}};

// The window attributes of the adjoint Conv2D.
WindowAttrs adjoint_window(const Attrs& attrs) {
  return WindowAttrs{.window = {},
                     .strides = attrs.get_ints("strides"),
                     .dilations = attrs.get_ints("dilations"),
                     .padding = "EXPLICIT",
                     .pads = attrs.get_ints("pads")};
}

std::vector<TensorType> infer_conv_transpose(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  ctx.expect_dtype(1, DType::f32, "filter");
  ctx.expect_rank(0, 4, "x");
  ctx.expect_rank(1, 4, "filter");
  const Shape& x = ctx.shape(0);
  const Shape& w = ctx.shape(1);
  const int64_t groups = ctx.attrs().get_int("groups");
  if (groups < 1) ctx.fail("groups must be positive, got {}", groups);
  if (w[3] != x[3])
    ctx.fail("filter {} expects {} input channels, x {} has {}", shape_str(w), w[3], shape_str(x),
             x[3]);
  if (x[3] % groups != 0)
    ctx.fail("x {} has {} channels, not divisible by groups {}", shape_str(x), x[3], groups);
  WindowAttrs a = adjoint_window(ctx.attrs());
  const std::vector<int64_t>& extra = ctx.attrs().get_ints("output_padding");
  if (extra.size() != 2 || extra[0] < 0 || extra[1] < 0)
    ctx.fail("output_padding must be 2 non-negative ints, got [{}]", fmt::join(extra, ","));
  if (x[1] == 0 || x[2] == 0) ctx.fail("x {} has an empty spatial axis", shape_str(x));
  // window_2d checks strides, dilations and pads before it looks at sizes; it gets a size that
  // always fits the window, since the real one (the output) needs those attributes first.
  Window2D g;
  std::string err = window_2d(w[0] * 1024 + 1, w[1] * 1024 + 1, w[0], w[1], a, &g);
  if (!err.empty()) ctx.fail("x {}, filter {}: {}", shape_str(x), shape_str(w), err);
  Shape y{x[0], 0, 0, w[2] * groups};
  for (int axis = 0; axis < 2; ++axis) {
    const size_t i = static_cast<size_t>(axis);
    const int64_t stride = a.strides[i], dilation = a.dilations[i];
    // ONNX: output_padding must be smaller than the stride or the dilation.
    if (extra[i] >= std::max(stride, dilation))
      ctx.fail("output_padding [{}] must be smaller than the stride or dilation on each axis",
               fmt::join(extra, ","));
    if (x[i + 1] - 1 > limits::kMaxElements / stride)
      ctx.fail("x {} with stride {} gives an output larger than {}", shape_str(x), stride,
               limits::kMaxElements);
    y[i + 1] = (x[i + 1] - 1) * stride - a.pads[2 * i] - a.pads[2 * i + 1] + dilation * (w[i] - 1) +
               extra[i] + 1;
    if (y[i + 1] < 1)
      ctx.fail("x {}, filter {}: pads [{}] leave an empty output ({} {})", shape_str(x),
               shape_str(w), fmt::join(a.pads, ","), axis == 0 ? "height" : "width", y[i + 1]);
  }
  return {TensorType{DType::f32, y}};
}

// y = ConvTranspose(x, w) is Conv2DBackpropInput(x, w) of the adjoint Conv2D, so its gradients
// are that Conv2D (dx) and its filter backprop (dw). That Conv2D maps y's rows back to
// in + output_padding / stride of them: output_padding at or past the stride (allowed when the
// dilation is larger) adds rows the forward op never read, cropped from dx and matched by zero
// rows of x for dw. Every size here comes from the attributes, so the nodes stay right when a
// new input shape re-infers them.
std::vector<Output> grad_conv_transpose(GradContext& ctx) {
  Graph& g = ctx.graph;
  const Attrs& a = ctx.attrs();
  const Output x = ctx.input(0), w = ctx.input(1);
  const Attrs conv{{"strides", a.get_ints("strides")},
                   {"padding", std::string("EXPLICIT")},
                   {"pads", a.get_ints("pads")},
                   {"dilations", a.get_ints("dilations")},
                   {"groups", a.get_int("groups")}};
  const std::vector<int64_t>& strides = a.get_ints("strides");
  const std::vector<int64_t>& extra = a.get_ints("output_padding");
  const int64_t more_h = extra[0] / strides[0], more_w = extra[1] / strides[1];
  Output dx = g.add(op_names::kConv2D, {ctx.grad(), w}, conv, ctx.name("x"));
  Output x_rows = x;
  if (more_h > 0 || more_w > 0) {
    // Ends counted from the end (or int64 max: the whole axis) keep the crop shape-free.
    const auto end = [](int64_t more) {
      return more > 0 ? -more : std::numeric_limits<int64_t>::max();
    };
    dx = g.add(op_names::kStridedSlice, {dx},
               {{"starts", std::vector<int64_t>{0, 0}},
                {"ends", std::vector<int64_t>{end(more_h), end(more_w)}},
                {"axes", std::vector<int64_t>{1, 2}}},
               ctx.name("x_crop"));
    x_rows = g.add(op_names::kPad, {x},
                   {{"pads", std::vector<int64_t>{0, 0, 0, 0, 0, more_h, more_w, 0}}},
                   ctx.name("x_rows"));
  }
  Attrs filter = conv;
  filter.set("filter_shape", g.type(w).shape);
  Output dw =
      g.add(op_names::kConv2DBackpropFilter, {ctx.grad(), x_rows}, filter, ctx.name("filter"));
  return {dx, dw};
}

}  // namespace

void register_conv_transpose_ops(OpRegistry& r) {
  r.add(OpDef{.name = op_names::kConvTranspose2D,
              .inputs = {"x", "filter"},
              .attrs = {{"strides", AttrKind::Ints, kOnePair},
                        {"pads", AttrKind::Ints, kNoPads},
                        {"dilations", AttrKind::Ints, kOnePair},
                        {"output_padding", AttrKind::Ints, kZeroPair},
                        {"groups", AttrKind::Int, AttrValue{int64_t{1}}}},
              .infer = infer_conv_transpose,
              .grad = grad_conv_transpose,
              // [kh, kw, out/groups, in]: output channels on axis 2.
              .weights = {{.input = 1, .channel_axis = 2}}});
}

namespace ops {

Output conv_transpose2d(Graph& g, Output x, Output w, const ConvTranspose2DOptions& o,
                        const std::string& name) {
  return g.add(op_names::kConvTranspose2D, {x, w},
               {{"strides", o.strides},
                {"pads", o.pads},
                {"dilations", o.dilations},
                {"output_padding", o.output_padding},
                {"groups", o.groups}},
               name);
}

}  // namespace ops
}  // namespace sf
