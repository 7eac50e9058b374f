// What the int8 sparse kernels (MatMul and Conv2D) share around their loops: the weights' sums
// per output, and turning the loops' sums of raw codes into the node's outputs.
//
//   acc[n] = bias_q[n] + sum over k of (x[k] - zero_point) * W[k, n]
//          = bias_q[n] - zero_point * sum_k W[k, n] + sum over nonzero W[k, n] of x[k] * W[k, n]
//
// so the loops multiply raw codes, and the first two terms are one offset per output. The int32
// accumulators then go through the reference's fixed-point requantization (kernels/int8_loops.h),
// so the outputs equal the reference kernels' exactly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kernel.h"
#include "codec/quant_params.h"

namespace sf::sparse {

// Per output n of W [K, N] (row-major): the sum of its weights, and whether every int32 sum of
// the sparse loops fits: 255 * sum over k of |W[k, n]| < 2^31.
struct OutputWeightSums {
  std::vector<int64_t> sums;
  bool fit_int32 = true;
};
OutputWeightSums output_weight_sums(const int8_t* w, int64_t k, int64_t n);

// How an int8 sparse kernel runs frozen weights W [rows, n] (rows: K, or a conv's taps), and
// what it needs from them in every form: each output's weight sum.
struct Int8SparseChoice {
  std::vector<int64_t> weight_sums;
  bool use_quads = false;  // quads of 16-output blocks (VNNI CPUs) rather than CSR
  bool sparse = false;     // false: the dense kernel is faster
};
// The quad form's measured figures: its cost per stored weight relative to CSR's per nonzero,
// and the fraction of zero blocks from which it beats the dense kernel.
struct QuadFigures {
  double cost;
  double crossover;
};
// Quads when they store fewer weights, weighted by `quads.cost`, than CSR's nonzeros; sparse at
// all when the chosen form's sparsity reaches its crossover (`csr_threshold` for CSR; a
// threshold of 0 always runs sparse). Sums that could overflow int32 run dense, or fail naming
// the node when the threshold is 0 (the forced-sparse impl).
Int8SparseChoice choose_int8_sparse_form(const int8_t* w, int64_t rows, int64_t n,
                                         double weight_sparsity, double csr_threshold,
                                         QuadFigures quads, const std::string& node_name,
                                         const std::string& op);

// The per-output offsets and the requantization of a QuantizedMatMul / QuantizedConv2D node
// (inputs x, x_params, w, w_scales, bias) or of its Requantized form (then also out_params).
class Int8Outputs {
 public:
  explicit Int8Outputs(bool requantized) : requantized_(requantized) {}

  // Reads the params, scales and bias; `weight_sums` from output_weight_sums.
  void read(const KernelContext& ctx, const std::vector<int64_t>& weight_sums);

  int32_t x_zero_point() const { return x_zero_point_; }

  // The exact int32 accumulator of output channel `n` whose raw-code sum is `sum`, saturated as
  // the reference saturates it.
  int32_t accumulator(int32_t sum, int64_t n) const {
    return static_cast<int32_t>(std::clamp<int64_t>(offsets_[static_cast<size_t>(n)] + sum,
                                                    std::numeric_limits<int32_t>::min(),
                                                    std::numeric_limits<int32_t>::max()));
  }

  // The accumulators of `width` channels from channel0 at `pixels` pixels:
  // out[p * out_stride + c] = accumulator(sums[p * pixel_stride + c * channel_stride],
  // channel0 + c).
  void accumulators(const int32_t* sums, int64_t pixel_stride, int64_t channel_stride,
                    int64_t pixels, int64_t channel0, int64_t width, int32_t* out,
                    int64_t out_stride) const;

  // Requantizes accumulators [rows, channels] into the u8 output.
  void requantize(const int32_t* acc, int64_t rows, uint8_t* out) const;

 private:
  bool requantized_;
  int32_t x_zero_point_ = 0;
  std::vector<int64_t> offsets_;  // bias_q[n] - zero_point * sum_k W[k, n]
  std::vector<QuantizedMultiplier> multipliers_;
  int32_t out_zero_point_ = 0;
  QuantClamp clamp_;
};

}  // namespace sf::sparse
