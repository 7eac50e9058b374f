// Graph rewrites of a training graph (forward pass and its gradients), applied before a training
// session plans it. Results stay those of the unrewritten graph exactly; nodes keep their names.
//
//   fold_relu_grad_into_max_pool_grad  ReluGrad(MaxPoolGrad(Relu(a), y, dy), a) becomes one
//                      MaxPoolGrad with relu set: the ReluGrad's pass over the whole
//                      pre-pooling activation (the largest tensor of a CNN's step) disappears
#pragma once

#include <vector>

#include "graph/graph.h"

namespace sf {

// Every node of `graph` is kept (variables nobody reads this step included); `outputs` are
// mapped into the new graph, and a folded node's output is never among them.
Graph fold_relu_grad_into_max_pool_grad(const Graph& graph, std::vector<Output>& outputs);

}  // namespace sf
