// Sparse FusedConv2D and FusedConv2DAdd (groups 1): y = conv(x, filter) + bias (+ the addend),
// then the activation, with a frozen HWIO filter kept as each output channel's nonzero taps,
// each an offset into the zero-padded, stride-split input layout of split_layout.h, so that an
// output channel is one sum of scaled contiguous runs (sparse_accumulate.h) over the whole image.
#include <omp.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "cpu/parallel_for.h"
#include "kernels/kernel.h"
#include "kernels/sparse/sparse_accumulate.h"
#include "kernels/sparse/sparse_kernels.h"
#include "kernels/sparse/sparse_weights.h"
#include "kernels/sparse/split_layout.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

namespace sf::sparse {

namespace {

// Output channels computed together, so that each pixel's outputs are written as one run.
constexpr int64_t kChannelTile = 16;

class SparseConvKernel : public SparseKernel {
 public:
  SparseConvKernel(const KernelSpec& spec, double threshold)
      : SparseKernel(spec, threshold),
        geometry_(conv_window(spec.node.attrs, spec.inputs[0].shape, spec.inputs[1].shape)),
        filter_shape_(spec.inputs[1].shape),
        layout_(geometry_, spec.inputs[0].shape[3], filter_shape_[0], filter_shape_[1]),
        activation_(activation_of(spec.node)) {}

 protected:
  void prepare(const Tensor& weights) override {
    const std::vector<std::vector<ConvTap>> taps =
        conv_taps_of_filter(weights.data<float>(), filter_shape_);
    tap_start_.assign(1, 0);
    offsets_.clear();
    values_.clear();
    for (const std::vector<ConvTap>& channel : taps) {
      for (const ConvTap& t : channel) {
        offsets_.push_back(static_cast<uint32_t>(layout_.tap_offset(t.kh, t.kw, t.ci, geometry_)));
        values_.push_back(t.value);
      }
      tap_start_.push_back(static_cast<int64_t>(values_.size()));
    }
  }

  void compute_sparse(KernelContext& ctx) override {
    const Tensor& x = ctx.inputs[0];
    const int64_t batch = x.shape()[0];
    split_.resize(static_cast<size_t>(batch * layout_.image()));
    for (int64_t b = 0; b < batch; ++b)
      layout_.split_image(x, b, geometry_, 0.0f, split_.data() + b * layout_.image());
    const float* addend = ctx.inputs.size() == 4 ? ctx.inputs[3].data<float>() : nullptr;
    multiply(ctx.inputs[2].data<float>(), addend, ctx.outputs[0].data<float>(), batch);
  }

 private:
  // `addend`, null or of y's shape, is added before the activation (FusedConv2DAdd).
  void multiply(const float* bias, const float* addend, float* y, int64_t batch) {
    const AccumulateFn<uint32_t> accumulate = best_accumulate<uint32_t>();
    const int64_t out_channels = filter_shape_[3];
    const int64_t run = layout_.run_length();
    const int64_t out_h = layout_.out_h, out_w = layout_.out_w;
    const int64_t tiles = (out_channels + kChannelTile - 1) / kChannelTile;
    sums_.resize(static_cast<size_t>(omp_get_max_threads() * kChannelTile * run));
    const Activation act = activation_;
    parallel_region(true, [&] {
      float* sums = sums_.data() + omp_get_thread_num() * kChannelTile * run;
#pragma omp for collapse(2) schedule(static)
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t co0 = t * kChannelTile;
          const int64_t channels = std::min(kChannelTile, out_channels - co0);
          for (int64_t c = 0; c < channels; ++c) {
            const size_t co = static_cast<size_t>(co0 + c);
            accumulate(split_.data() + b * layout_.image(), offsets_.data() + tap_start_[co], 1,
                       values_.data() + tap_start_[co], tap_start_[co + 1] - tap_start_[co], run,
                       sums + c * run);
          }
          const int64_t image = b * out_h * out_w * out_channels + co0;
          for (int64_t oh = 0; oh < out_h; ++oh)
            for (int64_t ow = 0; ow < out_w; ++ow) {
              const int64_t pixel = image + (oh * out_w + ow) * out_channels;
              const int64_t at = layout_.run_index(oh, ow);
              for (int64_t c = 0; c < channels; ++c) {
                const float v = sums[c * run + at] + bias[co0 + c];
                y[pixel + c] = activate(addend != nullptr ? v + addend[pixel + c] : v, act);
              }
            }
        }
    });
  }

  Window2D geometry_;
  Shape filter_shape_;
  SplitLayout layout_;
  Activation activation_;
  std::vector<int64_t> tap_start_;  // per output channel, into offsets_ / values_
  std::vector<uint32_t> offsets_;   // where each nonzero tap starts in the split layout
  std::vector<float> values_;
  std::vector<float> split_;  // the split layout of every image of the batch
  std::vector<float> sums_;   // per thread: kChannelTile output channels of one image
};

bool accepts(const KernelSpec& spec) {
  const bool adds = spec.node.op == op_names::kFusedConv2DAdd;
  if (!spec.input_is_constant(1) || spec.inputs.size() != (adds ? 4u : 3u)) return false;
  if (adds && spec.inputs[3].shape != spec.node.outputs[0].shape) return false;
  for (const TensorType& t : spec.inputs)
    if (t.dtype != DType::f32 || num_elements(t.shape) == 0) return false;
  const Shape& x = spec.inputs[0].shape;
  const Shape& w = spec.inputs[1].shape;
  if (x.size() != 4 || w.size() != 4 || num_elements(spec.node.outputs[0].shape) == 0) return false;
  if (spec.node.attrs.get_int("groups") != 1 || w[2] != x[3]) return false;  // grouped: dense
  const SplitLayout layout(conv_window(spec.node.attrs, x, w), x[3], w[0], w[1]);
  return layout.image() <= static_cast<int64_t>(std::numeric_limits<uint32_t>::max());
}

KernelDef conv_kernel(const char* op, const char* impl, bool always_sparse, int priority) {
  KernelDef def;
  def.op = op;
  def.impl = impl;
  def.priority = priority;
  def.accepts = [always_sparse](const KernelSpec& spec) {
    return accepts(spec) && (always_sparse || sparse_conv_can_pay(spec.inputs[1].shape));
  };
  def.create = [always_sparse](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<SparseConvKernel>(spec, always_sparse ? 0.0 : kConvCrossover);
  };
  return def;
}

}  // namespace

void register_conv_kernels(KernelRegistry& registry) {
  for (const char* op : {op_names::kFusedConv2D, op_names::kFusedConv2DAdd}) {
    registry.add(conv_kernel(op, "sparse", false, kPriority));
    registry.add(conv_kernel(op, "sparse_only", true, kOnlyWhenAskedPriority));
  }
}

}  // namespace sf::sparse
