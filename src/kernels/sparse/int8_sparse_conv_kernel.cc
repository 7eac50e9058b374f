// Sparse int8 Conv2D: QuantizedConv2D and QuantizedConv2DRequantized (groups 1) whose HWIO i8
// filter (input 2) is a Const with many zeros, as a pruned model's is. The filter read as
// W [KH * KW * CI, CO] is held in the int8 MatMul kernel's forms (CSR per output channel, or
// quads of blocks of 16 output channels on VNNI CPUs), each tap k = (kh, kw, ci) turned into an
// offset into the input's split layout (split_layout.h), padded with the input zero point.
//
// The loops multiply raw codes; a padded position holds the zero point's code, so it adds
// zero_point * w, which the offset of int8_outputs.h (bias_q - zero_point * sum of the channel's
// weights) takes away again: padding contributes exactly the reference's real zero, and the
// requantized outputs equal the reference's.
//
// CSR computes each output channel as one sum of scaled contiguous runs over the whole image
// (as the fp32 kernel does); quads compute the 16 channels of a strip over the same runs, 16
// positions at a time (int8_sparse_product.h).
#include <omp.h>

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cpu/parallel_for.h"
#include "kernels/kernel.h"
#include "kernels/sparse/int8_outputs.h"
#include "kernels/sparse/int8_sparse_product.h"
#include "kernels/sparse/sparse_kernels.h"
#include "kernels/sparse/sparse_weights.h"
#include "kernels/sparse/split_layout.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf::sparse {

namespace {

constexpr size_t kWeightInput = 2;  // (x, x_params, w, w_scales, bias[, out_params])

// Crossovers against oneDNN's dense int8 conv, measured on conv2 of Deep-MNIST (14x14x32,
// 5x5x32x64, SAME, QuantizedConv2DRequantized) with
//   OMP_NUM_THREADS=1 build/hC/bench/kernel_bench --benchmark_filter='^sparse_int8/conv2'
//       --benchmark_repetitions=3   (median CPU time)
// on the 2-core development machine (AMD EPYC, AVX-512 VNNI) while other builds ran (load
// average 2-3), so the figures are rough; two runs at batch 1 are given:
//
// Batch 1 (dense 23.4 / 26.9 us): CSR takes 60 / 45 / 30 / 21.8 / 18.8 us (90 / 66 / 43.5 /
// 32.2 / 25.4 us) at 70 / 80 / 90 / 95 / 98%, crossing at 95-97%; quads of blocks of 16 take
// 74 / 62 / 44 / 36 / 28.4 / 23.7 us at 30 / 50 / 70 / 80 / 90 / 95% of zero blocks (second
// run), crossing near 93%.
// Batch 64 (dense 1629 us): CSR 3071 / 2119 / 1356 us at 90 / 95 / 98%, crossing near 97%;
// quads 2477 / 1806 / 1483 us at 80 / 90 / 95%, crossing near 93%.
// Dense int8 is hard to beat here: oneDNN runs conv2 near the VNNI peak, and about 15 us of the
// sparse kernel's time goes to what any sparsity leaves (splitting the input, the output
// transposes, the requantization). Strides and dilations were not measured and use the same
// constants.
//
// CSR: the fraction of zero weights from which it beats the dense kernel.
inline constexpr double kCsrCrossover = 0.97;
// The quad form of filters pruned in blocks of 16 output channels: the fraction of zero blocks
// from which it beats the dense kernel, and its time per stored weight (every weight of a
// nonzero block) relative to CSR's time per nonzero, which decides between the two forms: the
// slopes of the batch-1 figures, 101 us per unit of stored weights against 152 per unit of
// nonzeros. Unstructured filters store most of their blocks (90%: 81%) and so run as CSR.
struct QuadConvForm {
  double crossover, cost;
};
inline constexpr QuadConvForm kQuadConvForm = {0.93, 0.65};

// Output channels computed together by CSR, so that each pixel's outputs are written as one run.
constexpr int64_t kChannelTile = 16;
// Below this many multiply-adds, threads cost more than they save.
constexpr int64_t kParallelWork = 16384;

class Int8SparseConvKernel : public SparseKernel {
 public:
  // `threshold` is CSR's crossover, 0 to never fall back to dense.
  Int8SparseConvKernel(const KernelSpec& spec, double threshold, bool requantized)
      : SparseKernel(spec, threshold, kWeightInput),
        requantized_(requantized),
        outputs_(requantized),
        constant_args_(spec.input_is_constant(1) && spec.input_is_constant(3) &&
                       spec.input_is_constant(4) && (!requantized || spec.input_is_constant(5))),
        geometry_(
            conv_window(spec.node.attrs, spec.inputs[0].shape, spec.inputs[kWeightInput].shape)),
        filter_shape_(spec.inputs[kWeightInput].shape),
        layout_(geometry_, spec.inputs[0].shape[3], filter_shape_[0], filter_shape_[1]),
        taps_(filter_shape_[0] * filter_shape_[1] * filter_shape_[2]),
        channels_(filter_shape_[3]),
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
    Int8SparseChoice choice = choose_int8_sparse_form(
        weights.data<int8_t>(), taps_, channels_, weight_sparsity(), threshold(),
        {kQuadConvForm.cost, kQuadConvForm.crossover}, name_, op_);
    weight_sums_ = std::move(choice.weight_sums);
    use_quads_ = choice.use_quads;
    return choice.sparse;
  }

  void prepare(const Tensor& weights) override {
    const int8_t* w = weights.data<int8_t>();
    if (use_quads_) {
      quads_ = quads_of(block_csr_of_weights(w, taps_, channels_, false, kQuadBlock));
      for (uint32_t& row : quads_.rows) row = tap_offset(row);
      return;
    }
    quads_ = {};
    std::visit(
        [&](const auto& csr) {
          channel_start_ = csr.row_start;
          values_ = csr.value;
          offsets_.resize(csr.col.size());
          for (size_t j = 0; j < offsets_.size(); ++j) offsets_[j] = tap_offset(csr.col[j]);
        },
        csr_of_weights(w, taps_, channels_, false));
  }

  void compute_sparse(KernelContext& ctx) override {
    if (!args_ready_ || !constant_args_) outputs_.read(ctx, weight_sums_);
    args_ready_ = true;
    const Tensor& x = ctx.inputs[0];
    const int64_t batch = x.shape()[0];
    split_.resize(static_cast<size_t>(batch * layout_.image()));
    const auto pad = static_cast<uint8_t>(outputs_.x_zero_point());
    for (int64_t b = 0; b < batch; ++b)
      layout_.split_image(x, b, geometry_, pad, split_.data() + b * layout_.image());
    int32_t* acc = requantized_ ? acc_.data() : ctx.outputs[0].data<int32_t>();
    if (use_quads_)
      run_quads(batch, acc);
    else
      run_csr(batch, acc);
    if (requantized_)
      outputs_.requantize(acc, batch * layout_.out_h * layout_.out_w,
                          ctx.outputs[0].data<uint8_t>());
  }

 private:
  // Where tap k = (kh * KW + kw) * CI + ci of the filter starts in the split layout.
  uint32_t tap_offset(int64_t k) const {
    const int64_t ci = filter_shape_[2], kw = filter_shape_[1];
    return static_cast<uint32_t>(layout_.tap_offset(k / ci / kw, k / ci % kw, k % ci, geometry_));
  }

  void run_csr(int64_t batch, int32_t* acc) {
    const Int8AccumulateFn<uint32_t> accumulate = best_int8_run_accumulate();
    const int64_t run = layout_.run_length();
    const int64_t out_h = layout_.out_h, out_w = layout_.out_w, channels = channels_;
    const int64_t tiles = (channels + kChannelTile - 1) / kChannelTile;
    sums_.resize(static_cast<size_t>(omp_get_max_threads() * kChannelTile * run));
    parallel_region(static_cast<int64_t>(values_.size()) * run * batch > kParallelWork, [&] {
      int32_t* sums = sums_.data() + omp_get_thread_num() * kChannelTile * run;
#pragma omp for collapse(2) schedule(static)
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t co0 = t * kChannelTile;
          const int64_t width = std::min(kChannelTile, channels - co0);
          for (int64_t c = 0; c < width; ++c) {
            const int64_t begin = channel_start_[static_cast<size_t>(co0 + c)];
            accumulate(split_.data() + b * layout_.image(), offsets_.data() + begin, 1,
                       values_.data() + begin,
                       channel_start_[static_cast<size_t>(co0 + c + 1)] - begin, run,
                       sums + c * run);
          }
          int32_t* image = acc + b * out_h * out_w * channels + co0;
          for (int64_t oh = 0; oh < out_h; ++oh)
            outputs_.accumulators(sums + layout_.run_index(oh, 0), 1, run, out_w, co0, width,
                                  image + oh * out_w * channels, channels);
        }
    });
  }

  void run_quads(int64_t batch, int32_t* acc) {
    const BlockQuads& w = quads_;
    const QuadRunsFn quad_runs = best_quad_runs();
    const int64_t run = layout_.run_length();
    const int64_t out_h = layout_.out_h, out_w = layout_.out_w, channels = channels_;
    sums_.resize(static_cast<size_t>(omp_get_max_threads() * run * kQuadBlock));
    parallel_region(w.quads() * kQuadDepth * kQuadBlock * run * batch > kParallelWork, [&] {
      int32_t* sums = sums_.data() + omp_get_thread_num() * run * kQuadBlock;
#pragma omp for collapse(2) schedule(static)
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t s = 0; s < w.strips; ++s) {
          const int64_t begin = w.strip_start[static_cast<size_t>(s)];
          quad_runs(w.rows.data() + begin * kQuadDepth,
                    w.values.data() + begin * kQuadDepth * kQuadBlock,
                    w.strip_start[static_cast<size_t>(s + 1)] - begin,
                    split_.data() + b * layout_.image(), run, sums);
          const int64_t co0 = s * kQuadBlock;
          const int64_t width = std::min(kQuadBlock, channels - co0);
          int32_t* image = acc + b * out_h * out_w * channels + co0;
          for (int64_t oh = 0; oh < out_h; ++oh)
            outputs_.accumulators(sums + layout_.run_index(oh, 0) * kQuadBlock, kQuadBlock, 1,
                                  out_w, co0, width, image + oh * out_w * channels, channels);
        }
    });
  }

  bool requantized_;
  Int8Outputs outputs_;
  bool constant_args_;  // params and bias are Consts: read once per weights
  Window2D geometry_;
  Shape filter_shape_;
  SplitLayout layout_;
  int64_t taps_;                      // KH * KW * CI: the rows of W
  int64_t channels_;                  // CO
  std::string name_, op_;             // the node's, for errors
  std::vector<int64_t> weight_sums_;  // per output channel
  bool args_ready_ = false;
  bool use_quads_ = false;
  // CSR: per output channel, its nonzero taps' offsets into the layout and their values.
  std::vector<int64_t> channel_start_;
  std::vector<uint32_t> offsets_;
  std::vector<int8_t> values_;
  // Quads, their rows turned into offsets into the layout.
  BlockQuads quads_;
  std::vector<uint8_t> split_;  // the split layout of every image of the batch
  // Per thread: the sums of kChannelTile (CSR) or kQuadBlock (quads) channels over one image.
  std::vector<int32_t> sums_;
  std::vector<int32_t> acc_;  // the accumulators of the requantized form
};

bool accepts(const KernelSpec& spec) {
  if (spec.inputs.size() < 5 || !spec.input_is_constant(kWeightInput)) return false;
  const TensorType& x = spec.inputs[0];
  const TensorType& w = spec.inputs[kWeightInput];
  if (x.dtype != DType::u8 || w.dtype != DType::i8 || x.shape.size() != 4 || w.shape.size() != 4)
    return false;
  if (num_elements(x.shape) == 0 || num_elements(w.shape) == 0 ||
      num_elements(spec.node.outputs[0].shape) == 0)
    return false;
  // Grouped and depthwise convs stay dense.
  if (spec.node.attrs.get_int("groups") != 1 || w.shape[2] != x.shape[3]) return false;
  const SplitLayout layout(conv_window(spec.node.attrs, x.shape, w.shape), x.shape[3], w.shape[0],
                           w.shape[1]);
  return layout.image() <= static_cast<int64_t>(std::numeric_limits<uint32_t>::max());
}

KernelDef int8_conv_kernel(const char* op, bool requantized, const char* impl, bool always_sparse,
                           int priority) {
  KernelDef def;
  def.op = op;
  def.dtype = DType::u8;
  def.impl = impl;
  def.priority = priority;
  def.accepts = [always_sparse](const KernelSpec& spec) {
    return accepts(spec) && (always_sparse || sparse_conv_can_pay(spec.inputs[kWeightInput].shape));
  };
  def.create = [requantized, always_sparse](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<Int8SparseConvKernel>(spec, always_sparse ? 0.0 : kCsrCrossover,
                                                  requantized);
  };
  return def;
}

}  // namespace

void register_int8_conv_kernels(KernelRegistry& registry) {
  for (const auto& [op, requantized] : {std::pair{op_names::kQuantizedConv2D, false},
                                        std::pair{op_names::kQuantizedConv2DRequantized, true}}) {
    registry.add(int8_conv_kernel(op, requantized, "sparse", false, kPriority));
    registry.add(int8_conv_kernel(op, requantized, "sparse_only", true, kOnlyWhenAskedPriority));
  }
}

}  // namespace sf::sparse
