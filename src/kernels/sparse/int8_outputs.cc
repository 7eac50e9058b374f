#include "kernels/sparse/int8_outputs.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "core/error.h"
#include "cpu/cpu_features.h"
#include "kernels/int8_loops.h"
#include "kernels/quantized_args.h"
#include "kernels/sparse/avx512_loops.h"
#include "kernels/sparse/int8_sparse_product.h"
#include "kernels/sparse/sparse_weights.h"

namespace sf::sparse {

OutputWeightSums output_weight_sums(const int8_t* w, int64_t k, int64_t n) {
  OutputWeightSums out;
  out.sums.assign(static_cast<size_t>(n), 0);
  std::vector<int64_t> magnitudes(static_cast<size_t>(n), 0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t nn = 0; nn < n; ++nn) {
      out.sums[static_cast<size_t>(nn)] += w[kk * n + nn];
      magnitudes[static_cast<size_t>(nn)] += std::abs(int{w[kk * n + nn]});
    }
  for (const int64_t m : magnitudes)
    out.fit_int32 = out.fit_int32 && m * 255 <= std::numeric_limits<int32_t>::max();
  return out;
}

Int8SparseChoice choose_int8_sparse_form(const int8_t* w, int64_t rows, int64_t n,
                                         double weight_sparsity, double csr_threshold,
                                         QuadFigures quads, const std::string& node_name,
                                         const std::string& op) {
  OutputWeightSums sums = output_weight_sums(w, rows, n);
  Int8SparseChoice choice{.weight_sums = std::move(sums.sums)};
  if (!sums.fit_int32) {
    if (csr_threshold == 0.0)
      fail("node '{}' ({}): its weights' sums can overflow the sparse kernel's int32 accumulators",
           node_name, op);
    return choice;
  }
  double block_sparsity = 0.0;
  if (has_avx512_vnni()) {
    const int64_t blocks = nonzero_blocks(w, rows, n, false, kQuadBlock);
    const int64_t strips = (n + kQuadBlock - 1) / kQuadBlock;
    const double stored = static_cast<double>(blocks * kQuadBlock) / static_cast<double>(rows * n);
    choice.use_quads = stored * quads.cost < 1.0 - weight_sparsity;
    block_sparsity = 1.0 - static_cast<double>(blocks) / static_cast<double>(rows * strips);
  }
  choice.sparse = csr_threshold == 0.0 || (choice.use_quads ? block_sparsity >= quads.crossover
                                                            : weight_sparsity >= csr_threshold);
  return choice;
}

void Int8Outputs::read(const KernelContext& ctx, const std::vector<int64_t>& weight_sums) {
  const int64_t channels = static_cast<int64_t>(weight_sums.size());
  const QuantParams xq = params_input(ctx, 1);
  const std::vector<float> scales = scales_input(ctx, 3, channels);
  const std::vector<int32_t> bias = quantized_bias(ctx.inputs[4].data<float>(), xq.scale, scales);
  x_zero_point_ = xq.zero_point;
  offsets_.resize(weight_sums.size());
  for (size_t j = 0; j < offsets_.size(); ++j)
    offsets_[j] = int64_t{bias[j]} - int64_t{xq.zero_point} * weight_sums[j];
  if (!requantized_) return;
  const QuantParams out = params_input(ctx, 5);
  multipliers_ = requantize_multipliers(xq.scale, scales, out.scale);
  out_zero_point_ = out.zero_point;
  clamp_ = activation_clamp(activation_of(ctx.node), out);
}

void Int8Outputs::accumulators(const int32_t* sums, int64_t pixel_stride, int64_t channel_stride,
                               int64_t pixels, int64_t channel0, int64_t width, int32_t* out,
                               int64_t out_stride) const {
#if defined(__x86_64__)
  if (cpu_features().avx512f && width == 16) {
    accumulators_16_avx512(sums, pixel_stride, channel_stride, pixels, offsets_.data() + channel0,
                           out, out_stride);
    return;
  }
#endif
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t c = 0; c < width; ++c)
      out[p * out_stride + c] =
          accumulator(sums[p * pixel_stride + c * channel_stride], channel0 + c);
}

void Int8Outputs::requantize(const int32_t* acc, int64_t rows, uint8_t* out) const {
  requantize_rows(acc, rows, static_cast<int64_t>(multipliers_.size()), multipliers_,
                  out_zero_point_, clamp_, out);
}

}  // namespace sf::sparse
