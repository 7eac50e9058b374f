// Sparse MatMul / FusedMatMul: y [M, N] = a [M, K] * W [K, N] (+ bias, activation), W frozen and
// held as the CSR of W^T (one row of nonzeros per output n), or, when its nonzeros come in blocks
// of R adjacent outputs (prune --block R), as block strips (sparse_weights.h).
//
// CSR, one row of a (batch 1): each output is a sparse dot product with a; nothing to reuse.
// CSR, more rows: a block of up to 128 rows is transposed to aT [K, rows], so a nonzero (k, n, v)
// adds v * aT[k, :] to the column of y for output n: one weight load serves the whole block.
// Blocks: each strip of R outputs is a sum of a[:, k] times the R values of its blocks
// (block_product.h), for batch 1 and for batches alike.
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cpu/parallel_for.h"
#include "kernels/kernel.h"
#include "kernels/sparse/block_product.h"
#include "kernels/sparse/sparse_accumulate.h"
#include "kernels/sparse/sparse_kernels.h"
#include "kernels/sparse/sparse_weights.h"
#include "ops/op_names.h"

namespace sf::sparse {

namespace {

// Rows of a per transposed block: 8 AVX-512 vectors of sums per output.
constexpr int64_t kRowBlock = 128;
// Output columns computed together and written row by row: a column of y alone is written with
// a stride of N floats, which for N = 1024 maps every store to the same L1 set.
constexpr int64_t kColumnTile = 16;

// The widest block: the most sums one strip writes per row.
constexpr int64_t kWidestBlock = kBlockWidths[0];

class SparseMatMulKernel : public SparseKernel {
 public:
  // `threshold` is CSR's crossover, 0 to never fall back to dense.
  SparseMatMulKernel(const KernelSpec& spec, double threshold)
      : SparseKernel(spec, threshold),
        batch1_(spec.inputs[0].shape[0] == 1),
        transpose_b_(spec.node.attrs.get_bool("transpose_b")),
        activation_(activation_of(spec.node)),
        k_(spec.inputs[0].shape[1]),
        n_(spec.node.outputs[0].shape[1]) {}

  std::string running_impl() const override {
    if (path() == Path::Sparse && block_ > 1) return "block" + std::to_string(block_);
    return SparseKernel::running_impl();
  }

 protected:
  // The form of the weights that should run fastest: CSR, or the block width whose blocks
  // store few enough weights more than the nonzeros to make up for their cheaper loop (each
  // form's time taken as proportional to what it stores). It then runs only at or above its own
  // crossover; below, the dense kernel runs.
  bool sparse_pays(const Tensor& weights) override {
    const double density = 1.0 - weight_sparsity();
    const double total = static_cast<double>(k_ * n_);
    block_ = 1;
    double best = density;  // in units of CSR's time per nonzero
    double block_sparsity = 0.0, block_crossover = 0.0;
    for (const BlockForm& f : kBlockMatMulForms) {
      const double cost = batch1_ ? f.row_cost : f.batch_cost;
      // Blocks store at least the nonzeros: no need to count them when that already loses.
      if (density * cost >= best) continue;
      const int64_t blocks = nonzero_blocks(weights.data<float>(), k_, n_, transpose_b_, f.block);
      const double stored = static_cast<double>(blocks * f.block) / total;
      if (stored * cost < best) {
        best = stored * cost;
        block_ = f.block;
        block_sparsity = 1.0 - static_cast<double>(blocks) /
                                   static_cast<double>(k_ * ((n_ + f.block - 1) / f.block));
        block_crossover = batch1_ ? f.row_crossover : f.batch_crossover;
      }
    }
    if (threshold() == 0.0) return true;
    return block_ > 1 ? block_sparsity >= block_crossover : weight_sparsity() >= threshold();
  }

  void prepare(const Tensor& weights) override {
    if (block_ > 1) {
      blocks_ = block_csr_of_weights(weights.data<float>(), k_, n_, transpose_b_, block_);
      csr_ = {};
    } else {
      csr_ = csr_of_weights(weights.data<float>(), k_, n_, transpose_b_);
      blocks_ = {};
    }
  }

  void compute_sparse(KernelContext& ctx) override {
    const float* bias = ctx.inputs.size() > 2 ? ctx.inputs[2].data<float>() : nullptr;
    if (block_ > 1)
      std::visit([&](const auto& w) { run_blocks(w, ctx.inputs[0], bias, ctx.outputs[0]); },
                 blocks_);
    else
      std::visit([&](const auto& csr) { run(csr, ctx.inputs[0], bias, ctx.outputs[0]); }, csr_);
  }

 private:
  template <typename Index>
  void run_blocks(const BlockCsr<Index>& w, const Tensor& a_tensor, const float* bias,
                  Tensor& y_tensor) const {
    const float* a = a_tensor.data<float>();
    float* y = y_tensor.data<float>();
    const int64_t m = a_tensor.shape()[0];
    const int64_t k = k_, n = n_, r = w.block;
    const Activation act = activation_;
    const BlockStripFn<Index> strip = best_block_strip<Index>(r);
    const int64_t chunks = (m + kRowBlock - 1) / kRowBlock;
    parallel_for(
        0, w.strips * chunks, w.blocks() * r * m > 4096,
        [&](int64_t share_begin, int64_t share_end) {
          for (int64_t flat = share_begin; flat < share_end; ++flat) {
            const int64_t s = flat / chunks;
            const int64_t c = flat % chunks;
            {
              const int64_t row0 = c * kRowBlock;
              const int64_t rows = std::min(kRowBlock, m - row0);
              const int64_t begin = w.strip_start[static_cast<size_t>(s)];
              float sums[kRowBlock * kWidestBlock];
              strip(w.row.data() + begin, w.value.data() + begin * r,
                    w.strip_start[static_cast<size_t>(s + 1)] - begin, a + row0 * k, k, rows, sums);
              const int64_t col0 = s * r;
              const int64_t cols = std::min(r, n - col0);
              for (int64_t i = 0; i < rows; ++i)
                for (int64_t j = 0; j < cols; ++j) {
                  const float sum = sums[i * r + j];
                  y[(row0 + i) * n + col0 + j] = activate(bias ? sum + bias[col0 + j] : sum, act);
                }
            }
          }
        });
  }

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
      parallel_for(0, n, csr.nonzeros() > 4096, [&](int64_t share_begin, int64_t share_end) {
        for (int64_t col = share_begin; col < share_end; ++col) {
          const int64_t begin = csr.row_start[col];
          const int64_t count = csr.row_start[col + 1] - begin;
          y[col] =
              finish(sparse_dot(csr.col.data() + begin, csr.value.data() + begin, count, a), col);
        }
      });
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
      parallel_region(true, [&] {
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
      });
    }
  }

  bool batch1_;
  bool transpose_b_;
  Activation activation_;
  int64_t k_, n_;
  int64_t block_ = 1;  // the form chosen: 1 for CSR, else the block width
  AnyCsr csr_;
  AnyBlockCsr blocks_;
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
  for (const char* op : {op_names::kMatMul, op_names::kFusedMatMul}) {
    registry.add(matmul_kernel(op, "sparse", false, kPriority));
    registry.add(matmul_kernel(op, "sparse_only", true, kOnlyWhenAskedPriority));
  }
}

}  // namespace sf::sparse
