// Symbolic differentiation: the gradient is itself part of the graph. gradients() walks the
// nodes between `wrt` and `loss` in reverse order, asks each op's gradient function to add the
// nodes that compute its input gradients, and sums gradients that reach one output by several
// paths. No backward kernels are special: they are ops like any other.
#pragma once

#include <vector>

#include "graph/graph.h"

namespace sf {

// d loss / d wrt[i] for each i. `loss` must be a scalar f32. An entry is invalid (node -1)
// when wrt[i] does not influence the loss.
std::vector<Output> gradients(Graph& graph, Output loss, const std::vector<Output>& wrt);

}  // namespace sf
