// Resize of NHWC images to a given [out_h, out_w], with ONNX Resize semantics (nearest,
// bilinear or bicubic; the coordinate transformation and nearest rounding modes of the ONNX
// spec, tf_crop_and_resize's crop with an extrapolation value; the scales the model gave, when
// it gave scales rather than sizes). The coordinate math lives in the reference kernel; the
// shape function validates the attributes. Every mode is linear in x, so the gradient
// (ResizeGrad) spreads dy back over the same taps.
#include <algorithm>
#include <cmath>

#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

bool one_of(const std::string& value, std::initializer_list<const char*> allowed) {
  for (const char* a : allowed)
    if (value == a) return true;
  return false;
}

// The output shape of Resize for the x of input `x_input`, its attributes validated.
Shape resized_shape(const InferContext& ctx, int x_input) {
  ctx.expect_dtype(x_input, DType::f32, "x");
  ctx.expect_rank(x_input, 4, "x");
  const Attrs& a = ctx.attrs();
  const Shape& x = ctx.shape(x_input);
  const std::vector<int64_t>& sizes = a.get_ints("sizes");
  if (sizes.size() != 2 || sizes[0] < 1 || sizes[1] < 1)
    ctx.fail("sizes must be 2 positive ints [out_h, out_w], got [{}]", fmt::join(sizes, ","));
  if (x[1] < 1 || x[2] < 1) ctx.fail("x {} has an empty spatial axis", shape_str(x));
  const std::vector<double>& scales = a.get_floats("scales");
  if (!scales.empty() && (scales.size() != 2 || !(scales[0] > 0 && scales[1] > 0) ||
                          !std::isfinite(scales[0]) || !std::isfinite(scales[1])))
    ctx.fail("scales must be empty or 2 positive numbers [scale_h, scale_w], got [{}]",
             fmt::join(scales, ","));
  const std::string& mode = a.get_string("mode");
  if (!one_of(mode, {"nearest", "linear", "cubic"}))
    ctx.fail("mode must be nearest, linear or cubic, got '{}'", mode);
  const std::string& ctm = a.get_string("coordinate_transformation_mode");
  if (!one_of(ctm, {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
                    "tf_half_pixel_for_nn", "tf_crop_and_resize"}))
    ctx.fail(
        "coordinate_transformation_mode must be half_pixel, asymmetric, align_corners, "
        "pytorch_half_pixel, tf_half_pixel_for_nn or tf_crop_and_resize, got '{}'",
        ctm);
  const std::vector<double>& roi = a.get_floats("roi");
  if (ctm == "tf_crop_and_resize" &&
      (roi.size() != 4 ||
       !std::all_of(roi.begin(), roi.end(), [](double v) { return std::isfinite(v); })))
    ctx.fail("tf_crop_and_resize needs roi [h_start, w_start, h_end, w_end] (finite), got [{}]",
             fmt::join(roi, ","));
  const std::string& nearest = a.get_string("nearest_mode");
  if (!one_of(nearest, {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}))
    ctx.fail("nearest_mode must be round_prefer_floor, round_prefer_ceil, floor or ceil, got '{}'",
             nearest);
  return {x[0], sizes[0], sizes[1], x[3]};
}

std::vector<TensorType> infer_resize(const InferContext& ctx) {
  return {TensorType{DType::f32, resized_shape(ctx, 0)}};
}

// ResizeGrad(dy, x): x is read for its shape only.
std::vector<TensorType> infer_resize_grad(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "dy");
  const Shape want = resized_shape(ctx, 1);
  if (ctx.shape(0) != want)
    ctx.fail("dy {} does not match the resized x {}", shape_str(ctx.shape(0)), shape_str(want));
  return {TensorType{DType::f32, ctx.shape(1)}};
}

std::vector<AttrSpec> resize_attr_specs() {
  return {
      {"sizes", AttrKind::Ints, std::nullopt},
      {"mode", AttrKind::String, AttrValue{std::string("nearest")}},
      {"coordinate_transformation_mode", AttrKind::String, AttrValue{std::string("half_pixel")}},
      {"nearest_mode", AttrKind::String, AttrValue{std::string("round_prefer_floor")}},
      // Empty: the scale of each axis is out / in.
      {"scales", AttrKind::Floats, AttrValue{std::vector<double>{}}},
      {"cubic_coeff_a", AttrKind::Float, AttrValue{-0.75}},
      {"exclude_outside", AttrKind::Bool, AttrValue{false}},
      // tf_crop_and_resize: the crop, as fractions of (size - 1), and the value of output
      // positions that fall outside the input.
      {"roi", AttrKind::Floats, AttrValue{std::vector<double>{}}},
      {"extrapolation_value", AttrKind::Float, AttrValue{0.0}}};
}

}  // namespace

void register_resize_ops(OpRegistry& r) {
  r.add(OpDef{.name = op_names::kResize,
              .inputs = {"x"},
              .attrs = resize_attr_specs(),
              .infer = infer_resize,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                return {ctx.graph.add(op_names::kResizeGrad, {ctx.grad(), ctx.input(0)},
                                      ctx.attrs(), ctx.name("dx"))};
              }});
  r.add(OpDef{.name = op_names::kResizeGrad,
              .inputs = {"dy", "x"},
              .attrs = resize_attr_specs(),
              .infer = infer_resize_grad});
}

namespace ops {

Output resize(Graph& g, Output x, std::vector<int64_t> sizes, const ResizeOptions& o,
              const std::string& name) {
  return g.add(op_names::kResize, {x},
               {{"sizes", std::move(sizes)},
                {"mode", o.mode},
                {"coordinate_transformation_mode", o.coordinate_transformation_mode},
                {"nearest_mode", o.nearest_mode},
                {"scales", o.scales},
                {"cubic_coeff_a", o.cubic_coeff_a},
                {"exclude_outside", o.exclude_outside}},
               name);
}

}  // namespace ops
}  // namespace sf
