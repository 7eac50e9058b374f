// Graph rewrites that turn a training graph into a lean inference graph. Each pass maps a graph
// and its outputs to a new graph; nodes keep their names so profiles still name layers.
//
//   freeze_variables   variables become constants (values from the store); only what the
//                      outputs need is kept; Dropout and Identity disappear; weights
//                      trained quantization-aware are stored as FakeQuantWeights rounds them,
//                      binarized ones as BinarizeWeights leaves them (sign * scale)
//   fold_batch_norm    an inference BatchNorm after Conv2D/MatMul (+ BiasAdd) folds into the
//                      filter and bias
//   fuse_bias_activation  Conv2D/MatMul + BiasAdd (+ Relu/Relu6) become FusedConv2D/FusedMatMul
#pragma once

#include <vector>

#include "graph/graph.h"
#include "graph/variable_store.h"

namespace sf {

Graph freeze_variables(const Graph& graph, const VariableStore& variables,
                       std::vector<Output>& outputs);
Graph fold_batch_norm(const Graph& graph, std::vector<Output>& outputs);
Graph fuse_bias_activation(const Graph& graph, std::vector<Output>& outputs);

// All of the above, in order.
Graph optimize_for_inference(const Graph& graph, const VariableStore& variables,
                             std::vector<Output>& outputs);

// fold_batch_norm + fuse_bias_activation on a graph with named outputs (an imported model),
// renaming outputs whose node was fused into another.
Graph optimize_constant_graph(const Graph& graph, std::vector<std::string>& output_names);

}  // namespace sf
