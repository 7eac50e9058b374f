// oneDNN MatMul. Transposes are expressed as strides on the plain row-major buffers, so no
// copies are made. Under KernelSpec::bf16 (mixed-precision training: forward and both gradient
// products are MatMuls) the two inputs are rounded to bf16 into kernel-owned buffers and the
// product accumulates and writes fp32; BatchMatMul stays fp32. FusedBatchMatMul is a
// BatchMatMul with oneDNN's bias (and activation post-op).
#include <fmt/format.h>

#include "kernels/onednn/gemm.h"
#include "kernels/onednn/onednn_common.h"
#include "ops/execution_ops.h"
#include "ops/op_names.h"

namespace sf::onednn {

namespace {

dnnl::matmul::primitive_desc make_typed_pd(const KernelSpec& spec,
                                           dnnl::memory::data_type product) {
  const bool ta = spec.node.attrs.get_bool("transpose_a");
  const bool tb = spec.node.attrs.get_bool("transpose_b");
  return dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(with_data_type(matrix_desc(spec.inputs[0].shape, ta), product),
                         with_data_type(matrix_desc(spec.inputs[1].shape, tb), product),
                         plain_desc(spec.node.outputs[0].shape)),
      user_scratchpad_attr(), engine());
}

dnnl::matmul::primitive_desc make_pd(const KernelSpec& spec) {
  return bf16_or_f32(spec.bf16, [&](dnnl::memory::data_type product) {
    return make_typed_pd(spec, product);
  });
}

// oneDNN's brgemm matmul packs its weights operand on every call, so a product of few rows with
// a large transposed b, a dense layer's input gradient dy [M, K] x W^T with W stored [N, K],
// spends most of its time packing W for M rows. Computed as (W x dy^T)^T instead, W is read in
// place as the source, the small dy is what gets packed, and the output is transposed back
// (as a staged output). Deep-MNIST's fc1 input gradient at M = 64 (W 3136 x 1024): 1.35-1.48
// ms -> 0.79-0.82 in bf16, 2.19-2.40 -> 1.41-1.45 in fp32 (cold caches, alternating calls, on
// an AMD EPYC with AVX-512 BF16). Only where packing b costs more than transposing the output:
// N and K each this many times M (fc2's input gradient, K = 10, took 0.076 ms swapped against
// 0.033).
constexpr int64_t kSwapMinRatio = 8;

bool swaps_operands(const KernelSpec& spec) {
  if (spec.node.op != op_names::kMatMul || spec.node.attrs.get_bool("transpose_a") ||
      !spec.node.attrs.get_bool("transpose_b"))
    return false;
  const Shape& a = spec.inputs[0].shape;
  const Shape& b = spec.inputs[1].shape;
  return a.size() == 2 && b.size() == 2 && b[0] >= kSwapMinRatio * a[0] &&
         a[1] >= kSwapMinRatio * a[0];
}

// y^T [N, M] = b [N, K] x a^T [K, M], for a [M, K] and b stored [N, K].
dnnl::matmul::primitive_desc make_swapped_pd(const KernelSpec& spec) {
  const Shape& a = spec.inputs[0].shape;
  const Shape& b = spec.inputs[1].shape;
  return bf16_or_f32(spec.bf16, [&](dnnl::memory::data_type product) {
    return dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(with_data_type(matrix_desc(b, false), product),
                           with_data_type(matrix_desc(a, true), product),
                           plain_desc({b[0], a[0]})),
        user_scratchpad_attr(), engine());
  });
}

// A batched operand as oneDNN takes it: padded with leading 1s to the output's rank (oneDNN
// broadcasts size-1 batch dimensions), the last two dimensions swapped by strides when
// transposed.
dnnl::memory::desc batched_desc(const Shape& stored, size_t rank, bool t) {
  Shape s(rank - stored.size(), 1);
  s.insert(s.end(), stored.begin(), stored.end());
  dnnl::memory::dims strides(rank, 1);
  for (size_t i = rank - 1; i-- > 0;) strides[i] = strides[i + 1] * s[i + 1];
  dnnl::memory::dims dims(s.begin(), s.end());
  if (t) {
    std::swap(dims[rank - 1], dims[rank - 2]);
    std::swap(strides[rank - 1], strides[rank - 2]);
  }
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
}

// Whether a's batch dimensions can join its rows: b is one matrix (rank 2, or batch dimensions
// all 1) and a is not transposed. A [128,1,256] x [256,768] product (an exported attention
// projection) is then one [128,256] x [256,768] GEMM instead of 128 of one row each (0.9 ms
// batched, 0.3 ms as one).
bool rows_collapse(const KernelSpec& spec) {
  const Shape& a = spec.inputs[0].shape;
  const Shape& b = spec.inputs[1].shape;
  if (a.size() < 3 || spec.node.attrs.get_bool("transpose_a")) return false;
  for (size_t i = 0; i + 2 < b.size(); ++i)
    if (b[i] != 1) return false;
  return true;
}

bool is_batched(const KernelSpec& spec) {
  return spec.node.op == op_names::kBatchMatMul || spec.node.op == op_names::kFusedBatchMatMul;
}

// A FusedBatchMatMul's bias [N] as oneDNN broadcasts it over an output of `rank`.
dnnl::memory::desc bias_desc(int64_t n, size_t rank) {
  Shape dims(rank, 1);
  dims.back() = n;
  return plain_desc(dims);
}

dnnl::matmul::primitive_desc make_batched_pd(const KernelSpec& spec) {
  const bool ta = spec.node.attrs.get_bool("transpose_a");
  const bool tb = spec.node.attrs.get_bool("transpose_b");
  const Shape& out = spec.node.outputs[0].shape;
  const bool fused = spec.node.op == op_names::kFusedBatchMatMul;
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (fused) {
    attr.set_post_ops(activation_post_ops(activation_of(spec.node)));
    const float alpha = static_cast<float>(spec.node.attrs.get_float("alpha"));
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  }
  const auto make = [&](const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                        const dnnl::memory::desc& y) {
    if (!fused) return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, y), attr, engine());
    return dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(a, b, bias_desc(out.back(), static_cast<size_t>(y.dims().size())), y),
        attr, engine());
  };
  if (rows_collapse(spec)) {
    const Shape& a = spec.inputs[0].shape;
    const Shape& b = spec.inputs[1].shape;
    const int64_t k = a.back(), rows = num_elements(a) / k;
    return make(matrix_desc({rows, k}, false), matrix_desc({b[b.size() - 2], b.back()}, tb),
                plain_desc({rows, out.back()}));
  }
  return make(batched_desc(spec.inputs[0].shape, out.size(), ta),
              batched_desc(spec.inputs[1].shape, out.size(), tb), plain_desc(out));
}

// The swapped product where oneDNN has a kernel for it, else none.
std::optional<dnnl::matmul::primitive_desc> swapped_pd(const KernelSpec& spec) {
  if (!swaps_operands(spec)) return std::nullopt;
  try {
    dnnl::matmul::primitive_desc pd = make_swapped_pd(spec);
    if (!is_reference_impl(pd.impl_info_str())) return pd;
  } catch (const dnnl::error&) {
  }
  return std::nullopt;
}

class MatMulKernel : public Kernel {
 public:
  explicit MatMulKernel(const KernelSpec& spec) : MatMulKernel(spec, swapped_pd(spec)) {}

  void compute(KernelContext& ctx) override {
    const dnnl::memory& a = a_->bind_activation(ctx.inputs[0].raw(), ctx.shared, a_form_);
    const dnnl::memory& b = shared_form_.empty() || ctx.shared == nullptr
                                ? b_->bind_activation(ctx.inputs[1].raw(), ctx.shared, b_form_)
                                : bind_shared_b(ctx);
    const dnnl::memory& y = y_->bind(ctx.outputs[0].raw());
    // Swapped, input b is the primitive's source and input a its weights.
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, swapped_ ? b : a},
                                               {DNNL_ARG_WEIGHTS, swapped_ ? a : b},
                                               {DNNL_ARG_DST, y}};
    if (bias_) {
      bias_.set_data_handle(ctx.inputs[2].raw());
      args.emplace(DNNL_ARG_BIAS, bias_);
    }
    runner_.run(args);
    y_->finish();
    stream().wait();
  }
  // Profiles tell a bf16 product from the fp32 one, and the swapped one.
  std::string running_impl() const override {
    return std::string(bf16_ ? "bf16" : "") + (bf16_ && swapped_ ? ":" : "") +
           (swapped_ ? "swapped" : "");
  }

 private:
  MatMulKernel(const KernelSpec& spec, std::optional<dnnl::matmul::primitive_desc> swapped)
      : swapped_(swapped.has_value()) {
    const dnnl::matmul::primitive_desc pd =
        swapped ? *swapped : is_batched(spec) ? make_batched_pd(spec) : make_pd(spec);
    bf16_ = pd.src_desc().data_type() == dnnl::memory::data_type::bf16;
    // Our f32 inputs, staged (rounded to bf16) only for a bf16 product.
    const auto f32 = dnnl::memory::data_type::f32;
    const dnnl::memory::desc& a = swapped_ ? pd.weights_desc() : pd.src_desc();
    const dnnl::memory::desc& b = swapped_ ? pd.src_desc() : pd.weights_desc();
    a_.emplace(with_data_type(a, f32), a, StagedArg::Direction::In);
    b_.emplace(with_data_type(b, f32), b, StagedArg::Direction::In);
    // Swapped, the primitive writes y^T plain and the staging transposes it into y.
    y_.emplace(swapped_ ? matrix_desc(spec.node.outputs[0].shape, true) : pd.dst_desc(),
               pd.dst_desc(), StagedArg::Direction::Out);
    if (!pd.bias_desc().is_zero()) bias_ = dnnl::memory(pd.bias_desc(), engine(), DNNL_MEMORY_NONE);
    runner_.init<dnnl::matmul::primitive_desc, dnnl::matmul>(pd);
    // A variable's rounding to bf16 is shared by the products that read it in one run. The
    // rounded bytes lie as the stored matrix's do, whichever way a product reads it, so a dense
    // layer's forward product and its input gradient's (transpose_b, maybe swapped) share one.
    if (b_->staged() && spec.input_is_variable(1) && spec.node.op == op_names::kMatMul) {
      shared_form_ = fmt::format("matmul b bf16 {}", shape_str(spec.inputs[1].shape));
      shared_b_view_ = dnnl::memory(b_->staged_desc(), engine(), DNNL_MEMORY_NONE);
    }
    // An activation's rounding to bf16 likewise: a layer's input for its forward product and
    // weight gradient, its output gradient for its input and weight gradients.
    a_form_ = activation_form(spec, 0, *a_);
    b_form_ = activation_form(spec, 1, *b_);
  }

  const dnnl::memory& bind_shared_b(KernelContext& ctx) {
    bool fill = false;
    shared_b_ = std::static_pointer_cast<dnnl::memory>(ctx.shared->get(
        ctx.inputs[1].raw(), shared_form_,
        [&] { return std::make_shared<dnnl::memory>(b_->staged_desc(), engine()); }, fill));
    // Seen through this product's own (maybe transposed) view of the bytes.
    shared_b_view_.set_data_handle(shared_b_->get_data_handle());
    // The staged desc is the variable's own with bf16 elements: the optimizer may round into it.
    if (fill)
      ctx.shared->holds_bf16(ctx.inputs[1].raw(), shared_form_, shared_b_->get_data_handle());
    return b_->bind_shared(ctx.inputs[1].raw(), shared_b_view_, fill);
  }

  bool swapped_;  // computes y^T = b x a^T (swaps_operands)
  bool bf16_ = false;
  std::string shared_form_;  // empty: input b is staged by this kernel alone
  std::string a_form_, b_form_;  // activation_form of inputs a and b
  std::shared_ptr<dnnl::memory> shared_b_;
  dnnl::memory shared_b_view_;
  // Inputs a and b, whichever of the primitive's operands they are, and the output.
  std::optional<StagedArg> a_, b_, y_;
  dnnl::memory bias_;  // empty but for FusedBatchMatMul
  Runner runner_;
};

// oneDNN's sgemm for an fp32 product whose b is not transposed: where the matmul primitive
// packs all of b on every call, sgemm's kernels run faster for few rows and no slower for many
// (cold caches, alternating calls, an AMD EPYC: Deep-MNIST's fc1 at 64 rows 1.88-2.16 -> 1.45-1.48
// ms, at 32 rows 1.28-1.53 -> 0.89, its weight gradient (transpose_a) 1.38-1.52 -> 1.14-1.25,
// 512^3 0.78 vs 0.79). With b transposed sgemm was slower (fc1's input gradient 2.3 -> 4.0 ms).
bool runs_on_sgemm(const KernelSpec& spec) {
  return !spec.bf16 && spec.node.op == op_names::kMatMul &&
         !spec.node.attrs.get_bool("transpose_b") && spec.inputs[0].shape.size() == 2 &&
         spec.inputs[1].shape.size() == 2 && spec.inputs[0].dtype == DType::f32 &&
         spec.inputs[1].dtype == DType::f32;
}

class SgemmMatMulKernel : public Kernel {
 public:
  explicit SgemmMatMulKernel(const KernelSpec& spec)
      : transpose_a_(spec.node.attrs.get_bool("transpose_a")),
        m_(spec.node.outputs[0].shape[0]),
        n_(spec.node.outputs[0].shape[1]),
        k_(spec.inputs[0].shape[transpose_a_ ? 0 : 1]),
        name_(spec.node.name) {}

  void compute(KernelContext& ctx) override {
    gemm_f32(transpose_a_, m_, n_, k_, 1.0f, ctx.inputs[0].data<float>(),
             transpose_a_ ? m_ : k_, ctx.inputs[1].data<float>(), n_, 0.0f,
             ctx.outputs[0].data<float>(), n_, name_.c_str());
  }
  std::string running_impl() const override { return "sgemm"; }

 private:
  bool transpose_a_;
  int64_t m_, n_, k_;
  std::string name_;
};

bool accepts(const KernelSpec& spec) {
  for (const TensorType& t : spec.inputs)
    if (num_elements(t.shape) == 0) return false;
  try {
    const auto pd = is_batched(spec) ? make_batched_pd(spec) : make_pd(spec);
    return !is_reference_impl(pd.impl_info_str());
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

void register_matmul_kernels(KernelRegistry& r) {
  KernelDef def;
  def.op = op_names::kMatMul;
  def.impl = "onednn";
  def.priority = kPriority;
  def.accepts = accepts;
  def.create = [](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    if (runs_on_sgemm(spec)) return std::make_unique<SgemmMatMulKernel>(spec);
    return std::make_unique<MatMulKernel>(spec);
  };
  r.add(def);
  def.op = op_names::kBatchMatMul;
  r.add(def);
  def.op = op_names::kFusedBatchMatMul;
  r.add(std::move(def));
}

}  // namespace sf::onednn
