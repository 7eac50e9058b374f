// Sparse MatMul / FusedMatMul: y [M, N] = a [M, K] * W [K, N] (+ bias, activation), W frozen and
// held as the CSR of W^T (one row of nonzeros per output n).
//
// One row of a (batch 1): each output is a sparse dot product with a; nothing to reuse.
// More rows: a block of up to 128 rows is transposed to aT [K, rows], so a nonzero (k, n, v)
// adds v * aT[k, :] to the column of y for output n: one weight load serves the whole block.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/sparse/sparse_accumulate.h"
#include "kernels/sparse/sparse_kernels.h"
#include "kernels/sparse/sparse_weights.h"

namespace sf::sparse {

namespace {

// Rows of a per transposed block: 8 AVX-512 vectors of sums per output.
constexpr int64_t kRowBlock = 128;
// Output columns computed together and written row by row: a column of y alone is written with
// a stride of N floats, which for N = 1024 maps every store to the same L1 set.
constexpr int64_t kColumnTile = 16;

class SparseMatMulKernel : public SparseKernel {
 public:
  SparseMatMulKernel(const KernelSpec& spec, double threshold)
      : SparseKernel(spec, threshold),
        transpose_b_(spec.node.attrs.get_bool("transpose_b")),
        activation_(activation_of(spec.node)),
        k_(spec.inputs[0].shape[1]),
        n_(spec.node.outputs[0].shape[1]) {}

 protected:
  void prepare(const Tensor& weights) override {
    csr_ = csr_of_weights(weights.data<float>(), k_, n_, transpose_b_);
  }

  void compute_sparse(KernelContext& ctx) override {
    const float* bias = ctx.inputs.size() > 2 ? ctx.inputs[2].data<float>() : nullptr;
    std::visit([&](const auto& csr) { run(csr, ctx.inputs[0], bias, ctx.outputs[0]); }, csr_);
  }

 private:
  template <typename Index>
  void run(const CsrMatrix<Index>& csr, const Tensor& a_tensor, const float* bias,
           Tensor& y_tensor) {
    const float* a = a_tensor.data<float>();
    float* y = y_tensor.data<float>();
    const int64_t m = a_tensor.shape()[0];
    const int64_t k = k_, n = n_;
    const Activation act = activation_;
    auto finish = [&](float sum, int64_t col) {
      return activate(bias ? sum + bias[col] : sum, act);
    };
    if (m == 1) {
#pragma omp parallel for schedule(static) if (csr.nonzeros() > 4096)
      for (int64_t col = 0; col < n; ++col) {
        const int64_t begin = csr.row_start[col];
        const int64_t count = csr.row_start[col + 1] - begin;
        y[col] =
            finish(sparse_dot(csr.col.data() + begin, csr.value.data() + begin, count, a), col);
      }
      return;
    }
    const AccumulateFn<Index> accumulate = best_accumulate<Index>();
    const int64_t block = std::min(m, kRowBlock);
    a_t_.resize(static_cast<size_t>(k * block));
    tiles_.resize(static_cast<size_t>(omp_get_max_threads() * block * kColumnTile));
    const int64_t tiles = (n + kColumnTile - 1) / kColumnTile;
    for (int64_t row0 = 0; row0 < m; row0 += block) {
      const int64_t rows = std::min(block, m - row0);
      float* a_t = a_t_.data();
#pragma omp parallel
      {
#pragma omp for schedule(static)
        for (int64_t kk = 0; kk < k; ++kk)
          for (int64_t r = 0; r < rows; ++r) a_t[kk * rows + r] = a[(row0 + r) * k + kk];
        float* tile = tiles_.data() + omp_get_thread_num() * block * kColumnTile;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t col0 = t * kColumnTile;
          const int64_t cols = std::min(kColumnTile, n - col0);
          for (int64_t c = 0; c < cols; ++c) {
            const int64_t begin = csr.row_start[col0 + c];
            accumulate(a_t, csr.col.data() + begin, rows, csr.value.data() + begin,
                       csr.row_start[col0 + c + 1] - begin, rows, tile + c * rows);
          }
          for (int64_t r = 0; r < rows; ++r) {
            float* y_row = y + (row0 + r) * n + col0;
            for (int64_t c = 0; c < cols; ++c) y_row[c] = finish(tile[c * rows + r], col0 + c);
          }
        }
      }
    }
  }

  bool transpose_b_;
  Activation activation_;
  int64_t k_, n_;
  AnyCsr csr_;
  std::vector<float> a_t_;    // one transposed block of a
  std::vector<float> tiles_;  // per thread: kColumnTile output columns of the block
};

bool accepts(const KernelSpec& spec) {
  if (!spec.input_is_constant(1) || spec.inputs.size() < 2) return false;
  if (spec.node.attrs.get_bool("transpose_a")) return false;
  for (const TensorType& t : spec.inputs)
    if (t.dtype != DType::f32 || num_elements(t.shape) == 0) return false;
  return spec.inputs[0].shape.size() == 2 && spec.inputs[1].shape.size() == 2;
}

// Batch 1 and batches cross over at different sparsities.
double crossover(const KernelSpec& spec) {
  return spec.inputs[0].shape[0] == 1 ? kMatMulRowCrossover : kMatMulBatchCrossover;
}

KernelDef matmul_kernel(const char* op, const char* impl, bool always_sparse, int priority) {
  KernelDef def;
  def.op = op;
  def.impl = impl;
  def.priority = priority;
  def.accepts = accepts;
  def.create = [always_sparse](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<SparseMatMulKernel>(spec, always_sparse ? 0.0 : crossover(spec));
  };
  return def;
}

}  // namespace

void register_matmul_kernels(KernelRegistry& registry) {
  for (const char* op : {"MatMul", "FusedMatMul"}) {
    registry.add(matmul_kernel(op, "sparse", false, kPriority));
    registry.add(matmul_kernel(op, "sparse_only", true, 1));
  }
}

}  // namespace sf::sparse
