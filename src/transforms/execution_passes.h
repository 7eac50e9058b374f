// Graph rewrites made just before a model runs (bench, run, eval, classify, the C API). They
// are not stored in model files, so quantize, export and inspect still see the graph as frozen.
//
//   fuse_layer_norm       the decomposed LayerNormalization PyTorch exports (ReduceMean, Sub,
//                         Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta; opsets
//                         13-17) and the importer's form of the ONNX op, over the last axis,
//                         become one LayerNorm
//   fuse_gelu             x * 0.5 * (1 + erf(x / sqrt 2)), products in any order, becomes one
//                         Gelu
//   fuse_batch_matmul     a BatchMatMul reads a Transpose through its transpose flag when only
//                         products read it (what is left moves rows, or nothing), and a bias [N]
//                         added to its output, or else a constant scalar Mul / Div of one operand
//                         read by it alone, become oneDNN's bias / output scale in one
//                         FusedBatchMatMul (ops/execution_ops.h)
//   pool_before_concat    MaxPool(Concat(a, b)) over channels becomes Concat(MaxPool(a),
//                         MaxPool(b)): the concat then copies a quarter of the data; so does
//                         a QuantizedMaxPool after a QuantizedConcat, to the byte, as the parts'
//                         requantizations are non-decreasing
//   split_channel_concat  a channel Concat read only by convs disappears: each conv becomes a
//                         chain of convs over the parts, each adding the previous one's partial
//                         sum (FusedConv2DAdd), so the concatenated tensor is never written
//   fuse_residual_add     a 1x1 FusedConv2D (no activation) -> Add or two-input AddN
//                         (-> Relu/Relu6) becomes one FusedConv2DAdd, which adds the other
//                         operand inside the conv
//   fuse_add_activation   an elementwise f32 Add or AddN (-> Relu/Relu6) that no conv took
//                         becomes one FusedAddN (ops/execution_ops.h), so a residual sum and
//                         its Relu are one pass over the data, on the AddN kernels
//   pack_binary_activations  a BinarizeActivation read only by convs / matmuls with binary or
//                         ternary Const weights: they become XnorConv2D / XnorMatMul reading
//                         packed sign bits (ops/binary_ops.h), written by the MaxPool before it
//                         (MaxPoolSignBits, also through a flatten when the channels fill
//                         whole 32-bit elements) or else by a SignBits of its input, so the +-1
//                         floats are never written and the XNOR kernels pack nothing
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace sf {

Graph fuse_layer_norm(const Graph& graph, std::vector<Output>& outputs);
Graph fuse_gelu(const Graph& graph, std::vector<Output>& outputs);
Graph fuse_batch_matmul(const Graph& graph, std::vector<Output>& outputs);
Graph pool_before_concat(const Graph& graph, std::vector<Output>& outputs);
Graph split_channel_concat(const Graph& graph, std::vector<Output>& outputs);
Graph fuse_residual_add(const Graph& graph, std::vector<Output>& outputs);
Graph fuse_add_activation(const Graph& graph, std::vector<Output>& outputs);
Graph pack_binary_activations(const Graph& graph, std::vector<Output>& outputs);

// All of the above, in order, on a graph with named outputs; outputs whose node was replaced
// are renamed.
Graph optimize_for_execution(const Graph& graph, std::vector<std::string>& output_names);

}  // namespace sf
