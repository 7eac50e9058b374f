// oneDNN FusedMatMul for inference: bias and activation inside the primitive. Frozen weights
// are reordered once into the layout oneDNN prefers (format_tag::any); weights that change
// between calls are read in place through strides, as the plain MatMul kernel does.
#include "kernels/onednn/onednn_common.h"
#include "ops/op_names.h"

namespace sf::onednn {

namespace {

dnnl::matmul::primitive_desc make_typed_pd(const KernelSpec& spec,
                                           dnnl::memory::data_type product) {
  const bool ta = spec.node.attrs.get_bool("transpose_a");
  const bool tb = spec.node.attrs.get_bool("transpose_b");
  const Shape& y = spec.node.outputs[0].shape;
  dnnl::memory::desc b = with_data_type(matrix_desc(spec.inputs[1].shape, tb), product);
  if (spec.input_is_constant(1)) b = dnnl::memory::desc(b.dims(), product, tag::any);
  dnnl::primitive_attr attr = user_scratchpad_attr();
  attr.set_post_ops(activation_post_ops(activation_of(spec.node)));
  return dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(with_data_type(matrix_desc(spec.inputs[0].shape, ta), product), b,
                         dnnl::memory::desc({1, y[1]}, dnnl::memory::data_type::f32, tag::ab),
                         plain_desc(y)),
      attr, engine());
}

// Under spec.bf16, a bf16 product (inputs rounded to bf16, output fp32) where oneDNN has a
// kernel for it; fp32 otherwise.
dnnl::matmul::primitive_desc make_pd(const KernelSpec& spec) {
  return bf16_or_f32(spec.bf16, [&](dnnl::memory::data_type product) {
    return make_typed_pd(spec, product);
  });
}

class FusedMatMulKernel : public Kernel {
 public:
  explicit FusedMatMulKernel(const KernelSpec& spec) : constant_b_(spec.input_is_constant(1)) {
    dnnl::matmul::primitive_desc pd = make_pd(spec);
    bf16_ = pd.src_desc().data_type() == dnnl::memory::data_type::bf16;
    // Our f32 input in the primitive's layout: staged (rounded to bf16) only for a bf16 product.
    a_.emplace(with_data_type(pd.src_desc(), dnnl::memory::data_type::f32), pd.src_desc(),
               StagedArg::Direction::In);
    b_.emplace(matrix_desc(spec.inputs[1].shape, spec.node.attrs.get_bool("transpose_b")),
               pd.weights_desc(), StagedArg::Direction::In);
    bias_ = dnnl::memory(pd.bias_desc(), engine(), DNNL_MEMORY_NONE);
    y_ = dnnl::memory(pd.dst_desc(), engine(), DNNL_MEMORY_NONE);
    runner_.init<dnnl::matmul::primitive_desc, dnnl::matmul>(pd);
  }

  void compute(KernelContext& ctx) override {
    const dnnl::memory& a = a_->bind(ctx.inputs[0].raw());
    const dnnl::memory& b =
        constant_b_ ? b_->bind_constant(ctx.inputs[1].raw()) : b_->bind(ctx.inputs[1].raw());
    bias_.set_data_handle(ctx.inputs[2].raw());
    y_.set_data_handle(ctx.outputs[0].raw());
    runner_.run({{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_BIAS, bias_},
                 {DNNL_ARG_DST, y_}});
    stream().wait();
  }
  // Profiles tell a bf16 product from the fp32 one.
  std::string running_impl() const override { return bf16_ ? "bf16" : ""; }

 private:
  bool constant_b_;
  bool bf16_ = false;
  dnnl::memory bias_, y_;
  std::optional<StagedArg> a_, b_;
  Runner runner_;
};

bool accepts(const KernelSpec& spec) {
  for (const TensorType& t : spec.inputs)
    if (num_elements(t.shape) == 0) return false;
  try {
    return !is_reference_impl(make_pd(spec).impl_info_str());
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

void register_fused_matmul_kernels(KernelRegistry& r) {
  KernelDef def;
  def.op = op_names::kFusedMatMul;
  def.impl = "onednn";
  def.priority = kPriority;
  def.accepts = accepts;
  def.create = [](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<FusedMatMulKernel>(spec);
  };
  r.add(std::move(def));
}

}  // namespace sf::onednn
