// Binary and ternary weights, per output channel (the last axis: HWIO filters, [K, N]
// matrices): what binarized training computes in its forward pass, what `freeze` recognizes and
// stores in 1 or 2 bits (weight_codec's `binary` and `ternary` encodings), and what the binary
// kernels pack into bit-planes.
//
//   binary   w_b = sign(w) * alpha,  alpha = mean |w| of the channel, sign(0) = +1
//            (BinaryConnect / XNOR-Net)
//   ternary  w_t = sign(w) * alpha where |w| > delta, else 0, delta = 0.7 * mean |w| of the
//            channel, alpha = mean |w| over the kept weights (TWN)
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace sf::quant {

// Both take an f32 tensor of rank >= 1 and return a new one of its shape.
Tensor binarize_weights(const Tensor& w);
Tensor ternarize_weights(const Tensor& w);
inline constexpr double kTernaryThreshold = 0.7;

// A tensor whose every channel (last axis) holds only -scale, +scale (and, when ternary, 0).
struct SignedLevels {
  bool ternary = false;         // some element is 0
  std::vector<float> scales;    // per channel, >= 0
  std::vector<int8_t> levels;   // per element: -1, 0 or +1, in the tensor's order
  int64_t channels() const { return static_cast<int64_t>(scales.size()); }
};
// The levels when `w` (f32, rank >= 1, finite) has that form exactly, otherwise nothing. A
// channel whose nonzero values have one magnitude qualifies; the tensor is ternary when any
// element is 0 while its channel's scale is not.
std::optional<SignedLevels> signed_levels(const Tensor& w);

}  // namespace sf::quant
