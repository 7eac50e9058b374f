// Sparse kernels for pruned inference graphs: fp32 FusedMatMul, MatMul and FusedConv2D whose
// weights (input 1) are Const tensors with many exact zeros, and int8 QuantizedMatMul(Requantized)
// and QuantizedConv2D(Requantized) whose i8 weights (input 2) are (int8_sparse_matmul_kernel.cc,
// int8_sparse_conv_kernel.cc).
//
// A KernelSpec says only that the weights are constant, not what they hold, so the choice
// between the sparse and the dense product is made at run time: the first compute() (and any
// compute that sees a different weight buffer) counts the zeros and takes the sparse path only
// at or above the measured crossover for the op and shape class; otherwise it runs the dense
// kernel created with it. Impl "sparse" (priority above oneDNN) decides that way;
// "sparse_only" always takes the sparse path, so tests can check it at any sparsity.
#pragma once

#include <memory>
#include <string>

#include "kernels/kernel.h"

namespace sf {

class KernelRegistry;

namespace sparse {

// Above oneDNN (priority 10): the sparse kernels see frozen weights first and hand dense ones
// back to the kernel the registry ranks next (oneDNN's where it accepts).
inline constexpr int kPriority = 20;
// "sparse_only" runs only when asked for by name: it ranks below the reference kernels (0), so
// it is never the next choice after "sparse".
inline constexpr int kOnlyWhenAskedPriority = -1;

// Crossovers: the fraction of zero weights from which the sparse product beats oneDNN's dense
// one on the Deep-MNIST layers, measured with
//   OMP_NUM_THREADS=1 build/qd/bench/kernel_bench --benchmark_filter='^sparse/'
//       --benchmark_repetitions=5   (best CPU time of the repetitions)
// on the 2-core development machine (AMD EPYC, AVX-512; other builds were running, so CPU time
// with one thread was the stable figure; quiet 2-thread runs agreed). Interpolated between the
// bench's 70/80/90% cases:
//
// Batch-1 MatMul (a sparse dot product per output): fc1 3136x1024 at batch 1 crosses at 83-86%
// (dense 164 us; sparse 227 us at 80%, 115 us at 90%; 2 threads: 109 us vs 126 / 62 us).
inline constexpr double kMatMulRowCrossover = 0.85;
// MatMul with a batch of rows (each nonzero scales a row of the transposed input): fc1 at
// batch 64 crosses at 78-80% (dense 2188 us; sparse 2169 us at 80%, 970 us at 90%).
inline constexpr double kMatMulBatchCrossover = 0.8;
// Conv2D (each nonzero tap scales a run of the padded, stride-split input): conv2 (14x14x32,
// 5x5x32x64, SAME) crosses at 77-79% at batch 1 (dense 83 us; sparse 78 us at 80%) and at
// batch 64 (dense 5654 us; sparse 4876 us at 80%, 7802 us at 70%); rounded up to 80%. Strided,
// dilated and other shapes were not measured and use the same constant.
inline constexpr double kConvCrossover = 0.8;

// Whether a sparse conv (fp32 or int8) can beat oneDNN's dense one on this HWIO filter at some
// sparsity: not on a 1x1 filter, where each output takes one tap per input channel and the
// split layout, the per-channel runs and the output transposes cost more than the zeros save.
// oneDNN stayed ahead at every sparsity measured, up to 98% (kernel_bench sparse/pointwise*
// and sparse_int8/pointwise*, one thread): fp32 14x14 16->32 at batch 1 2.1 vs 4.5 us, at
// batch 64 72 vs 281 us, 64->384 45 vs 51 us at 95%; int8 64->384 16 vs 39 us (CSR at 98%) and
// 33.5 us (blocks of 16 at 95%). Impl "sparse" declines such convs; "sparse_only" still runs them.
inline bool sparse_conv_can_pay(const Shape& filter) { return filter[0] != 1 || filter[1] != 1; }

// Block-sparse MatMul (weights pruned in blocks of R adjacent outputs, sparse_weights.h), per
// block width: the fraction of zero blocks from which the block product beats oneDNN, and its
// time per stored weight (every weight of a nonzero block) relative to the CSR product's time
// per nonzero, which decides between the two forms. Measured with
//   OMP_NUM_THREADS=1 build/hE/bench/kernel_bench --benchmark_filter='^sparse/fc1'
//       --benchmark_repetitions=5   (median CPU time)
// on the same machine while other builds ran (load average 6-7 on its 2 cores), on fc1
// 3136x1024 with hashed block patterns (sparse/fc1_*/sparse_only/block<R>/<percent>):
//
// Batch 1 (dense 200 us): block 16 and 8 win from the lowest sparsity measured, 30% (169 and
// 174 us), block 4 crosses at 43% (240 us at 30%, 177 us at 50%). At 90% they take 22.5, 26.1
// and 36.7 us where CSR takes 80 us: per stored weight 0.28, 0.33 and 0.46 of CSR's per nonzero
// (0.28, 0.33, 0.44 at 95%).
// Batch 64 (dense 2234 us): block 16 crosses at 55% (2538 us at 50%, 1224 us at 70%), block 8 at
// 68% (4044 / 2066 us at 50 / 70%), block 4 at 82% (2409 / 1494 us at 80 / 90%). At 90%: 605,
// 843 and 1494 us against CSR's 2535 us: 0.24, 0.33 and 0.59 (0.26, 0.31, 0.66 at 95%).
// Unstructured weights store several times their nonzeros as blocks (random 90%: 3.4x in blocks
// of 4), so they stay CSR; block-pruned ones store exactly their nonzeros and run as blocks.
struct BlockForm {
  int64_t block;
  double row_crossover, batch_crossover;  // batch 1; more rows
  double row_cost, batch_cost;            // per stored weight, CSR's per nonzero = 1
};
inline constexpr BlockForm kBlockMatMulForms[] = {
    {16, 0.3, 0.55, 0.28, 0.26}, {8, 0.3, 0.7, 0.33, 0.33}, {4, 0.45, 0.85, 0.46, 0.66}};

// The base of the sparse kernels: owns the run-time choice and the dense fallback.
class SparseKernel : public Kernel {
 public:
  enum class Path { Undecided, Sparse, Dense };

  void compute(KernelContext& ctx) override;

  // Which product the last compute() ran, and the weight sparsity it was chosen on.
  Path path() const { return path_; }
  double weight_sparsity() const { return sparsity_; }
  double threshold() const { return threshold_; }
  // "dense" on the dense path, followed by what the dense kernel names (oneDNN's convolution).
  std::string running_impl() const override;

 protected:
  // `threshold` 0 always takes the sparse path; otherwise `spec` is handed to the dense kernel
  // (the best one ranked below kPriority: oneDNN's where it accepts), created here so that
  // compute() never plans anything. The weights are input `weight_input`, f32 or i8.
  SparseKernel(const KernelSpec& spec, double threshold, size_t weight_input = 1);

  // Whether the sparse path should run these weights, whose zero fraction weight_sparsity()
  // holds: by default at or above the threshold.
  virtual bool sparse_pays(const Tensor& weights);
  // Builds the sparse form of the weights when sparse_pays() chose it.
  virtual void prepare(const Tensor& weights) = 0;
  virtual void compute_sparse(KernelContext& ctx) = 0;

 private:
  double threshold_;
  size_t weight_input_;
  std::unique_ptr<Kernel> dense_;
  const void* decided_for_ = nullptr;
  Path path_ = Path::Undecided;
  double sparsity_ = 0.0;
};

void register_matmul_kernels(KernelRegistry& registry);
void register_conv_kernels(KernelRegistry& registry);
void register_int8_matmul_kernels(KernelRegistry& registry);
void register_int8_conv_kernels(KernelRegistry& registry);

// The activations FusedConv2D and FusedMatMul apply after the bias.
inline float activate(float v, Activation a) {
  if (a == Activation::None) return v;
  v = v > 0.0f ? v : 0.0f;
  return a == Activation::Relu6 && v > 6.0f ? 6.0f : v;
}

}  // namespace sparse
}  // namespace sf
