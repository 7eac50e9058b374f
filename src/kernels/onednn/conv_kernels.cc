// oneDNN Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter.
//
// Our tensors are NHWC / HWIO. The primitives read and write the activations as they lie
// (oneDNN's brgconv forward and its jit backward kernels take NHWC) and pick their own blocked
// layout for the filter, which is reordered into a kernel-owned buffer on each call (weights
// change every training step). Blocked activations (oneDNN's nChw16c, format_tag::any) are the
// fallback where NHWC has only oneDNN's reference loops: on an AMD EPYC with AVX-512 they cost
// more in reorders to and from our NHWC tensors than they gain, most of all for 1x1 and
// depthwise convs and channel counts off a multiple of 16 (conv time per training step,
// blocked -> NHWC, medians of 3 runs: MobileNet-MNIST 23.9 -> 12.7 ms in fp32, 16.5 -> 13.4 in
// bf16; ResNet-MNIST 5.1 -> 3.4 and 3.8 -> 2.7; Deep-MNIST within noise). Where a primitive
// still stages an activation (bf16 products round it), two directions that read it alike (x
// for the forward pass and the filter gradient, dy for both gradients) share one staging a run.
//
// Under KernelSpec::bf16 (mixed-precision training) each direction reads its two inputs as bf16
// (rounded by the staging reorders) and writes fp32, accumulating in fp32: the forward output,
// the input gradient and the filter gradient stay fp32, so fp32 master weights take them as
// they are. Where oneDNN has no bf16 kernel for a node, it runs in fp32.
//
// The training passes fold a conv's bias and ReLU into it (FusedConv2D with a variable filter):
// the forward kernel here runs those as the primitive's bias and post-op, with the layouts the
// plain forward takes, so training stays deterministic (the inference FusedConv2D kernel picks
// its layout by timing). Bias and ReLU apply to the fp32 accumulator as the separate kernels
// did, so the outputs are the same.
#include <vector>

#include "kernels/onednn/onednn_common.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf::onednn {

namespace {

enum class ConvDir { Forward, BackpropInput, BackpropFilter };

// Which layouts the primitive may choose for activations.
enum class Layout { Any, Nhwc };

// The shapes of one convolution, whichever direction the node computes.
struct ConvShapes {
  Shape x, w, y;
  int64_t groups;
  Window2D g;
};

// A FusedConv2D's bias (input 2) and activation, applied by the forward primitive.
bool fused(const KernelSpec& spec) { return spec.node.op == op_names::kFusedConv2D; }

ConvShapes conv_shapes(const KernelSpec& spec, ConvDir dir) {
  ConvShapes s;
  const Shape& out = spec.node.outputs[0].shape;
  switch (dir) {
    case ConvDir::Forward:
      s = {spec.inputs[0].shape, spec.inputs[1].shape, out, 1, {}};
      break;
    case ConvDir::BackpropInput:
      s = {out, spec.inputs[1].shape, spec.inputs[0].shape, 1, {}};
      break;
    case ConvDir::BackpropFilter:
      s = {spec.inputs[0].shape, out, spec.inputs[1].shape, 1, {}};
      break;
  }
  s.groups = spec.node.attrs.get_int("groups");
  s.g = conv_window(spec.node.attrs, s.x, s.w);
  return s;
}

// Primitive descriptors for one direction; `fwd` is also the hint the backward ones need.
struct ConvPds {
  ConvShapes s;
  dnnl::convolution_forward::primitive_desc fwd;
  dnnl::convolution_backward_data::primitive_desc bwd_data;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights;

  const char* impl(ConvDir dir) const {
    switch (dir) {
      case ConvDir::Forward:
        return fwd.impl_info_str();
      case ConvDir::BackpropInput:
        return bwd_data.impl_info_str();
      case ConvDir::BackpropFilter:
        return bwd_weights.impl_info_str();
    }
    return "";
  }
};

// The products' inputs are of type `product`; the node's output (the forward output or one of
// the gradients) is fp32 whatever `product` is.
ConvPds make_pds(const KernelSpec& spec, ConvDir dir, Layout layout,
                 dnnl::memory::data_type product) {
  ConvPds p;
  p.s = conv_shapes(spec, dir);
  const Window2D& g = p.s.g;
  const auto f32 = dnnl::memory::data_type::f32;
  auto act = [&](const Shape& nhwc, dnnl::memory::data_type type) {
    return layout == Layout::Nhwc
               ? with_data_type(nhwc_desc(nhwc), type)
               : dnnl::memory::desc({nhwc[0], nhwc[3], nhwc[1], nhwc[2]}, type, tag::any);
  };
  auto filter = [&](dnnl::memory::data_type type) {
    return dnnl::memory::desc(hwio_desc(p.s.w, p.s.groups).dims(), type, tag::any);
  };
  // The forward pass (or the backward passes' hint) reads x and w in `product`.
  const dnnl::memory::desc x = act(p.s.x, product), w = filter(product);
  const dnnl::memory::desc y = act(p.s.y, dir == ConvDir::Forward ? f32 : product);
  const dnnl::memory::dims strides{g.h.stride, g.w.stride};
  const dnnl::memory::dims dilates{g.h.dilation - 1, g.w.dilation - 1};
  const dnnl::memory::dims pad_l{g.h.pad_before, g.w.pad_before};
  const dnnl::memory::dims pad_r{g.h.pad_after, g.w.pad_after};
  const auto algo = dnnl::algorithm::convolution_direct;
  dnnl::primitive_attr attr = user_scratchpad_attr();
  // A FusedConv2D's forward adds its bias and applies its activation; an empty bias desc is none.
  dnnl::primitive_attr fwd_attr = user_scratchpad_attr();
  dnnl::memory::desc bias;
  if (dir == ConvDir::Forward && fused(spec)) {
    fwd_attr.set_post_ops(activation_post_ops(activation_of(spec.node)));
    bias = dnnl::memory::desc({p.s.y[3]}, f32, tag::a);
  }
  p.fwd = dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x, w, bias, y,
                                      strides, dilates, pad_l, pad_r),
      fwd_attr, engine());
  if (dir == ConvDir::BackpropInput)
    p.bwd_data = dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(algo, act(p.s.x, f32), w, y, strides, dilates,
                                              pad_l, pad_r),
        attr, engine(), p.fwd);
  if (dir == ConvDir::BackpropFilter)
    p.bwd_weights = dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(algo, x, filter(f32), y, strides, dilates,
                                                 pad_l, pad_r),
        attr, engine(), p.fwd);
  return p;
}

// The descriptors to run: plain NHWC first, blocked layouts when only oneDNN's reference loops
// handle NHWC; bf16 products first under spec.bf16. nullopt when oneDNN has nothing but those
// loops. A fixed order, not a timing, so that training is deterministic.
std::optional<ConvPds> best_pds(const KernelSpec& spec, ConvDir dir) {
  std::vector<dnnl::memory::data_type> products = {dnnl::memory::data_type::f32};
  if (spec.bf16) products.insert(products.begin(), dnnl::memory::data_type::bf16);
  for (dnnl::memory::data_type product : products)
    for (Layout layout : {Layout::Nhwc, Layout::Any}) {
      try {
        ConvPds p = make_pds(spec, dir, layout, product);
        if (!is_reference_impl(p.impl(dir))) return p;
      } catch (const dnnl::error&) {
        // This layout has no implementation for the shape; try the next.
      }
    }
  return std::nullopt;
}

bool accepts(const KernelSpec& spec, ConvDir dir) {
  for (const TensorType& t : spec.inputs)
    if (num_elements(t.shape) == 0) return false;
  if (num_elements(spec.node.outputs[0].shape) == 0) return false;
  return best_pds(spec, dir).has_value();
}

using Dir = StagedArg::Direction;

class ConvKernel : public Kernel {
 public:
  ConvKernel(const KernelSpec& spec, ConvDir dir)
      : dir_(dir), constant_b_(dir != ConvDir::BackpropFilter && spec.input_is_constant(1)) {
    std::optional<ConvPds> best = best_pds(spec, dir);
    SF_CHECK(best.has_value(), "node '{}': no oneDNN convolution", spec.node.name);
    const ConvPds& p = *best;
    bf16_ = p.fwd.weights_desc().data_type() == dnnl::memory::data_type::bf16;
    const dnnl::memory::desc x = nhwc_desc(p.s.x), y = nhwc_desc(p.s.y);
    const dnnl::memory::desc w = hwio_desc(p.s.w, p.s.groups);
    switch (dir) {
      case ConvDir::Forward:
        a_.emplace(x, p.fwd.src_desc(), Dir::In);
        b_.emplace(w, p.fwd.weights_desc(), Dir::In);
        out_.emplace(y, p.fwd.dst_desc(), Dir::Out);
        if (fused(spec)) bias_ = dnnl::memory(p.fwd.bias_desc(), engine(), DNNL_MEMORY_NONE);
        runner_.init<decltype(p.fwd), dnnl::convolution_forward>(p.fwd);
        break;
      case ConvDir::BackpropInput:
        a_.emplace(y, p.bwd_data.diff_dst_desc(), Dir::In);
        b_.emplace(w, p.bwd_data.weights_desc(), Dir::In);
        out_.emplace(x, p.bwd_data.diff_src_desc(), Dir::Out);
        runner_.init<decltype(p.bwd_data), dnnl::convolution_backward_data>(p.bwd_data);
        break;
      case ConvDir::BackpropFilter:
        a_.emplace(x, p.bwd_weights.src_desc(), Dir::In);
        b_.emplace(y, p.bwd_weights.diff_dst_desc(), Dir::In);
        out_.emplace(w, p.bwd_weights.diff_weights_desc(), Dir::Out);
        runner_.init<decltype(p.bwd_weights), dnnl::convolution_backward_weights>(p.bwd_weights);
        break;
    }
    a_form_ = activation_form(spec, 0, *a_);
    if (!constant_b_) b_form_ = activation_form(spec, 1, *b_);
  }

  void compute(KernelContext& ctx) override {
    const dnnl::memory& a = a_->bind_activation(ctx.inputs[0].raw(), ctx.shared, a_form_);
    const dnnl::memory& b = constant_b_
                                ? b_->bind_constant(ctx.inputs[1].raw())
                                : b_->bind_activation(ctx.inputs[1].raw(), ctx.shared, b_form_);
    const dnnl::memory& out = out_->bind(ctx.outputs[0].raw());
    switch (dir_) {
      case ConvDir::Forward:
        if (bias_) {
          bias_->set_data_handle(ctx.inputs[2].raw());
          runner_.run({{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_BIAS, *bias_},
                       {DNNL_ARG_DST, out}});
        } else {
          runner_.run({{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, out}});
        }
        break;
      case ConvDir::BackpropInput:
        runner_.run({{DNNL_ARG_DIFF_DST, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DIFF_SRC, out}});
        break;
      case ConvDir::BackpropFilter:
        runner_.run({{DNNL_ARG_SRC, a}, {DNNL_ARG_DIFF_DST, b}, {DNNL_ARG_DIFF_WEIGHTS, out}});
        break;
    }
    out_->finish();
    stream().wait();
  }
  // Profiles tell bf16 products from fp32 ones.
  std::string running_impl() const override { return bf16_ ? "bf16" : ""; }

 private:
  ConvDir dir_;
  bool constant_b_;  // frozen weights: reordered once
  bool bf16_ = false;
  // Inputs 0 and 1 of the node, and its output.
  std::optional<StagedArg> a_, b_, out_;
  // Their activation_form: x and dy are staged once a run for all three directions.
  std::string a_form_, b_form_;
  std::optional<dnnl::memory> bias_;  // a FusedConv2D's, read in place
  Runner runner_;
};

KernelDef conv_kernel(const char* op, ConvDir dir) {
  KernelDef def;
  def.op = op;
  def.impl = "onednn";
  def.priority = kPriority;
  def.accepts = [dir](const KernelSpec& spec) { return accepts(spec, dir); };
  def.create = [dir](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<ConvKernel>(spec, dir);
  };
  return def;
}

}  // namespace

void register_conv_kernels(KernelRegistry& r) {
  r.add(conv_kernel(op_names::kConv2D, ConvDir::Forward));
  // A training graph's folded conv (its filter a variable); frozen filters take the measured
  // kernel of fused_conv_kernels.cc, which this one outranks.
  KernelDef variable_filter = conv_kernel(op_names::kFusedConv2D, ConvDir::Forward);
  variable_filter.impl = "onednn_train";
  variable_filter.priority = kPriority + 1;
  variable_filter.accepts = [](const KernelSpec& spec) {
    return !spec.input_is_constant(1) && spec.inputs[2].dtype == DType::f32 &&
           accepts(spec, ConvDir::Forward);
  };
  r.add(std::move(variable_filter));
  r.add(conv_kernel(op_names::kConv2DBackpropInput, ConvDir::BackpropInput));
  r.add(conv_kernel(op_names::kConv2DBackpropFilter, ConvDir::BackpropFilter));
}

}  // namespace sf::onednn
