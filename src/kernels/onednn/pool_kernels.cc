// oneDNN MaxPool, MaxPoolGrad, AvgPool, AvgPoolGrad and GlobalAvgPool on plain NHWC buffers
// (GlobalAvgPool's [N, C] output is the [N, 1, 1, C] image of a window as large as the input).
#include "kernels/onednn/onednn_common.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf::onednn {

namespace {

enum class PoolKind { MaxForward, MaxBackward, AvgForward, AvgBackward, GlobalAvgForward };

bool is_max(PoolKind k) { return k == PoolKind::MaxForward || k == PoolKind::MaxBackward; }
bool is_forward(PoolKind k) {
  return k == PoolKind::MaxForward || k == PoolKind::AvgForward || k == PoolKind::GlobalAvgForward;
}

struct PoolPds {
  dnnl::pooling_forward::primitive_desc fwd;
  dnnl::pooling_backward::primitive_desc bwd;
};

// x is input 0 for the forward ops and MaxPoolGrad; AvgPoolGrad's x is its output.
PoolPds make_pds(const KernelSpec& spec, PoolKind kind) {
  const Shape& x_shape =
      kind == PoolKind::AvgBackward ? spec.node.outputs[0].shape : spec.inputs[0].shape;
  Window2D g;
  if (kind == PoolKind::GlobalAvgForward) {
    g.h = {.k = x_shape[1], .out = 1};
    g.w = {.k = x_shape[2], .out = 1};
  } else {
    g = pool_window(spec.node.attrs, x_shape);
  }
  const Shape y_shape{x_shape[0], g.h.out, g.w.out, x_shape[3]};
  const dnnl::memory::desc x = nhwc_desc(x_shape), y = nhwc_desc(y_shape);
  dnnl::algorithm algo = dnnl::algorithm::pooling_max;
  if (kind == PoolKind::GlobalAvgForward)
    algo = dnnl::algorithm::pooling_avg_exclude_padding;
  else if (!is_max(kind))
    algo = spec.node.attrs.get_bool("count_include_pad")
               ? dnnl::algorithm::pooling_avg_include_padding
               : dnnl::algorithm::pooling_avg_exclude_padding;
  const dnnl::memory::dims strides{g.h.stride, g.w.stride}, kernel{g.h.k, g.w.k};
  const dnnl::memory::dims pad_l{g.h.pad_before, g.w.pad_before};
  const dnnl::memory::dims pad_r{g.h.pad_after, g.w.pad_after};
  // Max backward needs the forward's workspace (argmax), which only forward_training keeps.
  const auto prop =
      is_forward(kind) ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
  dnnl::primitive_attr attr = user_scratchpad_attr();
  PoolPds p;
  p.fwd = dnnl::pooling_forward::primitive_desc(
      dnnl::pooling_forward::desc(prop, algo, x, y, strides, kernel, pad_l, pad_r), attr, engine());
  if (!is_forward(kind))
    p.bwd = dnnl::pooling_backward::primitive_desc(
        dnnl::pooling_backward::desc(algo, x, y, strides, kernel, pad_l, pad_r), attr, engine(),
        p.fwd);
  return p;
}

// MaxPoolGrad recomputes the forward pass for its argmax workspace: oneDNN's max pooling keeps
// the first maximum of each window, which is where the op's contract routes dy.
class PoolKernel : public Kernel {
 public:
  PoolKernel(const KernelSpec& spec, PoolKind kind) : kind_(kind) {
    PoolPds p = make_pds(spec, kind);
    const dnnl::memory::desc x = p.fwd.src_desc(), y = p.fwd.dst_desc();
    x_ = dnnl::memory(x, engine(), DNNL_MEMORY_NONE);
    y_ = dnnl::memory(y, engine(), DNNL_MEMORY_NONE);
    if (is_forward(kind)) {
      fwd_.init<dnnl::pooling_forward::primitive_desc, dnnl::pooling_forward>(p.fwd);
      return;
    }
    if (kind == PoolKind::MaxBackward) {
      fwd_.init<dnnl::pooling_forward::primitive_desc, dnnl::pooling_forward>(p.fwd);
      y_scratch_ = dnnl::memory(y, engine());
      workspace_ = dnnl::memory(p.fwd.workspace_desc(), engine());
    }
    bwd_.init<dnnl::pooling_backward::primitive_desc, dnnl::pooling_backward>(p.bwd);
  }

  void compute(KernelContext& ctx) override {
    switch (kind_) {
      case PoolKind::MaxForward:
      case PoolKind::AvgForward:
      case PoolKind::GlobalAvgForward:
        x_.set_data_handle(ctx.inputs[0].raw());
        y_.set_data_handle(ctx.outputs[0].raw());
        fwd_.run({{DNNL_ARG_SRC, x_}, {DNNL_ARG_DST, y_}});
        break;
      case PoolKind::MaxBackward:
        x_.set_data_handle(ctx.inputs[0].raw());
        fwd_.run(
            {{DNNL_ARG_SRC, x_}, {DNNL_ARG_DST, y_scratch_}, {DNNL_ARG_WORKSPACE, workspace_}});
        y_.set_data_handle(ctx.inputs[2].raw());
        x_.set_data_handle(ctx.outputs[0].raw());
        bwd_.run(
            {{DNNL_ARG_DIFF_DST, y_}, {DNNL_ARG_DIFF_SRC, x_}, {DNNL_ARG_WORKSPACE, workspace_}});
        break;
      case PoolKind::AvgBackward:
        y_.set_data_handle(ctx.inputs[0].raw());
        x_.set_data_handle(ctx.outputs[0].raw());
        bwd_.run({{DNNL_ARG_DIFF_DST, y_}, {DNNL_ARG_DIFF_SRC, x_}});
        break;
    }
    stream().wait();
  }

 private:
  PoolKind kind_;
  dnnl::memory x_, y_;  // x / dx and y / dy, bound to the step's buffers
  dnnl::memory y_scratch_, workspace_;
  Runner fwd_, bwd_;
};

bool accepts(const KernelSpec& spec, PoolKind kind) {
  if (kind == PoolKind::MaxBackward && spec.node.attrs.get_bool("relu")) return false;
  for (const TensorType& t : spec.inputs)
    if (num_elements(t.shape) == 0) return false;
  if (num_elements(spec.node.outputs[0].shape) == 0) return false;
  try {
    PoolPds p = make_pds(spec, kind);
    return !is_reference_impl(is_forward(kind) ? p.fwd.impl_info_str() : p.bwd.impl_info_str());
  } catch (const dnnl::error&) {
    return false;
  }
}

KernelDef pool_kernel(const char* op, PoolKind kind) {
  KernelDef def;
  def.op = op;
  def.impl = "onednn";
  def.priority = kPriority;
  def.accepts = [kind](const KernelSpec& spec) { return accepts(spec, kind); };
  def.create = [kind](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<PoolKernel>(spec, kind);
  };
  return def;
}

}  // namespace

void register_pool_kernels(KernelRegistry& r) {
  r.add(pool_kernel(op_names::kMaxPool, PoolKind::MaxForward));
  r.add(pool_kernel(op_names::kMaxPoolGrad, PoolKind::MaxBackward));
  r.add(pool_kernel(op_names::kAvgPool, PoolKind::AvgForward));
  r.add(pool_kernel(op_names::kAvgPoolGrad, PoolKind::AvgBackward));
  r.add(pool_kernel(op_names::kGlobalAvgPool, PoolKind::GlobalAvgForward));
}

}  // namespace sf::onednn
