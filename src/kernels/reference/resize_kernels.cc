// Reference kernel for Resize (resize_ops.cc) following the ONNX spec and its reference
// implementation (onnx/reference/ops/op_resize.py): each output row and column maps back to a
// source coordinate, then takes its nearest input pixel, a linear mix of the two around it, or a
// cubic mix of the four around it.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/op_names.h"

namespace sf {

namespace {

struct Tap {
  int64_t index;
  double weight;
};

// The source coordinate of output position `x` along an axis resized from `in` to `out` by
// `scale` (the model's, or out / in), as ONNX's reference computes it.
double source_coord(const std::string& mode, int64_t x, int64_t in, int64_t out, double scale) {
  const double xd = static_cast<double>(x);
  if (mode == "asymmetric") return xd / scale;
  if (mode == "align_corners") {
    // The unrounded output length, as ONNX's reference takes it.
    const double length = scale * static_cast<double>(in);
    return length == 1.0 ? 0.0 : xd * static_cast<double>(in - 1) / (length - 1.0);
  }
  if (mode == "pytorch_half_pixel" && out == 1) return -0.5;
  if (mode == "tf_half_pixel_for_nn") return (xd + 0.5) / scale;
  return (xd + 0.5) / scale - 0.5;  // half_pixel, pytorch_half_pixel
}

// Weights of the taps at floor - 1 .. floor + 2 for a coordinate `ratio` past the left one of
// the middle pair, in (0, 1] (Keys' cubic convolution with parameter a).
std::array<double, 4> cubic_weights(double ratio, double a) {
  const double r = ratio, q = 1.0 - ratio;
  return {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
          ((a + 2) * r - (a + 3)) * r * r + 1, ((a + 2) * q - (a + 3)) * q * q + 1,
          ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a};
}

// The input taps of every output position along one axis. Coordinates outside the input use
// its edge pixel, as ONNX's edge padding does (cubic's exclude_outside drops them instead;
// tf_crop_and_resize leaves such a position without taps).
std::vector<std::vector<Tap>> axis_taps(const Attrs& attrs, int axis, int64_t in, int64_t out) {
  const std::string& ctm = attrs.get_string("coordinate_transformation_mode");
  const std::string& nearest = attrs.get_string("nearest_mode");
  const std::string& mode = attrs.get_string("mode");
  const std::vector<double>& scales = attrs.get_floats("scales");
  const double scale = scales.empty() ? static_cast<double>(out) / static_cast<double>(in)
                                      : scales[static_cast<size_t>(axis)];
  auto clamp = [in](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
  std::vector<std::vector<Tap>> taps(static_cast<size_t>(out));
  const std::vector<double>& roi = attrs.get_floats("roi");
  for (int64_t x = 0; x < out; ++x) {
    double src;
    if (ctm == "tf_crop_and_resize") {
      // No taps: the position lies outside the input and takes extrapolation_value.
      const double start = roi[static_cast<size_t>(axis)], end = roi[static_cast<size_t>(axis) + 2];
      const double last = static_cast<double>(in - 1);
      src = out > 1 ? start * last + static_cast<double>(x) * (end - start) * last /
                                         static_cast<double>(out - 1)
                    : 0.5 * (start + end) * last;
      if (src < 0 || src > last) continue;
    } else {
      src = source_coord(ctm, x, in, out, scale);
    }
    const double lo = std::floor(src);
    const double frac = src - lo;
    const int64_t i0 = static_cast<int64_t>(lo);
    std::vector<Tap>& t = taps[static_cast<size_t>(x)];
    if (mode == "linear") {
      t = {{clamp(i0), 1.0 - frac}, {clamp(i0 + 1), frac}};
      continue;
    }
    if (mode == "cubic") {
      // A whole coordinate sits at ratio 1 past the pixel on its left, as in ONNX's reference.
      const int64_t left = frac == 0.0 ? i0 - 1 : i0;
      const std::array<double, 4> w = cubic_weights(frac == 0.0 ? 1.0 : frac,
                                                    attrs.get_float("cubic_coeff_a"));
      double kept = 0.0;
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t i = left - 1 + k;
        if (attrs.get_bool("exclude_outside") && (i < 0 || i >= in)) continue;
        t.push_back({clamp(i), w[static_cast<size_t>(k)]});
        kept += w[static_cast<size_t>(k)];
      }
      if (attrs.get_bool("exclude_outside"))
        for (Tap& tap : t) tap.weight /= kept;
      continue;
    }
    bool up = false;  // take i0 + 1 rather than i0
    if (frac != 0.0) {
      if (nearest == "round_prefer_floor") up = frac > 0.5;
      if (nearest == "round_prefer_ceil") up = frac >= 0.5;
      if (nearest == "ceil") up = true;
    }
    t = {{clamp(up ? i0 + 1 : i0), 1.0}};
  }
  return taps;
}

void resize(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  const int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
  const int64_t oh = y.dim(1), ow = y.dim(2);
  const std::vector<std::vector<Tap>> rows = axis_taps(ctx.node.attrs, 0, h, oh);
  const std::vector<std::vector<Tap>> cols = axis_taps(ctx.node.attrs, 1, w, ow);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  std::vector<double> acc(static_cast<size_t>(c));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t col = 0; col < ow; ++col) {
        const bool outside = rows[static_cast<size_t>(r)].empty() || cols[static_cast<size_t>(col)].empty();
        std::fill(acc.begin(), acc.end(), outside ? ctx.node.attrs.get_float("extrapolation_value") : 0.0);
        for (const Tap& tr : rows[static_cast<size_t>(r)])
          for (const Tap& tc : cols[static_cast<size_t>(col)]) {
            const double wt = tr.weight * tc.weight;
            const float* px = xp + ((b * h + tr.index) * w + tc.index) * c;
            for (int64_t ch = 0; ch < c; ++ch) acc[static_cast<size_t>(ch)] += wt * px[ch];
          }
        float* py = yp + ((b * oh + r) * ow + col) * c;
        for (int64_t ch = 0; ch < c; ++ch)
          py[ch] = static_cast<float>(acc[static_cast<size_t>(ch)]);
      }
}

// Resize's adjoint: each dy element is spread over the taps its output read, with their
// weights (tf_crop_and_resize's extrapolated positions read none and pass nothing back).
void resize_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.inputs[0];
  const Tensor& dx = ctx.outputs[0];
  const int64_t n = dx.dim(0), h = dx.dim(1), w = dx.dim(2), c = dx.dim(3);
  const int64_t oh = dy.dim(1), ow = dy.dim(2);
  const std::vector<std::vector<Tap>> rows = axis_taps(ctx.node.attrs, 0, h, oh);
  const std::vector<std::vector<Tap>> cols = axis_taps(ctx.node.attrs, 1, w, ow);
  const float* dyp = dy.data<float>();
  std::vector<double> acc(static_cast<size_t>(dx.numel()), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t col = 0; col < ow; ++col) {
        const float* py = dyp + ((b * oh + r) * ow + col) * c;
        for (const Tap& tr : rows[static_cast<size_t>(r)])
          for (const Tap& tc : cols[static_cast<size_t>(col)]) {
            const double wt = tr.weight * tc.weight;
            double* px = acc.data() + ((b * h + tr.index) * w + tc.index) * c;
            for (int64_t ch = 0; ch < c; ++ch) px[ch] += wt * py[ch];
          }
      }
  float* dxp = dx.data<float>();
  for (size_t i = 0; i < acc.size(); ++i) dxp[i] = static_cast<float>(acc[i]);
}

}  // namespace

void register_reference_resize_kernels(KernelRegistry& r) {
  r.add(simple_kernel(op_names::kResize, DType::f32, "reference", resize));
  r.add(simple_kernel(op_names::kResizeGrad, DType::f32, "reference", resize_grad));
}

}  // namespace sf
