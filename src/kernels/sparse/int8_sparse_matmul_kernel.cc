// Sparse int8 MatMul: QuantizedMatMul and QuantizedMatMulRequantized (what `quantize --mode
// eightbit` makes of a MatMul) whose i8 weights W [K, N] (input 2) are a Const with many zeros,
// as a pruned model's are: a zero weight quantizes to exactly 0. The sparse loops
// (int8_sparse_product.h) multiply raw codes; the zero point's offset and the requantization are
// int8_outputs.h's, computed once per weights and params, so the output equals the reference
// kernel's exactly.
//
// The weights are held as the CSR of W^T (one row of nonzeros per output, as the fp32 kernel
// holds them) or, on CPUs with AVX-512 VNNI and weights pruned in blocks of 16 outputs, as quads
// of such blocks that one vpdpbusd each multiplies (int8_sparse_product.h). CSR runs batch 1 as a
// sparse dot product per output and batches on a transposed block of rows; quads run row by row.
#include <omp.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cpu/parallel_for.h"
#include "kernels/kernel.h"
#include "kernels/sparse/int8_outputs.h"
#include "kernels/sparse/int8_sparse_product.h"
#include "kernels/sparse/sparse_kernels.h"
#include "kernels/sparse/sparse_weights.h"
#include "ops/op_names.h"

namespace sf::sparse {

namespace {

constexpr size_t kWeightInput = 2;  // (a, a_params, b, b_scales, bias[, out_params])

// Crossovers against oneDNN's dense int8 kernel (see sparse_kernels.h for the fp32 ones), measured
// on fc1 (3136 x 1024, QuantizedMatMulRequantized) with
//   OMP_NUM_THREADS=1 build/hA/bench/kernel_bench --benchmark_filter='^sparse_int8/'
//       --benchmark_repetitions=3   (median CPU time)
// on the 2-core development machine (AMD EPYC, AVX-512 VNNI) while other builds ran (load
// average near 4), so the figures are rough:
//
// Batch 1 (dense 44-52 us): CSR takes 295 / 164 / 97 / 44 us at 80 / 90 / 95 / 98%, crossing at
// 98%: an int8 weight saves oneDNN more than it saves the sparse dot product, whose three loads
// per nonzero stay. Quads of blocks of 16 take 64 / 34 / 27 / 18 us at 50 / 70 / 80 / 90% of zero
// blocks (51 / 30 / 22 / 20 / 14 us at 50 / 70 / 80 / 90 / 95% in a second run), crossing at
// 55-60%; per stored weight 0.08-0.11 of CSR's time per nonzero.
// Batch 64 (dense 515-603 us): CSR takes 2.5 / 1.6 ms at 90 / 98% and never wins, so only
// all-zero weights run it; quads take 1.44 ms / 814 / 449 us at 80 / 90 / 95% and cross near
// 93%, per stored weight 0.07 of CSR's time per nonzero.
inline constexpr double kRowCrossover = 0.98;
inline constexpr double kBatchCrossover = 1.0;
// The quad form of weights pruned in blocks of 16 outputs: the fraction of zero blocks from which
// it beats the dense kernel, and its time per stored weight (every weight of a nonzero block)
// relative to CSR's time per nonzero, which decides between the two forms. Unstructured weights
// store most of their blocks (90%: 81%), and on VNNI CPUs still run fastest as quads, which then
// lose to the dense kernel.
struct QuadForm {
  double row_crossover, batch_crossover;  // batch 1; more rows
  double row_cost, batch_cost;            // CSR's per nonzero = 1
};
inline constexpr QuadForm kQuadForm = {0.6, 0.93, 0.1, 0.07};

// Rows of a per transposed block.
constexpr int64_t kRowBlock = 64;
// Output columns computed together and written row by row, as in the fp32 kernel: a column of
// the accumulators alone is written with a stride of N, which maps many stores to one L1 set.
constexpr int64_t kColumnTile = 16;
// Below this many multiply-adds, threads cost more than they save.
constexpr int64_t kParallelWork = 4096;

class Int8SparseMatMulKernel : public SparseKernel {
 public:
  // `threshold` is CSR's crossover, 0 to never fall back to dense.
  Int8SparseMatMulKernel(const KernelSpec& spec, double threshold, bool requantized)
      : SparseKernel(spec, threshold, kWeightInput),
        requantized_(requantized),
        outputs_(requantized),
        batch1_(spec.inputs[0].shape[0] == 1),
        constant_args_(spec.input_is_constant(1) && spec.input_is_constant(3) &&
                       spec.input_is_constant(4) && (!requantized || spec.input_is_constant(5))),
        k_(spec.inputs[0].shape[1]),
        n_(spec.node.outputs[0].shape[1]),
        name_(spec.node.name),
        op_(spec.node.op) {
    if (requantized_) acc_.resize(static_cast<size_t>(num_elements(spec.node.outputs[0].shape)));
  }

  std::string running_impl() const override {
    if (path() == Path::Sparse && use_quads_) return "block" + std::to_string(kQuadBlock);
    return SparseKernel::running_impl();
  }

 protected:
  bool sparse_pays(const Tensor& weights) override {
    const QuadFigures quads = batch1_
                                  ? QuadFigures{kQuadForm.row_cost, kQuadForm.row_crossover}
                                  : QuadFigures{kQuadForm.batch_cost, kQuadForm.batch_crossover};
    Int8SparseChoice choice = choose_int8_sparse_form(
        weights.data<int8_t>(), k_, n_, weight_sparsity(), threshold(), quads, name_, op_);
    weight_sums_ = std::move(choice.weight_sums);
    use_quads_ = choice.use_quads;
    return choice.sparse;
  }

  void prepare(const Tensor& weights) override {
    const int8_t* w = weights.data<int8_t>();
    if (use_quads_) {
      quads_ = quads_of(block_csr_of_weights(w, k_, n_, false, kQuadBlock));
      csr_ = {};
    } else {
      csr_ = csr_of_weights(w, k_, n_, false);
      quads_ = {};
    }
    args_ready_ = false;
  }

  void compute_sparse(KernelContext& ctx) override {
    if (!args_ready_ || !constant_args_) outputs_.read(ctx, weight_sums_);
    args_ready_ = true;
    int32_t* acc = requantized_ ? acc_.data() : ctx.outputs[0].data<int32_t>();
    const Tensor& a = ctx.inputs[0];
    if (use_quads_)
      run_quads(a, acc);
    else
      std::visit([&](const auto& csr) { run(csr, a, acc); }, csr_);
    if (requantized_) outputs_.requantize(acc, a.dim(0), ctx.outputs[0].data<uint8_t>());
  }

 private:
  void run_quads(const Tensor& a_tensor, int32_t* acc) const {
    const uint8_t* a = a_tensor.data<uint8_t>();
    const int64_t m = a_tensor.dim(0);
    const int64_t k = k_, n = n_;
    const BlockQuads& w = quads_;
    const QuadStripFn strip = best_quad_strip();
    parallel_for(0, w.strips, w.quads() * kQuadDepth * kQuadBlock * m > kParallelWork,
                 [&](int64_t share_begin, int64_t share_end) {
                   for (int64_t s = share_begin; s < share_end; ++s) {
                     const int64_t begin = w.strip_start[static_cast<size_t>(s)];
                     const int64_t quads = w.strip_start[static_cast<size_t>(s + 1)] - begin;
                     const int64_t col0 = s * kQuadBlock;
                     const int64_t cols = std::min(kQuadBlock, n - col0);
                     for (int64_t r = 0; r < m; ++r) {
                       int32_t sums[kQuadBlock];
                       strip(w.rows.data() + begin * kQuadDepth,
                             w.values.data() + begin * kQuadDepth * kQuadBlock, quads, a + r * k,
                             sums);
                       for (int64_t j = 0; j < cols; ++j)
                         acc[r * n + col0 + j] = outputs_.accumulator(sums[j], col0 + j);
                     }
                   }
                 });
  }

  template <typename Index>
  void run(const CsrMatrix<Index, int8_t>& csr, const Tensor& a_tensor, int32_t* acc) {
    const uint8_t* a = a_tensor.data<uint8_t>();
    const int64_t m = a_tensor.dim(0);
    const int64_t k = k_, n = n_;
    if (m == 1) {
      parallel_for(
          0, n, csr.nonzeros() > kParallelWork, [&](int64_t share_begin, int64_t share_end) {
            for (int64_t col = share_begin; col < share_end; ++col) {
              const int64_t begin = csr.row_start[static_cast<size_t>(col)];
              const int64_t count = csr.row_start[static_cast<size_t>(col + 1)] - begin;
              acc[col] = outputs_.accumulator(
                  sparse_dot_u8(csr.col.data() + begin, csr.value.data() + begin, count, a), col);
            }
          });
      return;
    }
    const Int8AccumulateFn<Index> accumulate = best_int8_accumulate<Index>();
    const int64_t block = std::min(m, kRowBlock);
    a_t_.resize(static_cast<size_t>(k * block));
    tiles_.resize(static_cast<size_t>(omp_get_max_threads() * block * kColumnTile));
    const int64_t tiles = (n + kColumnTile - 1) / kColumnTile;
    for (int64_t row0 = 0; row0 < m; row0 += block) {
      const int64_t rows = std::min(block, m - row0);
      uint8_t* a_t = a_t_.data();
      parallel_region(true, [&] {
#pragma omp for schedule(static)
        for (int64_t kk = 0; kk < k; ++kk)
          for (int64_t r = 0; r < rows; ++r) a_t[kk * rows + r] = a[(row0 + r) * k + kk];
        int32_t* tile = tiles_.data() + omp_get_thread_num() * block * kColumnTile;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t col0 = t * kColumnTile;
          const int64_t cols = std::min(kColumnTile, n - col0);
          for (int64_t c = 0; c < cols; ++c) {
            const int64_t begin = csr.row_start[static_cast<size_t>(col0 + c)];
            accumulate(a_t, csr.col.data() + begin, rows, csr.value.data() + begin,
                       csr.row_start[static_cast<size_t>(col0 + c + 1)] - begin, rows,
                       tile + c * rows);
          }
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
              acc[(row0 + r) * n + col0 + c] = outputs_.accumulator(tile[c * rows + r], col0 + c);
        }
      });
    }
  }

  bool requantized_;
  Int8Outputs outputs_;
  bool batch1_;
  bool constant_args_;  // params and bias are Consts: read once per weights
  int64_t k_, n_;
  std::string name_, op_;  // the node's, for errors
  bool use_quads_ = false;
  AnyInt8Csr csr_;
  BlockQuads quads_;
  std::vector<int64_t> weight_sums_;  // sum over k of W[k, n]
  bool args_ready_ = false;
  std::vector<int32_t> acc_;    // the accumulators of the requantized form
  std::vector<uint8_t> a_t_;    // one transposed block of a
  std::vector<int32_t> tiles_;  // per thread: kColumnTile outputs of the block
};

bool accepts(const KernelSpec& spec) {
  if (spec.inputs.size() < 5 || !spec.input_is_constant(kWeightInput)) return false;
  const TensorType& a = spec.inputs[0];
  const TensorType& w = spec.inputs[kWeightInput];
  return a.dtype == DType::u8 && w.dtype == DType::i8 && a.shape.size() == 2 &&
         w.shape.size() == 2 && num_elements(a.shape) > 0 && num_elements(w.shape) > 0;
}

KernelDef int8_matmul_kernel(const char* op, bool requantized, const char* impl, bool always_sparse,
                             int priority) {
  KernelDef def;
  def.op = op;
  def.dtype = DType::u8;
  def.impl = impl;
  def.priority = priority;
  def.accepts = accepts;
  def.create = [requantized, always_sparse](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    const double threshold = always_sparse                  ? 0.0
                             : spec.inputs[0].shape[0] == 1 ? kRowCrossover
                                                            : kBatchCrossover;
    return std::make_unique<Int8SparseMatMulKernel>(spec, threshold, requantized);
  };
  return def;
}

}  // namespace

void register_int8_matmul_kernels(KernelRegistry& registry) {
  for (const auto& [op, requantized] : {std::pair{op_names::kQuantizedMatMul, false},
                                        std::pair{op_names::kQuantizedMatMulRequantized, true}}) {
    registry.add(int8_matmul_kernel(op, requantized, "sparse", false, kPriority));
    registry.add(int8_matmul_kernel(op, requantized, "sparse_only", true, kOnlyWhenAskedPriority));
  }
}

}  // namespace sf::sparse
