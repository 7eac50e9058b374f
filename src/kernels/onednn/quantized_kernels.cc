// oneDNN int8 kernels for QuantizedConv2D / QuantizedMatMul and their *Requantized forms, and
// QuantizedMaxPool.
//
// oneDNN computes the int32 accumulator: u8 source with a run-time source zero point (padding
// contributes nothing, i.e. real zero, as in the reference), s8 weights and the s32 bias the
// reference adds (quantize_bias). The requantization to u8 then runs here with the reference's
// fixed-point code (kernels/int8_loops.h) rather than oneDNN's float output scales.
//
// The accumulator is exact while below 2^24 in magnitude: oneDNN's jit kernels pass it through
// float on the way to an s32 destination (measured with oneDNN 2.6), so larger ones may be off
// by a few float ulps, which moves a requantized output by at most one unit and rarely at all.
// Without VNNI, oneDNN's u8 x s8 products (vpmaddubsw) may saturate pairs to int16, so on such
// CPUs these kernels decline and the reference runs.
#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "kernels/onednn/onednn_common.h"
#include "kernels/int8_loops.h"
#include "kernels/quantized_args.h"
#include "ops/conv_geometry.h"

namespace sf::onednn {

namespace {

using dt = dnnl::memory::data_type;

bool has_vnni() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto has = [isa](dnnl_cpu_isa_t want) {
    return (isa & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
  };
  return has(dnnl_cpu_isa_avx512_core_vnni) || has(dnnl_cpu_isa_avx2_vnni);
}

// A row-major tensor of the given shape and element type.
dnnl::memory::desc plain_desc_of(const Shape& shape, dt type) {
  dnnl::memory::dims strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    strides[static_cast<size_t>(i)] =
        strides[static_cast<size_t>(i) + 1] * shape[static_cast<size_t>(i) + 1];
  return dnnl::memory::desc(dims_of(shape), type, strides);
}

dnnl::memory::desc nhwc_desc_of(const Shape& s, dt type) {
  return dnnl::memory::desc({s[0], s[3], s[1], s[2]}, type, tag::nhwc);
}

// HWIO [kh, kw, in/groups, out] as oneDNN's (G)OIHW, as hwio_desc does for f32.
dnnl::memory::desc hwio_desc_of(const Shape& s, int64_t groups, dt type) {
  const int64_t kh = s[0], kw = s[1], ig = s[2], o = s[3];
  if (groups == 1) return dnnl::memory::desc({o, ig, kh, kw}, type, {1, o, kw * ig * o, ig * o});
  const int64_t og = o / groups;
  return dnnl::memory::desc({groups, og, ig, kh, kw}, type, {og, 1, o, kw * ig * o, ig * o});
}

// The source zero point is passed at run time, so params may change between calls.
dnnl::primitive_attr int8_attr() {
  dnnl::primitive_attr attr = user_scratchpad_attr();
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  return attr;
}

bool any_empty(const KernelSpec& spec) {
  for (const TensorType& t : spec.inputs)
    if (num_elements(t.shape) == 0) return true;
  return num_elements(spec.node.outputs[0].shape) == 0;
}

std::optional<dnnl::convolution_forward::primitive_desc> conv_pd(const KernelSpec& spec) {
  const Shape& xs = spec.inputs[0].shape;
  const Shape& ws = spec.inputs[2].shape;
  const Shape& ys = spec.node.outputs[0].shape;
  const int64_t groups = spec.node.attrs.get_int("groups");
  const Window2D g = conv_window(spec.node.attrs, xs, ws);
  const dnnl::memory::desc w_any(hwio_desc_of(ws, groups, dt::s8).dims(), dt::s8, tag::any);
  try {
    dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
            nhwc_desc_of(xs, dt::u8), w_any, dnnl::memory::desc({ys[3]}, dt::s32, tag::a),
            nhwc_desc_of(ys, dt::s32), {g.h.stride, g.w.stride},
            {g.h.dilation - 1, g.w.dilation - 1}, {g.h.pad_before, g.w.pad_before},
            {g.h.pad_after, g.w.pad_after}),
        int8_attr(), engine());
    if (is_reference_impl(pd.impl_info_str())) return std::nullopt;
    return pd;
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

std::optional<dnnl::matmul::primitive_desc> matmul_pd(const KernelSpec& spec) {
  const Shape& a = spec.inputs[0].shape;
  const Shape& b = spec.inputs[2].shape;
  const Shape& y = spec.node.outputs[0].shape;
  // Frozen weights may be reordered once into oneDNN's preferred layout.
  const dnnl::memory::desc b_desc = spec.input_is_constant(2)
                                        ? dnnl::memory::desc({b[0], b[1]}, dt::s8, tag::any)
                                        : plain_desc_of(b, dt::s8);
  try {
    dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(plain_desc_of(a, dt::u8), b_desc,
                           dnnl::memory::desc({1, y[1]}, dt::s32, tag::ab),
                           plain_desc_of(y, dt::s32)),
        int8_attr(), engine());
    if (is_reference_impl(pd.impl_info_str())) return std::nullopt;
    return pd;
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

// What a kernel needs of its primitive descriptor, whichever primitive it is.
struct PrimitiveParts {
  Runner runner;
  dnnl::memory::desc src, weights, bias, dst;
  dnnl::memory::desc user_weights;  // our plain HWIO / [K,N] weights
};

template <typename PrimitiveDesc, typename Primitive>
PrimitiveParts parts_of(const PrimitiveDesc& pd, const dnnl::memory::desc& user_weights) {
  PrimitiveParts p{Runner(), pd.src_desc(), pd.weights_desc(), pd.bias_desc(), pd.dst_desc(),
                   user_weights};
  p.runner.init<PrimitiveDesc, Primitive>(pd);
  return p;
}

// The inputs are (x, x_params, w, w_scales, bias[, out_params]) for both conv and matmul.
class QuantizedKernel : public Kernel {
 public:
  QuantizedKernel(const KernelSpec& spec, PrimitiveParts parts, bool requantized)
      : constant_w_(spec.input_is_constant(2)),
        requantized_(requantized),
        channels_(spec.node.outputs[0].shape.back()),
        w_(parts.user_weights, parts.weights, StagedArg::Direction::In),
        x_(parts.src, engine(), DNNL_MEMORY_NONE),
        bias_(parts.bias, engine()),
        acc_(parts.dst, engine(), DNNL_MEMORY_NONE),
        zero_point_(dnnl::memory::desc({1}, dt::s32, tag::a), engine()),
        runner_(std::move(parts.runner)) {
    if (requantized_)
      acc_buffer_.resize(static_cast<size_t>(num_elements(spec.node.outputs[0].shape)));
  }

  void compute(KernelContext& ctx) override {
    const QuantParams xq = params_input(ctx, 1);
    const std::vector<float> scales = scales_input(ctx, 3, channels_);
    const std::vector<int32_t> bias = quantized_bias(ctx.inputs[4].data<float>(), xq.scale, scales);
    std::copy(bias.begin(), bias.end(), static_cast<int32_t*>(bias_.get_data_handle()));
    *static_cast<int32_t*>(zero_point_.get_data_handle()) = xq.zero_point;

    x_.set_data_handle(ctx.inputs[0].raw());
    const dnnl::memory& w = constant_w_ ? w_.bind_constant(ctx.inputs[2].raw())
                                        : w_.bind(ctx.inputs[2].raw());
    int32_t* acc = requantized_ ? acc_buffer_.data() : ctx.outputs[0].data<int32_t>();
    acc_.set_data_handle(acc);
    runner_.run({{DNNL_ARG_SRC, x_},
                 {DNNL_ARG_WEIGHTS, w},
                 {DNNL_ARG_BIAS, bias_},
                 {DNNL_ARG_DST, acc_},
                 {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zero_point_}});
    stream().wait();
    if (requantized_) requantize(ctx, xq, scales, acc);
  }

 private:
  void requantize(const KernelContext& ctx, QuantParams xq, const std::vector<float>& scales,
                  const int32_t* acc) const {
    const QuantParams out = params_input(ctx, 5);
    const std::vector<QuantizedMultiplier> m = requantize_multipliers(xq.scale, scales, out.scale);
    const QuantClamp clamp = activation_clamp(ctx.node.attrs.get_string("activation"), out);
    requantize_rows(acc, ctx.outputs[0].numel() / channels_, channels_, m, out.zero_point, clamp,
                    ctx.outputs[0].data<uint8_t>());
  }

  bool constant_w_;  // frozen weights: reordered once
  bool requantized_;
  int64_t channels_;
  StagedArg w_;
  dnnl::memory x_, bias_, acc_, zero_point_;
  std::vector<int32_t> acc_buffer_;  // the accumulators of the requantized forms
  Runner runner_;
};

KernelDef int8_kernel(const char* op, bool requantized,
                      std::function<std::optional<PrimitiveParts>(const KernelSpec&)> make) {
  KernelDef def;
  def.op = op;
  def.dtype = DType::u8;
  def.impl = "onednn";
  def.priority = kPriority;
  def.accepts = [make](const KernelSpec& spec) {
    return has_vnni() && !any_empty(spec) && make(spec).has_value();
  };
  def.create = [make, requantized](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    std::optional<PrimitiveParts> parts = make(spec);
    SF_CHECK(parts.has_value(), "node '{}': no oneDNN int8 primitive", spec.node.name);
    return std::make_unique<QuantizedKernel>(spec, std::move(*parts), requantized);
  };
  return def;
}

std::optional<PrimitiveParts> conv_parts(const KernelSpec& spec) {
  std::optional<dnnl::convolution_forward::primitive_desc> pd = conv_pd(spec);
  if (!pd) return std::nullopt;
  return parts_of<dnnl::convolution_forward::primitive_desc, dnnl::convolution_forward>(
      *pd, hwio_desc_of(spec.inputs[2].shape, spec.node.attrs.get_int("groups"), dt::s8));
}

std::optional<PrimitiveParts> matmul_parts(const KernelSpec& spec) {
  std::optional<dnnl::matmul::primitive_desc> pd = matmul_pd(spec);
  if (!pd) return std::nullopt;
  return parts_of<dnnl::matmul::primitive_desc, dnnl::matmul>(
      *pd, plain_desc_of(spec.inputs[2].shape, dt::s8));
}

// QuantizedMaxPool: a max of codes is the code of the max (dequantization is monotonic), so
// oneDNN's u8 max pooling is exact; padding never wins, as in the reference.
std::optional<dnnl::pooling_forward::primitive_desc> max_pool_pd(const KernelSpec& spec) {
  const Shape& xs = spec.inputs[0].shape;
  const Shape& ys = spec.node.outputs[0].shape;
  const Window2D g = pool_window(spec.node.attrs, xs);
  try {
    dnnl::pooling_forward::primitive_desc pd(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference,
                                    dnnl::algorithm::pooling_max, nhwc_desc_of(xs, dt::u8),
                                    nhwc_desc_of(ys, dt::u8), {g.h.stride, g.w.stride},
                                    {g.h.k, g.w.k}, {g.h.pad_before, g.w.pad_before},
                                    {g.h.pad_after, g.w.pad_after}),
        user_scratchpad_attr(), engine());
    if (is_reference_impl(pd.impl_info_str())) return std::nullopt;
    return pd;
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

class QuantizedMaxPoolKernel : public Kernel {
 public:
  explicit QuantizedMaxPoolKernel(const dnnl::pooling_forward::primitive_desc& pd)
      : x_(pd.src_desc(), engine(), DNNL_MEMORY_NONE), y_(pd.dst_desc(), engine(), DNNL_MEMORY_NONE) {
    runner_.init<dnnl::pooling_forward::primitive_desc, dnnl::pooling_forward>(pd);
  }

  void compute(KernelContext& ctx) override {
    x_.set_data_handle(ctx.inputs[0].raw());
    y_.set_data_handle(ctx.outputs[0].raw());
    runner_.run({{DNNL_ARG_SRC, x_}, {DNNL_ARG_DST, y_}});
    stream().wait();
  }

 private:
  dnnl::memory x_, y_;
  Runner runner_;
};

KernelDef max_pool_kernel() {
  KernelDef def;
  def.op = "QuantizedMaxPool";
  def.dtype = DType::u8;
  def.impl = "onednn";
  def.priority = kPriority;
  def.accepts = [](const KernelSpec& spec) {
    return !any_empty(spec) && max_pool_pd(spec).has_value();
  };
  def.create = [](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    std::optional<dnnl::pooling_forward::primitive_desc> pd = max_pool_pd(spec);
    SF_CHECK(pd.has_value(), "node '{}': no oneDNN u8 max pooling", spec.node.name);
    return std::make_unique<QuantizedMaxPoolKernel>(*pd);
  };
  return def;
}

}  // namespace

void register_quantized_kernels(KernelRegistry& r) {
  r.add(max_pool_kernel());
  r.add(int8_kernel("QuantizedConv2D", false, conv_parts));
  r.add(int8_kernel("QuantizedConv2DRequantized", true, conv_parts));
  r.add(int8_kernel("QuantizedMatMul", false, matmul_parts));
  r.add(int8_kernel("QuantizedMatMulRequantized", true, matmul_parts));
}

}  // namespace sf::onednn
