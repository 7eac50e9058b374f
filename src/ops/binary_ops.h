// Ops of binarized training (`slimflow train --binarize weights|xnor|ternary`): the forward pass
// sees the 1- or 2-bit values the frozen model will hold, the backward pass lets gradients
// straight through, cancelled where the input is beyond [-1, 1] (the derivative of hard-tanh),
// as in BinaryConnect, XNOR-Net and TWN.
#pragma once

#include <string>

#include "graph/graph.h"

namespace sf::ops {

// Weights reduced per output channel (the last axis) to sign(w) * mean|w| (`ternary` false) or
// to TWN's {-a, 0, +a} (codec/binary_weights.h). Gradient: dy where |w| <= 1, else 0.
Output binarize_weights(Graph& g, Output w, bool ternary, const std::string& name = "");

// Activations to +1 where x > 0 and -1 elsewhere (so that zeros, e.g. a ReLU's, carry a bit
// too). Gradient: dy where |x| <= 1, else 0.
Output binarize_activation(Graph& g, Output x, const std::string& name = "");

}  // namespace sf::ops

// Packed sign bits, made only by the execution pass `pack_binary_activations`
// (transforms/execution_passes.h) just before a model runs, so that the op producing an XNOR
// layer's input writes 1 bit per value instead of a float: a "bits" tensor is i32, its last
// axis the channels packed 32 to an element (bit c % 32 of element c / 32 set where the value
// is > 0; the bits past the channel count are 0, and readers ignore them). Inference only: their
// gradient is an error naming the node. Only the binary pass and kernels look for these names,
// so they live here rather than in op_names.h.
namespace sf::op_names {
inline constexpr char kSignBits[] = "SignBits";                // x f32 [..., C] -> bits
inline constexpr char kMaxPoolSignBits[] = "MaxPoolSignBits";  // MaxPool's attrs; -> bits
// XnorConv2D (x bits [N,H,W,C/32], filter HWIO [kh,kw,C,O], bias [O]) and XnorMatMul (a bits
// [N, ...] holding K bits per row, b [K,O], bias [O]): FusedConv2D / FusedMatMul (attributes
// included) of the +-1 values the bits stand for.
inline constexpr char kXnorConv2D[] = "XnorConv2D";
inline constexpr char kXnorMatMul[] = "XnorMatMul";
}  // namespace sf::op_names

namespace sf {
inline int64_t sign_bit_elements(int64_t channels) { return (channels + 31) / 32; }
}  // namespace sf
