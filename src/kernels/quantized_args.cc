#include "kernels/quantized_args.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "graph/op_registry.h"

namespace sf {

namespace {

const std::string& input_name(const KernelContext& ctx, int i) {
  static const std::string unnamed = "?";
  const OpDef* def = OpRegistry::global().find(ctx.node.op);
  if (def == nullptr || def->inputs.empty()) return unnamed;
  return def->inputs.at(std::min(static_cast<size_t>(i), def->inputs.size() - 1));
}

bool positive_finite(float v) { return std::isfinite(v) && v > 0.0f; }

}  // namespace

QuantParams params_input(const KernelContext& ctx, int i) {
  const float* p = ctx.inputs.at(static_cast<size_t>(i)).data<float>();
  const float zp = p[1];
  if (!positive_finite(p[0]) || !(zp >= 0.0f && zp <= 255.0f && zp == std::round(zp)))
    fail("node '{}' ({}): input {} ('{}') = [{}, {}] must be [scale > 0, zero_point an integer "
         "in 0..255]",
         ctx.node.name, ctx.node.op, i, input_name(ctx, i), p[0], zp);
  return {p[0], static_cast<int32_t>(zp)};
}

std::vector<float> scales_input(const KernelContext& ctx, int i, int64_t channels) {
  const Tensor& t = ctx.inputs.at(static_cast<size_t>(i));
  const float* p = t.data<float>();
  std::vector<float> out(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const float s = p[t.numel() == 1 ? 0 : c];
    if (!positive_finite(s))
      fail("node '{}' ({}): input {} ('{}') has scale {} at {}; scales must be positive",
           ctx.node.name, ctx.node.op, i, input_name(ctx, i), s, t.numel() == 1 ? 0 : c);
    out[static_cast<size_t>(c)] = s;
  }
  return out;
}

void write_params(const Tensor& out, QuantParams p) {
  float* o = out.data<float>();
  o[0] = p.scale;
  o[1] = static_cast<float>(p.zero_point);
}

std::vector<int32_t> quantized_bias(const float* bias, float x_scale,
                                    const std::vector<float>& w_scales) {
  std::vector<int32_t> out(w_scales.size());
  for (size_t c = 0; c < w_scales.size(); ++c)
    out[c] = quantize_bias(bias[c], x_scale, w_scales[c]);
  return out;
}

std::vector<QuantizedMultiplier> requantize_multipliers(float x_scale,
                                                        const std::vector<float>& w_scales,
                                                        float out_scale) {
  std::vector<QuantizedMultiplier> out(w_scales.size());
  for (size_t c = 0; c < w_scales.size(); ++c)
    out[c] = requantize_multiplier(x_scale, w_scales[c], out_scale);
  return out;
}

ConcatRows concat_rows_of(const KernelContext& ctx) {
  const int pairs = static_cast<int>(ctx.inputs.size()) / 2;
  const Tensor& y = ctx.outputs[0];
  int64_t axis = ctx.node.attrs.get_int("axis");
  if (axis < 0) axis += y.rank();
  ConcatRows c;
  c.out = params_input(ctx, 2 * pairs);
  int64_t inner = 1;
  for (int d = 0; d < y.rank(); ++d) {
    if (d < axis) c.outer *= y.dim(d);
    if (d > axis) inner *= y.dim(d);
  }
  c.y_row = y.dim(static_cast<int>(axis)) * inner;
  for (int p = 0; p < pairs; ++p) {
    const Tensor& x = ctx.inputs[static_cast<size_t>(2 * p)];
    ConcatInput in{x.data<uint8_t>(), x.dim(static_cast<int>(axis)) * inner,
                   params_input(ctx, 2 * p + 1), true, QuantizedMultiplier{}};
    in.same = in.params.scale == c.out.scale && in.params.zero_point == c.out.zero_point;
    if (!in.same) in.multiplier = quantize_multiplier(double{in.params.scale} / c.out.scale);
    c.inputs.push_back(in);
  }
  return c;
}

}  // namespace sf
