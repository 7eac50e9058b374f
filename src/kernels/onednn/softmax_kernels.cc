// oneDNN Softmax over the last axis (f32, inference): its jit kernel vectorizes exp, where the
// reference kernel calls std::exp in double per element (an attention block's 4x128x128 scores
// took 0.6-0.9 ms that way).
#include "kernels/onednn/onednn_common.h"
#include "ops/op_names.h"

namespace sf::onednn {

namespace {

dnnl::softmax_forward::primitive_desc make_pd(const Shape& shape) {
  return dnnl::softmax_forward::primitive_desc(
      dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, plain_desc(shape),
                                  static_cast<int>(shape.size()) - 1),
      user_scratchpad_attr(), engine());
}

class SoftmaxKernel : public Kernel {
 public:
  explicit SoftmaxKernel(const KernelSpec& spec) {
    const auto pd = make_pd(spec.inputs[0].shape);
    src_ = dnnl::memory(pd.src_desc(), engine(), DNNL_MEMORY_NONE);
    dst_ = dnnl::memory(pd.dst_desc(), engine(), DNNL_MEMORY_NONE);
    runner_.init<dnnl::softmax_forward::primitive_desc, dnnl::softmax_forward>(pd);
  }

  void compute(KernelContext& ctx) override {
    src_.set_data_handle(ctx.inputs[0].raw());
    dst_.set_data_handle(ctx.outputs[0].raw());
    runner_.run({{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}});
    stream().wait();
  }

 private:
  dnnl::memory src_, dst_;
  Runner runner_;
};

bool accepts(const KernelSpec& spec) {
  const Shape& in = spec.inputs[0].shape;
  if (in.empty() || in.size() > DNNL_MAX_NDIMS || num_elements(in) == 0) return false;
  try {
    return !is_reference_impl(make_pd(in).impl_info_str());
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

void register_softmax_kernels(KernelRegistry& r) {
  KernelDef def;
  def.op = op_names::kSoftmax;
  def.dtype = DType::f32;
  def.impl = "onednn";
  def.priority = kPriority;
  def.accepts = accepts;
  def.create = [](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<SoftmaxKernel>(spec);
  };
  r.add(std::move(def));
}

}  // namespace sf::onednn
