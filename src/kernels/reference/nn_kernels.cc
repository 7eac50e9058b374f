// Reference kernels for the dense NN ops (nn_ops.cc): plain loops over NHWC / HWIO tensors,
// accumulating in double. Window geometry comes from ops/conv_geometry.h like everywhere else.
#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf {

namespace {

// Conv2D sizes for x [N,H,W,C], filter [KH,KW,IG,O] and y [N,OH,OW,O].
struct ConvDims {
  int64_t n, h, w, c, kh, kw, ig, o, og, oh, ow;
  Window2D g;

  ConvDims(const Attrs& attrs, const Shape& x, const Shape& filter)
      : n(x[0]),
        h(x[1]),
        w(x[2]),
        c(x[3]),
        kh(filter[0]),
        kw(filter[1]),
        ig(filter[2]),
        o(filter[3]),
        g(conv_window(attrs, x, filter)) {
    og = o / attrs.get_int("groups");
    oh = g.h.out;
    ow = g.w.out;
  }
  // Input row/column for output position `out` and filter tap `k`; may fall in the padding.
  int64_t in_row(int64_t out, int64_t k) const {
    return out * g.h.stride - g.h.pad_before + k * g.h.dilation;
  }
  int64_t in_col(int64_t out, int64_t k) const {
    return out * g.w.stride - g.w.pad_before + k * g.w.dilation;
  }
  int64_t x_at(int64_t b, int64_t r, int64_t col, int64_t ch) const {
    return ((b * h + r) * w + col) * c + ch;
  }
  int64_t y_at(int64_t b, int64_t r, int64_t col, int64_t ch) const {
    return ((b * oh + r) * ow + col) * o + ch;
  }
  int64_t w_at(int64_t r, int64_t col, int64_t i, int64_t ch) const {
    return ((r * kw + col) * ig + i) * o + ch;
  }

  // Calls fn(x index, filter index, y index) for every multiply-add of the convolution.
  template <typename Fn>
  void for_each_tap(Fn fn) const {
    for (int64_t b = 0; b < n; ++b)
      for (int64_t yr = 0; yr < oh; ++yr)
        for (int64_t yc = 0; yc < ow; ++yc)
          for (int64_t oc = 0; oc < o; ++oc) {
            const int64_t group = oc / og;
            for (int64_t fr = 0; fr < kh; ++fr) {
              const int64_t xr = in_row(yr, fr);
              if (xr < 0 || xr >= h) continue;
              for (int64_t fc = 0; fc < kw; ++fc) {
                const int64_t xc = in_col(yc, fc);
                if (xc < 0 || xc >= w) continue;
                for (int64_t i = 0; i < ig; ++i)
                  fn(x_at(b, xr, xc, group * ig + i), w_at(fr, fc, i, oc), y_at(b, yr, yc, oc));
              }
            }
          }
  }
};

void store(const std::vector<double>& acc, const Tensor& out) {
  float* p = out.data<float>();
  for (size_t i = 0; i < acc.size(); ++i) p[i] = static_cast<float>(acc[i]);
}

void conv2d(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& f = ctx.inputs[1];
  ConvDims d(ctx.node.attrs, x.shape(), f.shape());
  const float* xp = x.data<float>();
  const float* fp = f.data<float>();
  std::vector<double> y(static_cast<size_t>(ctx.outputs[0].numel()), 0.0);
  d.for_each_tap([&](int64_t xi, int64_t fi, int64_t yi) {
    y[static_cast<size_t>(yi)] += static_cast<double>(xp[xi]) * fp[fi];
  });
  store(y, ctx.outputs[0]);
}

void conv2d_backprop_input(KernelContext& ctx) {
  const Tensor& dy = ctx.inputs[0];
  const Tensor& f = ctx.inputs[1];
  ConvDims d(ctx.node.attrs, ctx.outputs[0].shape(), f.shape());
  const float* dyp = dy.data<float>();
  const float* fp = f.data<float>();
  std::vector<double> dx(static_cast<size_t>(ctx.outputs[0].numel()), 0.0);
  d.for_each_tap([&](int64_t xi, int64_t fi, int64_t yi) {
    dx[static_cast<size_t>(xi)] += static_cast<double>(dyp[yi]) * fp[fi];
  });
  store(dx, ctx.outputs[0]);
}

void conv2d_backprop_filter(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& dy = ctx.inputs[1];
  ConvDims d(ctx.node.attrs, x.shape(), ctx.outputs[0].shape());
  const float* xp = x.data<float>();
  const float* dyp = dy.data<float>();
  std::vector<double> df(static_cast<size_t>(ctx.outputs[0].numel()), 0.0);
  d.for_each_tap([&](int64_t xi, int64_t fi, int64_t yi) {
    df[static_cast<size_t>(fi)] += static_cast<double>(xp[xi]) * dyp[yi];
  });
  store(df, ctx.outputs[0]);
}

void matmul(KernelContext& ctx) {
  const Tensor& a = ctx.inputs[0];
  const Tensor& b = ctx.inputs[1];
  const bool ta = ctx.node.attrs.get_bool("transpose_a");
  const bool tb = ctx.node.attrs.get_bool("transpose_b");
  const int64_t m = ctx.outputs[0].dim(0), n = ctx.outputs[0].dim(1);
  const int64_t k = ta ? a.dim(0) : a.dim(1);
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  float* yp = ctx.outputs[0].data<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p)
        acc += static_cast<double>(ap[ta ? p * m + i : i * k + p]) * bp[tb ? j * k + p : p * n + j];
      yp[i * n + j] = static_cast<float>(acc);
    }
}

// Output batch index -> the operand's batch index, broadcasting size-1 and missing dimensions.
int64_t broadcast_batch_index(int64_t out_index, const Shape& out_batch, const Shape& operand) {
  const size_t rank = operand.size() - 2, offset = out_batch.size() - rank;
  int64_t index = 0, stride = 1;
  for (size_t i = out_batch.size(); i-- > 0;) {
    const int64_t coord = out_index % out_batch[i];
    out_index /= out_batch[i];
    if (i < offset) continue;
    const int64_t d = operand[i - offset];
    index += (d == 1 ? 0 : coord) * stride;
    stride *= d;
  }
  return index;
}

void batch_matmul(KernelContext& ctx) {
  const Tensor& a = ctx.inputs[0];
  const Tensor& b = ctx.inputs[1];
  Tensor& y = ctx.outputs[0];
  const bool ta = ctx.node.attrs.get_bool("transpose_a");
  const bool tb = ctx.node.attrs.get_bool("transpose_b");
  const Shape& out = y.shape();
  const Shape batch(out.begin(), out.end() - 2);
  const int64_t m = out[out.size() - 2], n = out.back();
  const int64_t k = ta ? a.dim(-2) : a.dim(-1);
  const int64_t batches = num_elements(batch);
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  float* yp = y.data<float>();
  for (int64_t s = 0; s < batches; ++s) {
    const float* as = ap + broadcast_batch_index(s, batch, a.shape()) * m * k;
    const float* bs = bp + broadcast_batch_index(s, batch, b.shape()) * k * n;
    float* ys = yp + s * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p)
          acc += static_cast<double>(as[ta ? p * m + i : i * k + p]) *
                 bs[tb ? j * k + p : p * n + j];
        ys[i * n + j] = static_cast<float>(acc);
      }
  }
}

void bias_add(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t c = x.dim(-1);
  const float* xp = x.data<float>();
  const float* bp = ctx.inputs[1].data<float>();
  float* yp = ctx.outputs[0].data<float>();
  const int64_t rows = x.last_axis_rows();
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t j = 0; j < c; ++j) yp[row * c + j] = xp[row * c + j] + bp[j];
}

void bias_add_relu(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t c = x.dim(-1);
  const float* xp = x.data<float>();
  const float* bp = ctx.inputs[1].data<float>();
  float* yp = ctx.outputs[0].data<float>();
  const int64_t rows = x.last_axis_rows();
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t j = 0; j < c; ++j) {
      const float v = xp[row * c + j] + bp[j];
      yp[row * c + j] = v > 0.0f ? v : 0.0f;
    }
}

void bias_add_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.inputs[0];
  const int64_t c = dy.dim(-1);
  const float* dyp = dy.data<float>();
  std::vector<double> acc(static_cast<size_t>(c), 0.0);
  const int64_t rows = dy.last_axis_rows();
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t j = 0; j < c; ++j) acc[static_cast<size_t>(j)] += dyp[row * c + j];
  store(acc, ctx.outputs[0]);
}

// Pooling over x [N,H,W,C] -> y [N,OH,OW,C].
struct PoolDims {
  int64_t n, h, w, c, oh, ow;
  Window2D g;

  PoolDims(const Attrs& attrs, const Shape& x)
      : n(x[0]), h(x[1]), w(x[2]), c(x[3]), g(pool_window(attrs, x)) {
    oh = g.h.out;
    ow = g.w.out;
  }
  // Calls fn(y index, x indices of the window's in-bounds positions, in row-major order, and
  // the full window size) for every output element.
  template <typename Fn>
  void for_each_window(Fn fn) const {
    std::vector<int64_t> xs;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t yr = 0; yr < oh; ++yr)
        for (int64_t yc = 0; yc < ow; ++yc)
          for (int64_t ch = 0; ch < c; ++ch) {
            xs.clear();
            for (int64_t kr = 0; kr < g.h.k; ++kr) {
              const int64_t xr = yr * g.h.stride - g.h.pad_before + kr;
              if (xr < 0 || xr >= h) continue;
              for (int64_t kc = 0; kc < g.w.k; ++kc) {
                const int64_t xc = yc * g.w.stride - g.w.pad_before + kc;
                if (xc >= 0 && xc < w) xs.push_back(((b * h + xr) * w + xc) * c + ch);
              }
            }
            fn(((b * oh + yr) * ow + yc) * c + ch, xs, g.h.k * g.w.k);
          }
  }
  // The row-major position within y element yi's whole window (padding counted) of x element xi.
  int64_t window_position(int64_t yi, int64_t xi) const {
    const int64_t yr = yi / (c * ow) % oh, yc = yi / c % ow;
    const int64_t xr = xi / (c * w) % h, xc = xi / c % w;
    return (xr - (yr * g.h.stride - g.h.pad_before)) * g.w.k +
           (xc - (yc * g.w.stride - g.w.pad_before));
  }
};

template <typename T>
void max_pool(KernelContext& ctx) {
  const T* xp = ctx.inputs[0].data<T>();
  T* yp = ctx.outputs[0].data<T>();
  PoolDims(ctx.node.attrs, ctx.inputs[0].shape())
      .for_each_window([&](int64_t yi, const std::vector<int64_t>& xs, int64_t) {
        T m = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                   : std::numeric_limits<T>::lowest();
        for (int64_t xi : xs) m = std::max(m, xp[xi]);
        yp[yi] = m;
      });
}

// The first maximum of each window (in row-major window order, as ONNX picks it) and its flat
// index into x: NHWC order, or NCHW order with nchw_index (planes column-major with
// column_major).
void max_pool_with_argmax(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const float* xp = x.data<float>();
  float* yp = ctx.outputs[0].data<float>();
  int64_t* ip = ctx.outputs[1].data<int64_t>();
  const bool nchw = ctx.node.attrs.get_bool("nchw_index");
  const bool column_major = ctx.node.attrs.get_bool("column_major");
  const int64_t h = x.dim(1), w = x.dim(2), c = x.dim(3);
  PoolDims(ctx.node.attrs, x.shape())
      .for_each_window([&](int64_t yi, const std::vector<int64_t>& xs, int64_t) {
        int64_t best = xs.empty() ? 0 : xs.front();
        for (int64_t xi : xs)
          if (xp[xi] > xp[best]) best = xi;
        yp[yi] = xs.empty() ? -std::numeric_limits<float>::infinity() : xp[best];
        if (nchw) {
          const int64_t ch = best % c, pixel = (best / c) % (h * w), batch = best / (c * h * w);
          const int64_t in_plane = column_major ? pixel % w * h + pixel / w : pixel;
          best = (batch * c + ch) * h * w + in_plane;
        }
        ip[yi] = best;
      });
}

// Routes dy to the first position of each window whose x equals y, so it matches any forward
// kernel that returns an element of the window. With relu, that position's x (= y) must also
// be positive, as the folded-in Relu's gradient requires.
void max_pool_grad(KernelContext& ctx) {
  const float* xp = ctx.inputs[0].data<float>();
  const float* yp = ctx.inputs[1].data<float>();
  const float* dyp = ctx.inputs[2].data<float>();
  const bool relu = ctx.node.attrs.get_bool("relu");
  std::vector<double> dx(static_cast<size_t>(ctx.outputs[0].numel()), 0.0);
  PoolDims(ctx.node.attrs, ctx.inputs[0].shape())
      .for_each_window([&](int64_t yi, const std::vector<int64_t>& xs, int64_t) {
        if (relu && !(yp[yi] > 0.0f)) return;
        for (int64_t xi : xs)
          if (xp[xi] == yp[yi]) {
            dx[static_cast<size_t>(xi)] += dyp[yi];
            break;
          }
      });
  store(dx, ctx.outputs[0]);
}

// The first maximum of each window in row-major window order (NaN skipped, -inf for a window
// with no value) and its position in the window; kNoWindowArgmax where no value is, or with
// relu where the maximum is not positive.
void max_pool_window_argmax(KernelContext& ctx) {
  const float* xp = ctx.inputs[0].data<float>();
  float* yp = ctx.outputs[0].data<float>();
  uint8_t* ap = ctx.outputs[1].data<uint8_t>();
  const bool relu = ctx.node.attrs.get_bool("relu");
  const PoolDims d(ctx.node.attrs, ctx.inputs[0].shape());
  d.for_each_window([&](int64_t yi, const std::vector<int64_t>& xs, int64_t) {
    float best = -std::numeric_limits<float>::infinity();
    int64_t at = kNoWindowArgmax;
    for (int64_t xi : xs)
      if (xp[xi] > best || (at == kNoWindowArgmax && xp[xi] >= best)) {
        best = xp[xi];
        at = d.window_position(yi, xi);
      }
    yp[yi] = best;
    ap[yi] = static_cast<uint8_t>(relu && !(best > 0.0f) ? kNoWindowArgmax : at);
  });
}

// Each window's dy to the position its argmax names (summed where windows overlap).
void max_pool_grad_window_argmax(KernelContext& ctx) {
  const float* dyp = ctx.inputs[0].data<float>();
  const uint8_t* ap = ctx.inputs[1].data<uint8_t>();
  std::vector<double> dx(static_cast<size_t>(ctx.outputs[0].numel()), 0.0);
  const PoolDims d(ctx.node.attrs, ctx.outputs[0].shape());
  d.for_each_window([&](int64_t yi, const std::vector<int64_t>& xs, int64_t) {
    for (int64_t xi : xs)
      if (d.window_position(yi, xi) == ap[yi]) dx[static_cast<size_t>(xi)] += dyp[yi];
  });
  store(dx, ctx.outputs[0]);
}

double avg_divisor(bool include_pad, const std::vector<int64_t>& xs, int64_t window) {
  return static_cast<double>(include_pad ? window : static_cast<int64_t>(xs.size()));
}

void avg_pool(KernelContext& ctx) {
  const bool include_pad = ctx.node.attrs.get_bool("count_include_pad");
  const float* xp = ctx.inputs[0].data<float>();
  float* yp = ctx.outputs[0].data<float>();
  PoolDims(ctx.node.attrs, ctx.inputs[0].shape())
      .for_each_window([&](int64_t yi, const std::vector<int64_t>& xs, int64_t window) {
        double sum = 0.0;
        for (int64_t xi : xs) sum += xp[xi];
        yp[yi] = static_cast<float>(sum / avg_divisor(include_pad, xs, window));
      });
}

void avg_pool_grad(KernelContext& ctx) {
  const bool include_pad = ctx.node.attrs.get_bool("count_include_pad");
  const float* dyp = ctx.inputs[0].data<float>();
  std::vector<double> dx(static_cast<size_t>(ctx.outputs[0].numel()), 0.0);
  PoolDims(ctx.node.attrs, ctx.outputs[0].shape())
      .for_each_window([&](int64_t yi, const std::vector<int64_t>& xs, int64_t window) {
        const double share = dyp[yi] / avg_divisor(include_pad, xs, window);
        for (int64_t xi : xs) dx[static_cast<size_t>(xi)] += share;
      });
  store(dx, ctx.outputs[0]);
}

void global_avg_pool(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t n = x.dim(0), hw = x.dim(1) * x.dim(2), c = x.dim(3);
  const float* xp = x.data<float>();
  std::vector<double> acc(static_cast<size_t>(n * c), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t ch = 0; ch < c; ++ch)
        acc[static_cast<size_t>(b * c + ch)] += xp[(b * hw + p) * c + ch];
  for (double& v : acc) v /= static_cast<double>(std::max<int64_t>(hw, 1));
  store(acc, ctx.outputs[0]);
}

void global_avg_pool_grad(KernelContext& ctx) {
  const Tensor& dx = ctx.outputs[0];
  const int64_t n = dx.dim(0), hw = dx.dim(1) * dx.dim(2), c = dx.dim(3);
  const float* dyp = ctx.inputs[0].data<float>();
  float* dxp = dx.data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t ch = 0; ch < c; ++ch)
        dxp[(b * hw + p) * c + ch] = static_cast<float>(static_cast<double>(dyp[b * c + ch]) / hw);
}

}  // namespace

void register_reference_nn_kernels(KernelRegistry& r) {
  auto add = [&](const char* op, void (*fn)(KernelContext&)) {
    r.add(simple_kernel(op, DType::f32, "reference", fn));
  };
  add(op_names::kConv2D, conv2d);
  add(op_names::kConv2DBackpropInput, conv2d_backprop_input);
  add(op_names::kConv2DBackpropFilter, conv2d_backprop_filter);
  add(op_names::kMatMul, matmul);
  add(op_names::kBatchMatMul, batch_matmul);
  add(op_names::kBiasAdd, bias_add);
  add(op_names::kBiasAddGrad, bias_add_grad);
  add(op_names::kBiasAddRelu, bias_add_relu);
  add(op_names::kMaxPool, max_pool<float>);
  r.add(simple_kernel(op_names::kMaxPool, DType::u8, "reference", max_pool<uint8_t>));
  r.add(simple_kernel(op_names::kMaxPool, DType::i8, "reference", max_pool<int8_t>));
  add(op_names::kMaxPoolWithArgmax, max_pool_with_argmax);
  add(op_names::kMaxPoolGrad, max_pool_grad);
  add(op_names::kMaxPoolWindowArgmax, max_pool_window_argmax);
  add(op_names::kMaxPoolGradWindowArgmax, max_pool_grad_window_argmax);
  add(op_names::kAvgPool, avg_pool);
  add(op_names::kAvgPoolGrad, avg_pool_grad);
  add(op_names::kGlobalAvgPool, global_avg_pool);
  add(op_names::kGlobalAvgPoolGrad, global_avg_pool_grad);
}

}  // namespace sf
