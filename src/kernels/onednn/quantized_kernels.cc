// oneDNN int8 kernels for QuantizedConv2D / QuantizedMatMul and their *Requantized forms, and
// QuantizedMaxPool.
//
// oneDNN computes the int32 accumulator: u8 source with a run-time source zero point (padding
// contributes nothing, i.e. real zero, as in the reference), s8 weights and the s32 bias the
// reference adds (quantize_bias). What happens to it depends on the node:
// - the Requantized forms whose params are Consts (every calibrated model) let oneDNN write the
//   u8 output itself: output scales x_scale * w_scale / out_scale per channel, the output zero
//   point and the activation's clamp, in float with round-to-nearest-even instead of the
//   reference's fixed point, so an output may differ from it by one unit (at near-ties). The
//   primitive is made on the first run, when the params' values are known: a source zero point
//   of 0 (inputs that follow a ReLU) selects faster kernels without zero-point compensation, and
//   a conv's oneDNN implementations are timed there (fastest_parts_of).
//   Writing u8 rather than s32 and reading it back saves most of a 1x1 layer's time.
// - QuantizedConv2D / QuantizedMatMul, and the Requantized forms with params computed at run
//   time (which would need a new primitive on every run), get the s32 accumulators; the latter
//   requantize them with the reference's fixed-point code (kernels/int8_loops.h).
// oneDNN's int8 kernels take NHWC activations natively (format "any" resolves to NHWC), so no
// activation is ever reordered; frozen weights are reordered once.
//
// The accumulator is exact while below 2^24 in magnitude: oneDNN's jit kernels pass it through
// float on the way to an s32 destination (measured with oneDNN 2.6), so larger ones may be off
// by a few float ulps, which moves a requantized output by at most one unit and rarely at all.
// Without VNNI, oneDNN's u8 x s8 products (vpmaddubsw) may saturate pairs to int16, so on such
// CPUs these kernels decline and the reference runs.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cpu/cache_flush.h"
#include "kernels/int8_loops.h"
#include "kernels/onednn/onednn_common.h"
#include "kernels/quantized_args.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf::onednn {

namespace {

using dt = dnnl::memory::data_type;

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

// How a Requantized node's output leaves the primitive: scaled per channel to the output's
// units, clamped by the activation, shifted by the output zero point and saturated to u8.
struct OutputQuantization {
  std::vector<float> scales;
  int32_t zero_point = 0;
  QuantClamp clamp;
};

// Zero points are passed at run time. `x_zero_point`: the source has a nonzero one; `out`: the
// destination is u8 (else s32 accumulators).
dnnl::primitive_attr int8_attr(bool x_zero_point, const OutputQuantization* out) {
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (x_zero_point) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  if (out == nullptr) return attr;
  attr.set_output_scales(1 << 1, out->scales);  // dst dimension 1: channels (conv), N (matmul)
  if (out->zero_point != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
  // The clip runs before rounding and the zero point; with integer bounds that equals clamping
  // the rounded value. Saturation to u8 covers the clamp of "none".
  if (out->clamp.lo > 0 || out->clamp.hi < 255) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip,
                       static_cast<float>(out->clamp.lo - out->zero_point),
                       static_cast<float>(out->clamp.hi - out->zero_point));
    attr.set_post_ops(ops);
  }
  return attr;
}

bool any_empty(const KernelSpec& spec) {
  for (const TensorType& t : spec.inputs)
    if (num_elements(t.shape) == 0) return true;
  return num_elements(spec.node.outputs[0].shape) == 0;
}

dt destination_type(const OutputQuantization* out) { return out ? dt::u8 : dt::s32; }

// What a kernel needs of its primitive descriptor, whichever primitive it is.
struct PrimitiveParts {
  Runner runner;
  dnnl::memory::desc src, weights, bias, dst;
  dnnl::memory::desc user_weights;  // our plain HWIO / [K,N] weights
};

template <typename PrimitiveDesc, typename Primitive>
PrimitiveParts parts_of_pd(const PrimitiveDesc& pd, const dnnl::memory::desc& user_weights) {
  PrimitiveParts p{Runner(), pd.src_desc(), pd.weights_desc(), pd.bias_desc(), pd.dst_desc(),
                   user_weights};
  p.runner.init<PrimitiveDesc, Primitive>(pd);
  return p;
}

// Seconds the fastest of a few runs of the primitive takes on zeroed scratch arguments, each
// run with everything it touches flushed from the caches, as in a model, where the other nodes
// have run since (as the fp32 convs are measured, fused_conv_kernels.cc).
double time_parts(PrimitiveParts& p) {
  std::unordered_map<int, dnnl::memory> args;
  for (const auto& [arg, desc] :
       {std::pair{DNNL_ARG_SRC, p.src}, std::pair{DNNL_ARG_WEIGHTS, p.weights},
        std::pair{DNNL_ARG_BIAS, p.bias}, std::pair{DNNL_ARG_DST, p.dst}}) {
    dnnl::memory m(desc, engine());
    std::fill_n(static_cast<char*>(m.get_data_handle()), desc.get_size(), 0);
    args.emplace(arg, m);
  }
  for (int arg : {DNNL_ARG_SRC, DNNL_ARG_DST}) {
    dnnl::memory zero_point({{1}, dt::s32, dnnl::memory::format_tag::a}, engine());
    *static_cast<int32_t*>(zero_point.get_data_handle()) = 0;
    args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | arg, zero_point);
  }
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 5; ++run) {
    for (const auto& [arg, m] : args)
      flush_cache_lines(m.get_data_handle(), m.get_desc().get_size());
    p.runner.flush_scratchpad();
    const auto start = std::chrono::steady_clock::now();
    p.runner.run(args);
    stream().wait();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (run > 0) best = std::min(best, took.count());  // the first run warms up
  }
  return best;
}

// oneDNN 2.6 lists brgconv first for int8 convs without a source zero point, yet on an AVX-512
// VNNI CPU without AMX its jit_int8 kernels ran them faster (alone, 2 threads, batch 64):
// squeezenet-mnist's single-channel 3x3 first layer 0.29 -> 0.17 ms, a 14x14 16->32 3x3 0.144
// -> 0.093, Deep-MNIST's 5x5 32->64 0.81 -> 0.75. With AMX, brgconv is the one that uses it. So
// a conv times oneDNN's implementations for the ISA of its first choice once per problem
// (`key`, see measured_choice), on its first run, and keeps the fastest.
// The iterator behind next_impl() keeps pointers to the operation's descriptor and attributes,
// so both are the caller's, alive until this returns.
template <typename PrimitiveDesc, typename Primitive, typename OpDesc>
std::optional<PrimitiveParts> fastest_parts_of(const OpDesc& desc,
                                               const dnnl::primitive_attr& attr,
                                               const dnnl::memory::desc& user_weights,
                                               const std::string& key) {
  try {
    std::optional<PrimitiveParts> fastest;  // made when this call measures
    const std::optional<size_t> pick = measured_choice(key, [&]() -> std::optional<size_t> {
      PrimitiveDesc pd(desc, attr, engine());
      // Only oneDNN's first choice and the others for its ISA ("jit_int8:avx512_core_vnni"
      // beside "brgconv:avx512_core_vnni"): its avx2, sse41 and gemm kernels are slower by design.
      const std::string first = pd.impl_info_str();
      const std::string isa = first.substr(first.find(':') + 1);
      double best_seconds = std::numeric_limits<double>::infinity();
      std::optional<size_t> best_index;
      size_t index = 0;
      do {
        const std::string impl = pd.impl_info_str();
        if (is_reference_impl(impl.c_str()) || impl.substr(impl.find(':') + 1) != isa) continue;
        PrimitiveParts p = parts_of_pd<PrimitiveDesc, Primitive>(pd, user_weights);
        if (const double seconds = time_parts(p); seconds < best_seconds) {
          best_seconds = seconds;
          best_index = index;
          fastest = std::move(p);
        }
      } while (++index, pd.next_impl());
      return best_index;
    });
    if (!pick || fastest) return fastest;
    PrimitiveDesc pd(desc, attr, engine());
    for (size_t i = 0; i < *pick; ++i)
      if (!pd.next_impl()) return std::nullopt;
    return parts_of_pd<PrimitiveDesc, Primitive>(pd, user_weights);
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

template <typename PrimitiveDesc, typename Primitive>
std::optional<PrimitiveParts> parts_of(const std::function<PrimitiveDesc()>& make_pd,
                                       const dnnl::memory::desc& user_weights) {
  try {
    const PrimitiveDesc pd = make_pd();
    if (is_reference_impl(pd.impl_info_str())) return std::nullopt;
    return parts_of_pd<PrimitiveDesc, Primitive>(pd, user_weights);
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

// Makes the node's primitive for a source with or without a zero point and a u8 (`out`) or s32
// destination; nullopt when oneDNN has no fast implementation for it.
// With `fastest`, the primitive to run (a conv times its implementations); without, one to learn
// whether oneDNN has any.
using MakeParts = std::function<std::optional<PrimitiveParts>(
    const KernelSpec&, bool x_zero_point, const OutputQuantization* out, bool fastest)>;

std::optional<PrimitiveParts> conv_parts(const KernelSpec& spec, bool x_zero_point,
                                         const OutputQuantization* out, bool fastest) {
  const Shape& xs = spec.inputs[0].shape;
  const Shape& ws = spec.inputs[2].shape;
  const Shape& ys = spec.node.outputs[0].shape;
  const int64_t groups = spec.node.attrs.get_int("groups");
  const Window2D g = conv_window(spec.node.attrs, xs, ws);
  const dnnl::memory::desc user_w = hwio_desc_of(ws, groups, dt::s8);
  using Pd = dnnl::convolution_forward::primitive_desc;
  const dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
      nhwc_desc_of(xs, dt::u8), dnnl::memory::desc(user_w.dims(), dt::s8, tag::any),
      dnnl::memory::desc({ys[3]}, dt::s32, tag::a), nhwc_desc_of(ys, destination_type(out)),
      {g.h.stride, g.w.stride}, {g.h.dilation - 1, g.w.dilation - 1},
      {g.h.pad_before, g.w.pad_before}, {g.h.pad_after, g.w.pad_after});
  const dnnl::primitive_attr attr = int8_attr(x_zero_point, out);
  if (!fastest)
    return parts_of<Pd, dnnl::convolution_forward>([&] { return Pd(desc, attr, engine()); },
                                                   user_w);
  // What makes two nodes the same problem.
  std::string key = spec.node.op + "/" + std::to_string(omp_get_max_threads()) +
                    (x_zero_point ? "/x_zero_point" : "") +
                    (out ? fmt::format("/u8/{}/{}/{}", out->zero_point != 0, out->clamp.lo,
                                       out->clamp.hi)
                         : "/s32");
  for (const Shape* shape : {&xs, &ws, &ys}) key += shape_str(*shape);
  key += fmt::format("/{}/{},{},{},{}/{},{},{},{}", groups, g.h.stride, g.w.stride, g.h.dilation,
                     g.w.dilation, g.h.pad_before, g.w.pad_before, g.h.pad_after, g.w.pad_after);
  return fastest_parts_of<Pd, dnnl::convolution_forward>(desc, attr, user_w, key);
}

std::optional<PrimitiveParts> matmul_parts(const KernelSpec& spec, bool x_zero_point,
                                           const OutputQuantization* out, bool /*fastest*/) {
  const Shape& a = spec.inputs[0].shape;
  const Shape& b = spec.inputs[2].shape;
  const Shape& y = spec.node.outputs[0].shape;
  // Frozen weights may be reordered once into oneDNN's preferred layout.
  const dnnl::memory::desc b_desc = spec.input_is_constant(2)
                                        ? dnnl::memory::desc({b[0], b[1]}, dt::s8, tag::any)
                                        : plain_desc_of(b, dt::s8);
  using Pd = dnnl::matmul::primitive_desc;
  return parts_of<Pd, dnnl::matmul>(
      [&] {
        return Pd(dnnl::matmul::desc(plain_desc_of(a, dt::u8), b_desc,
                                     dnnl::memory::desc({1, y[1]}, dt::s32, tag::ab),
                                     plain_desc_of(y, destination_type(out))),
                  int8_attr(x_zero_point, out), engine());
      },
      plain_desc_of(b, dt::s8));
}

// One int8 primitive with its arguments, for inputs (x, x_params, w, w_scales, bias[, ...]).
class Int8Primitive {
 public:
  Int8Primitive(const KernelSpec& spec, PrimitiveParts parts)
      : constant_w_(spec.input_is_constant(2)),
        w_(parts.user_weights, parts.weights, StagedArg::Direction::In),
        x_(parts.src, engine(), DNNL_MEMORY_NONE),
        bias_(parts.bias, engine()),
        y_(parts.dst, engine(), DNNL_MEMORY_NONE),
        x_zero_point_(dnnl::memory::desc({1}, dt::s32, tag::a), engine()),
        y_zero_point_(dnnl::memory::desc({1}, dt::s32, tag::a), engine()),
        runner_(std::move(parts.runner)) {}

  void set_bias(const std::vector<int32_t>& bias) {
    std::copy(bias.begin(), bias.end(), static_cast<int32_t*>(bias_.get_data_handle()));
  }

  // Zero points the primitive was made without are ignored.
  void run(const KernelContext& ctx, int32_t x_zero_point, int32_t y_zero_point, void* y) {
    *static_cast<int32_t*>(x_zero_point_.get_data_handle()) = x_zero_point;
    *static_cast<int32_t*>(y_zero_point_.get_data_handle()) = y_zero_point;
    x_.set_data_handle(ctx.inputs[0].raw());
    const dnnl::memory& w =
        constant_w_ ? w_.bind_constant(ctx.inputs[2].raw()) : w_.bind(ctx.inputs[2].raw());
    y_.set_data_handle(y);
    runner_.run({{DNNL_ARG_SRC, x_},
                 {DNNL_ARG_WEIGHTS, w},
                 {DNNL_ARG_BIAS, bias_},
                 {DNNL_ARG_DST, y_},
                 {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, x_zero_point_},
                 {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, y_zero_point_}});
    stream().wait();
  }

  const std::string& impl() const { return runner_.impl(); }

 private:
  bool constant_w_;  // frozen weights: reordered once
  StagedArg w_;
  dnnl::memory x_, bias_, y_, x_zero_point_, y_zero_point_;
  Runner runner_;
};

// QuantizedConv2D / QuantizedMatMul, and the Requantized forms with run-time params: oneDNN
// writes s32 accumulators, which the latter requantize with the reference's fixed-point code.
class AccumulatorKernel : public Kernel {
 public:
  AccumulatorKernel(const KernelSpec& spec, PrimitiveParts parts, bool requantized)
      : requantized_(requantized),
        channels_(spec.node.outputs[0].shape.back()),
        primitive_(spec, std::move(parts)) {
    if (requantized_)
      acc_buffer_.resize(static_cast<size_t>(num_elements(spec.node.outputs[0].shape)));
  }

  void compute(KernelContext& ctx) override {
    const QuantParams xq = params_input(ctx, 1);
    const std::vector<float> scales = scales_input(ctx, 3, channels_);
    primitive_.set_bias(quantized_bias(ctx.inputs[4].data<float>(), xq.scale, scales));
    int32_t* acc = requantized_ ? acc_buffer_.data() : ctx.outputs[0].data<int32_t>();
    primitive_.run(ctx, xq.zero_point, 0, acc);
    if (!requantized_) return;
    const QuantParams out = params_input(ctx, 5);
    requantize_rows(acc, ctx.outputs[0].numel() / channels_, channels_,
                    requantize_multipliers(xq.scale, scales, out.scale), out.zero_point,
                    activation_clamp(activation_of(ctx.node), out), ctx.outputs[0].data<uint8_t>());
  }
  std::string running_impl() const override { return primitive_.impl(); }

 private:
  bool requantized_;
  int64_t channels_;
  Int8Primitive primitive_;
  std::vector<int32_t> acc_buffer_;  // the accumulators of the requantized forms
};

// The Requantized forms whose x_params, w_scales and out_params are Consts: the primitive
// writes the u8 output; it is made on the first run, from the params' values.
class RequantizedKernel : public Kernel {
 public:
  RequantizedKernel(const KernelSpec& spec, MakeParts make)
      : inputs_(spec.inputs),
        constant_inputs_(spec.constant_inputs),
        constant_bias_(spec.input_is_constant(4)),
        make_(std::move(make)) {}

  void compute(KernelContext& ctx) override {
    const QuantParams xq = params_input(ctx, 1);
    const QuantParams out = params_input(ctx, 5);
    if (!primitive_) {
      const int64_t channels = ctx.outputs[0].dim(-1);
      scales_ = scales_input(ctx, 3, channels);
      OutputQuantization oq{std::vector<float>(static_cast<size_t>(channels)), out.zero_point,
                            activation_clamp(activation_of(ctx.node), out)};
      for (size_t c = 0; c < scales_.size(); ++c)
        oq.scales[c] = static_cast<float>(static_cast<double>(xq.scale) * scales_[c] / out.scale);
      const KernelSpec spec{ctx.node, inputs_, constant_inputs_};
      std::optional<PrimitiveParts> parts = make_(spec, xq.zero_point != 0, &oq, true);
      // The planner only learned that the form with a source zero point exists.
      if (!parts) parts = make_(spec, true, &oq, true);
      SF_CHECK(parts.has_value(), "node '{}': no oneDNN int8 primitive with u8 output",
               ctx.node.name);
      primitive_.emplace(spec, std::move(*parts));
    }
    if (!bias_set_ || !constant_bias_) {
      primitive_->set_bias(quantized_bias(ctx.inputs[4].data<float>(), xq.scale, scales_));
      bias_set_ = true;
    }
    primitive_->run(ctx, xq.zero_point, out.zero_point, ctx.outputs[0].raw());
  }
  std::string running_impl() const override { return primitive_ ? primitive_->impl() : ""; }

 private:
  std::vector<TensorType> inputs_;  // the KernelSpec's, to make the primitive on the first run
  std::vector<bool> constant_inputs_;
  bool constant_bias_;
  MakeParts make_;
  std::vector<float> scales_;  // w_scales per channel
  std::optional<Int8Primitive> primitive_;
  bool bias_set_ = false;
};

bool constant_params(const KernelSpec& spec) {
  return spec.input_is_constant(1) && spec.input_is_constant(3) && spec.input_is_constant(5);
}

// A u8 destination with every feature a real one may use (output zero point, clip), to learn
// at plan time whether oneDNN can write one.
OutputQuantization probe_output(const KernelSpec& spec) {
  return {std::vector<float>(static_cast<size_t>(spec.node.outputs[0].shape.back()), 1.0f), 1,
          QuantClamp{1, 200}};
}

KernelDef int8_kernel(const char* op, bool requantized, MakeParts make) {
  KernelDef def;
  def.op = op;
  def.dtype = DType::u8;
  def.impl = "onednn";
  def.priority = kPriority;
  def.accepts = [make](const KernelSpec& spec) {
    return exact_int8_products() && !any_empty(spec) &&
           make(spec, true, nullptr, false).has_value();
  };
  def.create = [make, requantized](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    if (requantized && constant_params(spec)) {
      const OutputQuantization probe = probe_output(spec);
      if (make(spec, true, &probe, false).has_value())
        return std::make_unique<RequantizedKernel>(spec, make);
    }
    std::optional<PrimitiveParts> parts = make(spec, true, nullptr, true);
    SF_CHECK(parts.has_value(), "node '{}': no oneDNN int8 primitive", spec.node.name);
    return std::make_unique<AccumulatorKernel>(spec, std::move(*parts), requantized);
  };
  return def;
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
      : x_(pd.src_desc(), engine(), DNNL_MEMORY_NONE),
        y_(pd.dst_desc(), engine(), DNNL_MEMORY_NONE) {
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
  def.op = op_names::kQuantizedMaxPool;
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
  r.add(int8_kernel(op_names::kQuantizedConv2D, false, conv_parts));
  r.add(int8_kernel(op_names::kQuantizedConv2DRequantized, true, conv_parts));
  r.add(int8_kernel(op_names::kQuantizedMatMul, false, matmul_parts));
  r.add(int8_kernel(op_names::kQuantizedMatMulRequantized, true, matmul_parts));
}

}  // namespace sf::onednn
