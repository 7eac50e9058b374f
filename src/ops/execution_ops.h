// Ops that only the execution passes make (transforms/execution_passes.h), just before a model
// runs: never stored, never trained (their gradient is an error naming the node). Only the
// passes and kernels look for these names, so they live here rather than in op_names.h.
#pragma once

#include <string>

#include "graph/graph.h"

namespace sf::op_names {
// BatchMatMul (its attributes, activation included) plus a bias [N] along the output's last
// axis, scaled by `alpha` as oneDNN's output scale is: activation(alpha * (a.b + bias)). A
// projection's bias Add becomes its bias, a scalar Mul or Div of an operand (attention's
// 1 / sqrt(d)) its alpha, applied while the output is hot.
inline constexpr char kFusedBatchMatMul[] = "FusedBatchMatMul";
// AddN (inputs of one shape, summed in double in input order and rounded once) and then its
// `activation`: a residual sum and the Relu after it, as one pass over the data.
inline constexpr char kFusedAddN[] = "FusedAddN";
}  // namespace sf::op_names

namespace sf::ops {

Output fused_batch_matmul(Graph& g, Output a, Output b, Output bias, bool transpose_a,
                          bool transpose_b, const std::string& name = "");

}  // namespace sf::ops
