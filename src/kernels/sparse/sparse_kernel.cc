#include "kernels/sparse/sparse_kernels.h"
#include "kernels/sparse/sparse_weights.h"

namespace sf::sparse {

SparseKernel::SparseKernel(const KernelSpec& spec, double threshold, size_t weight_input)
    : threshold_(threshold), weight_input_(weight_input) {
  if (threshold_ > 0.0)
    dense_ = KernelRegistry::global().select_below(spec, kPriority).create(spec);
}

void SparseKernel::compute(KernelContext& ctx) {
  const Tensor& weights = ctx.inputs[weight_input_];
  if (weights.raw() != decided_for_ || path_ == Path::Undecided) {
    sparsity_ = zero_fraction(weights);
    path_ = sparse_pays(weights) ? Path::Sparse : Path::Dense;
    if (path_ == Path::Sparse) prepare(weights);
    decided_for_ = weights.raw();
  }
  if (path_ == Path::Sparse)
    compute_sparse(ctx);
  else
    dense_->compute(ctx);
}

bool SparseKernel::sparse_pays(const Tensor&) { return sparsity_ >= threshold_; }

std::string SparseKernel::running_impl() const {
  if (path_ != Path::Dense) return "";
  const std::string dense = dense_ ? dense_->running_impl() : "";
  return dense.empty() ? "dense" : "dense:" + dense;
}

}  // namespace sf::sparse
