// Reference kernels for the ops with ONNX's quantization semantics (ops/onnx_quant_ops.cc).
// Integer inputs are widened to int32 with their zero points subtracted, products accumulate
// in int64, and every rounding is half to even (std::nearbyint in the default rounding mode),
// as ONNX specifies.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/broadcast.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf {

namespace {

// The elements of an integer tensor (u8, i8 or i32) as int32.
std::vector<int32_t> integers(const Tensor& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  switch (t.dtype()) {
    case DType::u8:
      std::copy_n(t.data<uint8_t>(), out.size(), out.begin());
      break;
    case DType::i8:
      std::copy_n(t.data<int8_t>(), out.size(), out.begin());
      break;
    case DType::i32:
      std::copy_n(t.data<int32_t>(), out.size(), out.begin());
      break;
    default:
      SF_CHECK(false, "integers: {} tensor", dtype_name(t.dtype()));
  }
  return out;
}

std::vector<float> floats(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// The value a per-tensor or per-index parameter holds for index i.
template <typename T>
T at(const std::vector<T>& values, int64_t i) {
  return values.size() == 1 ? values[0] : values[static_cast<size_t>(i)];
}

// round(v) (half to even) saturated to the range of an 8-bit `dtype`; NaN gives 0.
int32_t saturate_8bit(double v, DType dtype) {
  const double lo = dtype == DType::u8 ? 0.0 : -128.0, hi = dtype == DType::u8 ? 255.0 : 127.0;
  if (std::isnan(v)) return 0;
  return static_cast<int32_t>(std::clamp(std::nearbyint(v), lo, hi));
}

int32_t saturate_i32(int64_t v) {
  return static_cast<int32_t>(std::clamp<int64_t>(v, std::numeric_limits<int32_t>::min(),
                                                  std::numeric_limits<int32_t>::max()));
}

// Stores integer values (already in range) into a u8, i8 or i32 tensor.
void store(const std::vector<int32_t>& values, const Tensor& out) {
  switch (out.dtype()) {
    case DType::u8:
      std::transform(values.begin(), values.end(), out.data<uint8_t>(),
                     [](int32_t v) { return static_cast<uint8_t>(v); });
      break;
    case DType::i8:
      std::transform(values.begin(), values.end(), out.data<int8_t>(),
                     [](int32_t v) { return static_cast<int8_t>(v); });
      break;
    case DType::i32:
      std::copy(values.begin(), values.end(), out.data<int32_t>());
      break;
    default:
      SF_CHECK(false, "store: {} tensor", dtype_name(out.dtype()));
  }
}

// For element i of x: the index along the axis a per-axis scale follows (0 when per tensor).
struct AxisIndex {
  int64_t inner = 1, extent = 1;
  AxisIndex(const KernelContext& ctx, int scale) {
    if (ctx.inputs[static_cast<size_t>(scale)].numel() == 1) return;
    const Shape& x = ctx.inputs[0].shape();
    int64_t axis = ctx.node.attrs.get_int("axis");
    if (axis < 0) axis += static_cast<int64_t>(x.size());
    extent = x[static_cast<size_t>(axis)];
    for (size_t d = static_cast<size_t>(axis) + 1; d < x.size(); ++d) inner *= x[d];
  }
  int64_t operator()(int64_t i) const { return extent == 1 ? 0 : (i / inner) % extent; }
};

// --- QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear ---

// y = saturate(round(x / scale) + zero_point); the division is in float, as ONNX defines it.
void quantize_linear(KernelContext& ctx) {
  const float* x = ctx.inputs[0].data<float>();
  const std::vector<float> scale = floats(ctx.inputs[1]);
  const std::vector<int32_t> zero_point = integers(ctx.inputs[2]);
  const AxisIndex channel(ctx, 1);
  const DType dtype = ctx.outputs[0].dtype();
  std::vector<int32_t> y(static_cast<size_t>(ctx.outputs[0].numel()));
  for (size_t i = 0; i < y.size(); ++i) {
    const int64_t c = channel(static_cast<int64_t>(i));
    const float scaled = std::nearbyint(x[i] / at(scale, c));
    y[i] = std::isnan(scaled) ? at(zero_point, c)
                              : saturate_8bit(double{scaled} + at(zero_point, c), dtype);
  }
  store(y, ctx.outputs[0]);
}

// y = (q - zero_point) * scale.
void dequantize_linear(KernelContext& ctx) {
  const std::vector<int32_t> q = integers(ctx.inputs[0]);
  const std::vector<float> scale = floats(ctx.inputs[1]);
  const std::vector<int32_t> zero_point = integers(ctx.inputs[2]);
  const AxisIndex channel(ctx, 1);
  float* y = ctx.outputs[0].data<float>();
  for (size_t i = 0; i < q.size(); ++i) {
    const int64_t c = channel(static_cast<int64_t>(i));
    y[i] = static_cast<float>(int64_t{q[i]} - at(zero_point, c)) * at(scale, c);
  }
}

// ONNX's definition, in float: the range [min(x, 0), max(x, 0)] over 0..255. An all-zero
// input has no range; its scale is 1 (as in ONNX Runtime) rather than 0, which would make
// every later division by it NaN.
void dynamic_quantize_linear(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const float* xp = x.data<float>();
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < x.numel(); ++i) {
    lo = std::min(lo, xp[i]);
    hi = std::max(hi, xp[i]);
  }
  const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const int32_t zero_point = saturate_8bit(double{0.0f - lo / scale}, DType::u8);
  uint8_t* y = ctx.outputs[0].data<uint8_t>();
  for (int64_t i = 0; i < x.numel(); ++i)
    y[i] = static_cast<uint8_t>(
        saturate_8bit(double{std::nearbyint(xp[i] / scale)} + zero_point, DType::u8));
  ctx.outputs[1].data<float>()[0] = scale;
  ctx.outputs[2].data<uint8_t>()[0] = static_cast<uint8_t>(zero_point);
}

// --- integer convolution and matmul ---

// sum((x - x_zero_point) * (w - w_zero_point)) of a conv: x [N,H,W,C], w [KH,KW,C/groups,O],
// w_zero_point per tensor or per output channel. Padding taps are skipped, which is padding x
// with its zero point.
std::vector<int64_t> conv_accumulators(const KernelContext& ctx, int x_at, int x_zero_point_at,
                                       int w_at, int w_zero_point_at) {
  const Shape& xs = ctx.inputs[static_cast<size_t>(x_at)].shape();
  const Shape& ws = ctx.inputs[static_cast<size_t>(w_at)].shape();
  const Window2D g = conv_window(ctx.node.attrs, xs, ws);
  const int64_t n = xs[0], h = xs[1], wd = xs[2], c = xs[3];
  const int64_t kh = ws[0], kw = ws[1], ig = ws[2], o = ws[3];
  const int64_t og = o / ctx.node.attrs.get_int("groups");
  const int32_t x_zero_point = integers(ctx.inputs[static_cast<size_t>(x_zero_point_at)])[0];
  const std::vector<int32_t> w_zero_point =
      integers(ctx.inputs[static_cast<size_t>(w_zero_point_at)]);
  std::vector<int32_t> x = integers(ctx.inputs[static_cast<size_t>(x_at)]);
  for (int32_t& v : x) v -= x_zero_point;
  std::vector<int32_t> w = integers(ctx.inputs[static_cast<size_t>(w_at)]);
  for (size_t i = 0; i < w.size(); ++i) w[i] -= at(w_zero_point, static_cast<int64_t>(i) % o);
  std::vector<int64_t> y(static_cast<size_t>(n * g.h.out * g.w.out * o));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t yr = 0; yr < g.h.out; ++yr)
      for (int64_t yc = 0; yc < g.w.out; ++yc)
        for (int64_t oc = 0; oc < o; ++oc) {
          const int64_t group = oc / og;
          int64_t acc = 0;
          for (int64_t fr = 0; fr < kh; ++fr) {
            const int64_t xr = yr * g.h.stride - g.h.pad_before + fr * g.h.dilation;
            if (xr < 0 || xr >= h) continue;
            for (int64_t fc = 0; fc < kw; ++fc) {
              const int64_t xc = yc * g.w.stride - g.w.pad_before + fc * g.w.dilation;
              if (xc < 0 || xc >= wd) continue;
              for (int64_t i = 0; i < ig; ++i)
                acc +=
                    int64_t{x[static_cast<size_t>(((b * h + xr) * wd + xc) * c + group * ig + i)]} *
                    w[static_cast<size_t>(((fr * kw + fc) * ig + i) * o + oc)];
            }
          }
          y[static_cast<size_t>(((b * g.h.out + yr) * g.w.out + yc) * o + oc)] = acc;
        }
  return y;
}

// sum((a - a_zero_point) * (b - b_zero_point)) of a batched matmul: a [...,M,K], b [...,K,N]
// into y [...,M,N] (batch dimensions broadcast); a's zero point per tensor or per row, b's per
// tensor or per column.
std::vector<int64_t> matmul_accumulators(const KernelContext& ctx, int a_at, int a_zero_point_at,
                                         int b_at, int b_zero_point_at) {
  const Tensor& at_ = ctx.inputs[static_cast<size_t>(a_at)];
  const Tensor& bt = ctx.inputs[static_cast<size_t>(b_at)];
  const Shape& ys = ctx.outputs[0].shape();
  const int64_t m = at_.dim(-2), k = at_.dim(-1), n = bt.dim(-1);
  const std::vector<int32_t> a_zero_point =
      integers(ctx.inputs[static_cast<size_t>(a_zero_point_at)]);
  const std::vector<int32_t> b_zero_point =
      integers(ctx.inputs[static_cast<size_t>(b_zero_point_at)]);
  std::vector<int32_t> a = integers(at_);
  for (size_t i = 0; i < a.size(); ++i) a[i] -= at(a_zero_point, static_cast<int64_t>(i) / k % m);
  std::vector<int32_t> b = integers(bt);
  for (size_t i = 0; i < b.size(); ++i) b[i] -= at(b_zero_point, static_cast<int64_t>(i) % n);
  const Shape batch(ys.begin(), ys.end() - 2);
  const Shape a_batch(at_.shape().begin(), at_.shape().end() - 2);
  const Shape b_batch(bt.shape().begin(), bt.shape().end() - 2);
  std::vector<int64_t> y(static_cast<size_t>(num_elements(ys)));
  for_each_broadcast(batch, a_batch, b_batch, [&](int64_t yb, int64_t ab, int64_t bb) {
    const int32_t* ap = a.data() + ab * m * k;
    const int32_t* bp = b.data() + bb * k * n;
    int64_t* yp = y.data() + yb * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += int64_t{ap[i * k + p]} * bp[p * n + j];
        yp[i * n + j] = acc;
      }
  });
  return y;
}

void store_i32(const std::vector<int64_t>& acc, const Tensor& out) {
  std::transform(acc.begin(), acc.end(), out.data<int32_t>(), saturate_i32);
}

// y = saturate(round(acc * multiplier) + y_zero_point). The multiplier x_scale * w_scale /
// y_scale is formed in float as ONNX Runtime forms it; the product is exact in double.
void requantize_linear(const std::vector<int64_t>& acc, const std::vector<float>& multiplier,
                       int64_t channel_stride, int64_t channels, int32_t y_zero_point,
                       const Tensor& out) {
  std::vector<int32_t> y(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i) / channel_stride % channels;
    y[i] = saturate_8bit(
        std::nearbyint(static_cast<double>(acc[i]) * at(multiplier, c)) + y_zero_point,
        out.dtype());
  }
  store(y, out);
}

// x_scale (scalar) * w_scale (per tensor or per channel) / y_scale, in float.
std::vector<float> multipliers(const KernelContext& ctx, int x_scale, int w_scale, int y_scale) {
  const float xs = ctx.inputs[static_cast<size_t>(x_scale)].data<float>()[0];
  const float ys = ctx.inputs[static_cast<size_t>(y_scale)].data<float>()[0];
  std::vector<float> m = floats(ctx.inputs[static_cast<size_t>(w_scale)]);
  for (float& v : m) v = xs * v / ys;
  return m;
}

void conv_integer2d(KernelContext& ctx) {
  store_i32(conv_accumulators(ctx, 0, 2, 1, 3), ctx.outputs[0]);
}

void matmul_integer(KernelContext& ctx) {
  store_i32(matmul_accumulators(ctx, 0, 2, 1, 3), ctx.outputs[0]);
}

void qlinear_conv2d(KernelContext& ctx) {
  std::vector<int64_t> acc = conv_accumulators(ctx, 0, 2, 3, 5);
  const std::vector<int32_t> bias = integers(ctx.inputs[8]);
  const int64_t channels = ctx.outputs[0].dim(-1);
  for (size_t i = 0; i < acc.size(); ++i) acc[i] += bias[i % static_cast<size_t>(channels)];
  requantize_linear(acc, multipliers(ctx, 1, 4, 6), 1, channels, integers(ctx.inputs[7])[0],
                    ctx.outputs[0]);
}

// a_scale may be per row and b_scale per column, so the multiplier is per output element.
void qlinear_matmul(KernelContext& ctx) {
  const std::vector<int64_t> acc = matmul_accumulators(ctx, 0, 2, 3, 5);
  const std::vector<float> a_scale = floats(ctx.inputs[1]), b_scale = floats(ctx.inputs[4]);
  const float y_scale = ctx.inputs[6].data<float>()[0];
  const int64_t m = ctx.outputs[0].dim(-2), n = ctx.outputs[0].dim(-1);
  std::vector<float> multiplier(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      multiplier[static_cast<size_t>(i * n + j)] = at(a_scale, i) * at(b_scale, j) / y_scale;
  requantize_linear(acc, multiplier, 1, m * n, integers(ctx.inputs[7])[0], ctx.outputs[0]);
}

}  // namespace

void register_reference_onnx_quant_kernels(KernelRegistry& r) {
  auto add = [&](const char* op, DType dtype, void (*fn)(KernelContext&)) {
    r.add(simple_kernel(op, dtype, "reference", fn));
  };
  add(op_names::kQuantizeLinear, DType::f32, quantize_linear);
  add(op_names::kDynamicQuantizeLinear, DType::f32, dynamic_quantize_linear);
  for (DType dtype : {DType::u8, DType::i8, DType::i32})
    add(op_names::kDequantizeLinear, dtype, dequantize_linear);
  for (DType dtype : {DType::u8, DType::i8}) {
    add(op_names::kConvInteger2D, dtype, conv_integer2d);
    add(op_names::kMatMulInteger, dtype, matmul_integer);
    add(op_names::kQLinearConv2D, dtype, qlinear_conv2d);
    add(op_names::kQLinearMatMul, dtype, qlinear_matmul);
  }
}

}  // namespace sf
