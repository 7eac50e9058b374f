// The "eightbit" rewrite: turns an optimized float inference graph (what `slimflow freeze` and
// the ONNX importer produce) into one that computes in 8 bits.
//
//   FusedConv2D / Conv2D     -> QuantizedConv2DRequantized              (calibrated)
//   FusedMatMul / MatMul        QuantizedConv2D -> RequantizationRange -> Requantize  (not)
//   BatchMatMul by constant     (and the MatMul forms; a BatchMatMul's rows as one matrix);
//     [K, N] weights            weights become symmetric i8 Consts with f32 scales per tensor
//                               or per output channel
//   MaxPool / AvgPool        -> QuantizedMaxPool / QuantizedAvgPool (the input's params),
//   GlobalAvgPool               and QuantizedAvgPool + Reshape, when their input is u8
//   Add (+ a sole Relu/Relu6) -> QuantizedAdd with the activation      (calibrated only)
//   Concat                   -> QuantizedConcat                       (calibrated only)
//   Reshape, Flatten, Identity, Transpose, StridedSlice  move u8 data when their input is u8
//   anything else            stays float (listed in float_nodes with why), behind a
//                            Dequantize; where its result feeds an integer op, Quantize
//                            follows (params: a calibrated Const, or ChooseQParams at run time)
//
// Conversions are made once per tensor, only where a consumer needs the other form, so data
// stays 8-bit from one integer layer to the next: the result never holds a Dequantize whose
// output feeds a Quantize. Each float output of the graph gets one Dequantize, named as the
// output was, so output names do not change.
//
// Names stay readable: the u8 result of layer "conv1" is "conv1/quantized" (its params are
// "conv1/out_params" when calibrated, "conv1/requantization_range" otherwise), its weights
// "conv1/weights_quantized" and "conv1/weight_scales", the float form of a u8 tensor
// "conv1/dequantize", the u8 form of a float tensor "x/quantize" with "x/quantize_params".
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/op_names.h"
#include "quantize/calibration.h"

namespace sf {

struct EightbitOptions {
  bool per_channel = true;  // weight scales per output channel (else one per tensor)
  // Calibrated ranges by tensor (node) name. Absent: every range is measured at run time. A
  // tensor missing from the map falls back to the run-time form (Add and Concat: to float).
  std::optional<TensorRanges> ranges;
  std::set<std::string> exclude;     // node names kept in float
  std::vector<std::string> outputs;  // the graph's outputs; empty: the nodes nothing reads
};

// One rewritten layer: its u8 result and params in the rewritten graph, and the float tensor
// of the source graph that they approximate.
struct EightbitLayer {
  std::string name;          // the source node rewritten, e.g. "conv1"
  std::string op;            // its op, e.g. op_names::kFusedConv2D
  std::string tensor;        // the source tensor approximated: `name`, or a Relu fused into an Add
  std::string quantized_op;  // e.g. op_names::kQuantizedConv2DRequantized
  Output data;               // u8
  Output params;             // f32[2] = [scale, zero_point]
};

// A source node with a float result that the rewrite left in float, and why: "excluded",
// "no integer kernel", "input not quantized" (ops that follow their input), or what the
// integer kernel would need (a constant 2-D weight, a calibrated output range, ...).
struct FloatNode {
  std::string name;
  std::string op;
  std::string reason;
};

struct EightbitGraph {
  Graph graph;
  std::vector<std::string> outputs;    // the same names as the source graph's outputs
  std::vector<EightbitLayer> layers;   // in graph order
  std::vector<FloatNode> float_nodes;  // in graph order
};

// Throws sf::Error naming the node when an excluded or output name does not exist.
EightbitGraph rewrite_eightbit(const Graph& float_graph, const EightbitOptions& options);
Graph quantize_eightbit(const Graph& float_graph, const EightbitOptions& options);

// The tensors whose calibrated ranges the rewrite would use (node names, f32): calibrate these
// (quantize/calibration.h) and pass the result as EightbitOptions::ranges. `options.ranges` is
// ignored.
std::vector<std::string> eightbit_range_tensors(const Graph& float_graph,
                                                const EightbitOptions& options);

// Symmetric i8 weights: scale = max|w| / 127 per output channel (the last axis) or for the
// whole tensor, values round(w / scale) in -127..127; an all-zero channel gets scale 1.
struct SymmetricWeights {
  Tensor values;  // i8, w's shape
  Tensor scales;  // f32[C] or f32[1]
};
SymmetricWeights quantize_weights_symmetric(const Tensor& w, bool per_channel);

// The params f32[2] = [scale, zero_point] that ChooseQParams would compute for `range`.
Tensor params_for_range(const TensorRange& range);

// For each node of `graph`: a Const that every reader reads as quantization parameters (an
// eightbit model's scales, zero points and ranges, graph/op_registry.h's
// is_quantization_input), not as weights or data. Reports count these apart from parameters.
std::vector<bool> quantization_constants(const Graph& graph);

}  // namespace sf
