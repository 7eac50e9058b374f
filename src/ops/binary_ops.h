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
