// oneDNN Transpose (f32, and the i8/u8 of quantized graphs): a reorder whose source is the input
// viewed through the permutation as strides, so oneDNN's jit reorder does the copy. Models
// imported from ONNX start with an NCHW→NHWC transpose of the image, which the
// element-by-element reference does ten times slower; a quantized transformer's attention
// heads are transposed in int8 (0.1 ms a layer by the reference at width 256, 0.01 here).
#include <utility>

#include "kernels/onednn/onednn_common.h"
#include "ops/layout_geometry.h"
#include "ops/op_names.h"

namespace sf::onednn {

namespace {

class TransposeKernel : public Kernel {
 public:
  TransposeKernel(const KernelSpec& spec, dnnl::memory::data_type type) {
    const Shape& in = spec.inputs[0].shape;
    std::vector<int64_t> perm;
    const std::string err =
        transpose_perm(spec.node.attrs.get_ints("perm"), static_cast<int64_t>(in.size()), &perm);
    SF_CHECK(err.empty(), "node '{}': {}", spec.node.name, err);
    std::vector<int64_t> in_strides(in.size(), 1);
    for (size_t d = in.size() - 1; d > 0; --d) in_strides[d - 1] = in_strides[d] * in[d];
    const Shape& out = spec.node.outputs[0].shape;
    dnnl::memory::dims permuted(out.size());
    for (size_t d = 0; d < out.size(); ++d) permuted[d] = in_strides[static_cast<size_t>(perm[d])];
    src_ = dnnl::memory(dnnl::memory::desc(dims_of(out), type, permuted), engine(),
                        DNNL_MEMORY_NONE);
    dst_ = dnnl::memory(with_data_type(plain_desc(out), type), engine(), DNNL_MEMORY_NONE);
    reorder_ = dnnl::reorder(src_, dst_);
  }

  void compute(KernelContext& ctx) override {
    src_.set_data_handle(ctx.inputs[0].raw());
    dst_.set_data_handle(ctx.outputs[0].raw());
    reorder_.execute(stream(), {{DNNL_ARG_FROM, src_}, {DNNL_ARG_TO, dst_}});
    stream().wait();
  }

 private:
  dnnl::memory src_, dst_;
  dnnl::reorder reorder_;
};

}  // namespace

void register_transpose_kernels(KernelRegistry& r) {
  const std::pair<DType, dnnl::memory::data_type> types[] = {
      {DType::f32, dnnl::memory::data_type::f32},
      {DType::i8, dnnl::memory::data_type::s8},
      {DType::u8, dnnl::memory::data_type::u8}};
  for (const auto& [dtype, type] : types) {
    KernelDef def;
    def.op = op_names::kTranspose;
    def.dtype = dtype;
    def.impl = "onednn";
    def.priority = kPriority;
    def.accepts = [](const KernelSpec& spec) {
      const Shape& in = spec.inputs[0].shape;
      return !in.empty() && in.size() <= DNNL_MAX_NDIMS && num_elements(in) > 0;
    };
    def.create = [type = type](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
      return std::make_unique<TransposeKernel>(spec, type);
    };
    r.add(std::move(def));
  }
}

}  // namespace sf::onednn
