// Reference kernel for ConvTranspose2D (conv_transpose_ops.cc): a scatter loop that adds every
// input pixel times every filter tap into the output position that tap reaches, accumulating in
// double. Strides, dilations and pads come from ops/conv_geometry.h.
#include <vector>

#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf {

namespace {

void conv_transpose2d(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& f = ctx.inputs[1];
  const Tensor& y = ctx.outputs[0];
  const Attrs& attrs = ctx.node.attrs;
  const int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), cin = x.dim(3);
  const int64_t kh = f.dim(0), kw = f.dim(1), og = f.dim(2);
  const int64_t oh = y.dim(1), ow = y.dim(2), cout = y.dim(3);
  const int64_t ig = cin / attrs.get_int("groups");
  // The geometry of the adjoint Conv2D, which reads y where this op writes it.
  WindowAttrs wa{.window = {},
                 .strides = attrs.get_ints("strides"),
                 .dilations = attrs.get_ints("dilations"),
                 .padding = "EXPLICIT",
                 .pads = attrs.get_ints("pads")};
  const Window2D g = window_2d_checked(oh, ow, kh, kw, wa);
  const float* xp = x.data<float>();
  const float* fp = f.data<float>();
  std::vector<double> acc(static_cast<size_t>(y.numel()), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t r = 0; r < h; ++r)
      for (int64_t c = 0; c < w; ++c)
        for (int64_t fr = 0; fr < kh; ++fr) {
          const int64_t yr = r * g.h.stride - g.h.pad_before + fr * g.h.dilation;
          if (yr < 0 || yr >= oh) continue;
          for (int64_t fc = 0; fc < kw; ++fc) {
            const int64_t yc = c * g.w.stride - g.w.pad_before + fc * g.w.dilation;
            if (yc < 0 || yc >= ow) continue;
            for (int64_t ci = 0; ci < cin; ++ci) {
              const double v = xp[((b * h + r) * w + c) * cin + ci];
              const int64_t group = ci / ig;
              const float* taps = fp + ((fr * kw + fc) * og) * cin + ci;  // [o] at stride cin
              double* out = acc.data() + ((b * oh + yr) * ow + yc) * cout + group * og;
              for (int64_t o = 0; o < og; ++o) out[o] += v * taps[o * cin];
            }
          }
        }
  float* yp = y.data<float>();
  for (size_t i = 0; i < acc.size(); ++i) yp[i] = static_cast<float>(acc[i]);
}

}  // namespace

void register_reference_conv_transpose_kernels(KernelRegistry& r) {
  r.add(simple_kernel(op_names::kConvTranspose2D, DType::f32, "reference", conv_transpose2d));
}

}  // namespace sf
