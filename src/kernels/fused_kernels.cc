// Kernels for FusedConv2D / FusedConv2DAdd / FusedMatMul / FusedBatchMatMul composed from the best
// registered Conv2D / MatMul / BatchMatMul kernel plus one pass that adds the bias (and the addend)
// and applies the activation while the output is hot. With impl "reference" the composed kernel
// uses the reference conv/matmul, which makes it the oracle for any dedicated fused kernel.
#include <algorithm>
#include <limits>

#include "cpu/parallel_for.h"
#include "graph/op_registry.h"
#include "kernels/kernel.h"
#include "kernels/register.h"
#include "ops/conv_geometry.h"
#include "ops/execution_ops.h"
#include "ops/op_names.h"

namespace sf {

namespace {

// The fused node's attributes that `base_op` declares: without the activation, which the base
// kernel must not apply (the sparse MatMul kernel reads one) before the bias is added.
Attrs base_attrs(const Attrs& fused, const std::string& base_op) {
  Attrs attrs;
  for (const AttrSpec& spec : OpRegistry::global().get(base_op, "composed fused kernel").attrs)
    if (fused.has(spec.name)) attrs.set(spec.name, fused.all().at(spec.name));
  return attrs;
}

class ComposedFusedKernel : public Kernel {
 public:
  ComposedFusedKernel(const KernelSpec& spec, const std::string& base_op, const std::string& impl)
      : base_node_(spec.node),
        activation_(activation_of(spec.node)),
        alpha_(spec.node.attrs.has("alpha") ? static_cast<float>(spec.node.attrs.get_float("alpha"))
                                            : 1.0f) {
    base_node_.op = base_op;
    base_node_.attrs = base_attrs(spec.node.attrs, base_op);
    base_node_.inputs.resize(2);
    KernelSpec base_spec{base_node_,
                         {spec.inputs[0], spec.inputs[1]},
                         {spec.input_is_constant(0), spec.input_is_constant(1)}};
    const KernelDef& def = KernelRegistry::global().select(base_spec, impl);
    base_ = def.create(base_spec);
  }

  void compute(KernelContext& ctx) override {
    KernelContext base_ctx{
        base_node_, {ctx.inputs[0], ctx.inputs[1]}, ctx.outputs, ctx.training, ctx.rng};
    base_->compute(base_ctx);
    float* y = ctx.outputs[0].data<float>();
    const float* bias = ctx.inputs[2].data<float>();
    const float* addend = ctx.inputs.size() == 4 ? ctx.inputs[3].data<float>() : nullptr;
    const int64_t channels = ctx.inputs[2].numel();
    const int64_t rows = ctx.outputs[0].numel() / channels;
    const float upper =
        activation_ == Activation::Relu6 ? 6.0f : std::numeric_limits<float>::infinity();
    const bool clamp = activation_ != Activation::None;
    parallel_for(0, rows, rows > 64, [&](int64_t share_begin, int64_t share_end) {
      for (int64_t r = share_begin; r < share_end; ++r) {
        float* row = y + r * channels;
        const float* addend_row = addend ? addend + r * channels : nullptr;
        for (int64_t c = 0; c < channels; ++c) {
          float v = alpha_ * (row[c] + bias[c]);
          if (addend_row) v += addend_row[c];
          row[c] = clamp ? std::min(std::max(v, 0.0f), upper) : v;
        }
      }
    });
  }

 private:
  Node base_node_;
  Activation activation_;
  float alpha_;  // FusedBatchMatMul's scale of product and bias; 1 for the others
  std::unique_ptr<Kernel> base_;
};

KernelDef composed(const std::string& op, const std::string& base_op, const std::string& impl,
                   int priority) {
  KernelDef def;
  def.op = op;
  def.dtype = DType::f32;
  def.impl = impl;
  def.priority = priority;
  def.create = [base_op, impl](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<ComposedFusedKernel>(spec, base_op, impl == "composed" ? "" : impl);
  };
  return def;
}

// FusedConv2DMaxPool as the reference FusedConv2D and then the reference MaxPoolWindowArgmax of
// its output: the oracle for kernels/float_loops.h's one pass.
class ReferenceConvMaxPoolKernel : public Kernel {
 public:
  explicit ReferenceConvMaxPoolKernel(const KernelSpec& spec)
      : conv_node_(spec.node), pool_node_(spec.node) {
    conv_node_.op = op_names::kFusedConv2D;
    conv_node_.attrs = base_attrs(spec.node.attrs, op_names::kFusedConv2D);
    const Shape& x = spec.inputs[0].shape;
    const Shape& w = spec.inputs[1].shape;
    const Window2D g = conv_window(conv_node_.attrs, x, w);
    activations_ = TensorType{DType::f32, {x[0], g.h.out, g.w.out, w[3]}};
    conv_node_.outputs = {activations_};
    pool_node_.op = op_names::kMaxPoolWindowArgmax;
    const Attrs& a = spec.node.attrs;
    pool_node_.attrs = unprefixed_pool_attrs(a);
    pool_node_.attrs.set("relu", a.all().at("relu"));
    const KernelSpec conv_spec{conv_node_, spec.inputs, spec.constant_inputs};
    conv_ = KernelRegistry::global().select(conv_spec, "reference").create(conv_spec);
    const KernelSpec pool_spec{pool_node_, {activations_}};
    pool_ = KernelRegistry::global().select(pool_spec, "reference").create(pool_spec);
  }

  void compute(KernelContext& ctx) override {
    const Shape& x = ctx.inputs[0].shape();
    const Shape& w = ctx.inputs[1].shape();
    const Window2D g = conv_window(conv_node_.attrs, x, w);
    Tensor activations(DType::f32, {x[0], g.h.out, g.w.out, w[3]});
    KernelContext conv_ctx{conv_node_, ctx.inputs, {activations}, ctx.training, ctx.rng};
    conv_->compute(conv_ctx);
    KernelContext pool_ctx{pool_node_, {activations}, ctx.outputs, ctx.training, ctx.rng};
    pool_->compute(pool_ctx);
  }

 private:
  Node conv_node_, pool_node_;
  TensorType activations_;  // the conv's output
  std::unique_ptr<Kernel> conv_, pool_;
};

// FusedConv2DMaxPoolGrad as the reference MaxPoolGradWindowArgmax, Conv2DBackpropFilter and
// BiasAddGrad it replaces.
class ReferenceConvMaxPoolGradKernel : public Kernel {
 public:
  explicit ReferenceConvMaxPoolGradKernel(const KernelSpec& spec)
      : pool_node_(spec.node), filter_node_(spec.node), bias_node_(spec.node) {
    const Attrs& a = spec.node.attrs;
    pool_node_.op = op_names::kMaxPoolGradWindowArgmax;
    pool_node_.attrs = unprefixed_pool_attrs(a);
    filter_node_.op = op_names::kConv2DBackpropFilter;
    filter_node_.attrs = base_attrs(a, op_names::kConv2DBackpropFilter);
    bias_node_.op = op_names::kBiasAddGrad;
    bias_node_.attrs = {};
  }

  void compute(KernelContext& ctx) override {
    const Shape& x = ctx.inputs[0].shape();
    const Shape& w = filter_node_.attrs.get_ints("filter_shape");
    const Window2D g = conv_window(filter_node_.attrs, x, w);
    const Shape y{x[0], g.h.out, g.w.out, w[3]};
    pool_node_.attrs.set("input_shape", y);
    Tensor dx(DType::f32, y);
    run(pool_node_, {ctx.inputs[1], ctx.inputs[2]}, {dx}, ctx);
    run(filter_node_, {ctx.inputs[0], dx}, {ctx.outputs[0]}, ctx);
    run(bias_node_, {dx}, {ctx.outputs[1]}, ctx);
  }

 private:
  static void run(const Node& node, std::vector<Tensor> inputs, std::vector<Tensor> outputs,
                  const KernelContext& ctx) {
    std::vector<TensorType> types;
    for (const Tensor& t : inputs) types.push_back(TensorType{t.dtype(), t.shape()});
    const KernelSpec spec{node, types};
    KernelContext c{node, std::move(inputs), std::move(outputs), ctx.training, ctx.rng};
    KernelRegistry::global().select(spec, "reference").create(spec)->compute(c);
  }

  Node pool_node_, filter_node_, bias_node_;
};

// The reference kernel of `op`, a K.
template <typename K>
KernelDef reference_kernel(const std::string& op) {
  KernelDef def;
  def.op = op;
  def.impl = "reference";
  def.create = [](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<K>(spec);
  };
  return def;
}

}  // namespace

void register_fused_kernels(KernelRegistry& registry) {
  registry.add(reference_kernel<ReferenceConvMaxPoolGradKernel>(op_names::kFusedConv2DMaxPoolGrad));
  registry.add(reference_kernel<ReferenceConvMaxPoolKernel>(op_names::kFusedConv2DMaxPool));
  registry.add(composed(op_names::kFusedConv2D, op_names::kConv2D, "reference", 0));
  registry.add(composed(op_names::kFusedConv2D, op_names::kConv2D, "composed", 5));
  registry.add(composed(op_names::kFusedConv2DAdd, op_names::kConv2D, "reference", 0));
  registry.add(composed(op_names::kFusedConv2DAdd, op_names::kConv2D, "composed", 5));
  registry.add(composed(op_names::kFusedMatMul, op_names::kMatMul, "reference", 0));
  registry.add(composed(op_names::kFusedMatMul, op_names::kMatMul, "composed", 5));
  registry.add(composed(op_names::kFusedBatchMatMul, op_names::kBatchMatMul, "reference", 0));
  registry.add(composed(op_names::kFusedBatchMatMul, op_names::kBatchMatMul, "composed", 5));
}

}  // namespace sf
