// Fake quantization for quantization-aware training (`slimflow train --qat BITS`): the forward
// pass sees values rounded to the grid they will be stored or computed on, the backward pass
// lets gradients straight through (within the representable range), so training learns weights
// and activation ranges that survive quantization.
#pragma once

#include <string>

#include "graph/graph.h"

namespace sf::ops {

// Weights rounded per output channel (the last axis) to `bits`-bit linear quantization, exactly
// as `quantize --mode weights --bits B --per-channel` stores them. Gradient: identity.
Output fake_quant_weights(Graph& g, Output w, int64_t bits, const std::string& name = "");

// An activation rounded to the u8 grid of `range` = [min, max] (a variable learned as a moving
// average of the batches' extremes; NaN until the first batch, when the batch's own range is
// used). Output 1 is the batch's observed [min, max]. Gradient: dy inside the grid's range, 0
// where the value saturates.
Output fake_quant_activation(Graph& g, Output x, Output range, const std::string& name = "");

}  // namespace sf::ops
