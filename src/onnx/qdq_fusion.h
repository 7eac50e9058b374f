// Internal to the ONNX importer: runs quantized models in ONNX Runtime's QDQ format on the
// engine's integer ops (ops/quantized_ops.h).
//
// A QDQ model keeps its float ops and marks the 8-bit tensors with DequantizeLinear (DQ) and
// QuantizeLinear (Q) nodes. QdqFusion finds, before conversion, the groups
//   DQ(x) -> Conv / MatMul / Gemm (DQ'd constant weights, optional bias) [-> Relu / Clip] -> Q
//   DQ(x) -> MaxPool / AveragePool -> Q           DQ(a), DQ(b) -> Add [-> Relu / Clip] -> Q
//   DQ(x0), DQ(x1), ... -> Concat -> Q            DQ(x) -> Reshape / Flatten / Transpose -> Q
// whose inner values nothing else reads, and converts each, at its Q, to one integer op on the
// u8 data the DQs read: QuantizedConv2DRequantized, QuantizedMatMulRequantized,
// QuantizedMaxPool / QuantizedAvgPool, QuantizedAdd, QuantizedConcat, or the move itself on u8.
//
// Whether the integer op computes the group is decided only then, from the converted values:
// u8 activations with constant per-tensor scales and zero points, i8 weights with zero zero
// points (per tensor or per output channel), and for pooling and moves the same scale and zero
// point on both sides. A group that does not qualify is converted as written (DQ -> float op
// -> Q), so the result is always right; the integer form differs from it only by rounding
// (at most one unit of the output per group).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "onnx/context.h"
#include "codec/quant_params.h"

namespace sf::onnx_import {

struct QdqGroup {
  const onnx::NodeProto* op = nullptr;
  const onnx::NodeProto* activation = nullptr;  // Relu or Clip between op and quantize, if any
  const onnx::NodeProto* quantize = nullptr;    // the Q that ends the group
  std::vector<const onnx::NodeProto*> inputs;   // the DQ of each activation input of op
  const onnx::NodeProto* weights = nullptr;     // DQ of the weights (Conv, MatMul, Gemm)
  const onnx::NodeProto* bias = nullptr;        // DQ of the bias, when it is dequantized
  std::vector<const onnx::NodeProto*> members;  // every node above but quantize, graph order
};

class QdqFusion {
 public:
  // Finds the groups of `graph`; none when `enabled` is false.
  QdqFusion(Context& c, const onnx::GraphProto& graph, bool enabled);

  // Converts node n, in graph order. A group's op and activation, and DQs only groups read,
  // wait for the group's Q; there the group becomes its integer op, or, when its values do not
  // qualify, its waiting nodes are converted as written before the Q.
  void convert(const onnx::NodeProto& n);

 private:
  // u8 data a DQ reads, with the DQ's scale and zero point.
  struct U8Input {
    Value* data;
    QuantParams params;
  };
  // Symmetric i8 weights in ONNX layout, with scales f32[1] or f32[channels].
  struct I8Weights {
    Tensor values, scales;
  };

  void find_groups(const onnx::GraphProto& graph);
  std::optional<QdqGroup> match(const onnx::NodeProto& quantize) const;
  const onnx::NodeProto* sole_producer(const std::string& value) const;
  const onnx::NodeProto* dequantize_at(const onnx::NodeProto& n, int input) const;

  bool emit(const QdqGroup& g);
  bool emit_conv(const QdqGroup& g, QuantParams out);
  bool emit_matmul(const QdqGroup& g, QuantParams out);
  bool emit_pool(const QdqGroup& g, QuantParams out);
  bool emit_add(const QdqGroup& g, QuantParams out);
  bool emit_concat(const QdqGroup& g, QuantParams out);
  bool emit_move(const QdqGroup& g, QuantParams out);

  const Tensor* constant_input(const onnx::NodeProto& n, int input) const;
  std::optional<QuantParams> u8_params(const onnx::NodeProto& q_or_dq) const;
  std::optional<U8Input> u8_input(const onnx::NodeProto& dq) const;
  std::optional<I8Weights> i8_weights(const onnx::NodeProto& dq, int64_t channel_axis) const;
  std::optional<Tensor> float_bias(const QdqGroup& g, int64_t channels, float beta) const;
  std::optional<Activation> activation(const QdqGroup& g) const;
  Output params(QuantParams p, const std::string& suffix);
  void define(const onnx::NodeProto& quantize, Output y, Layout layout);

  Context& c_;
  std::map<const onnx::NodeProto*, size_t> position_;  // in the graph's node list
  std::map<std::string, const onnx::NodeProto*> producer_;
  std::map<std::string, std::vector<const onnx::NodeProto*>> readers_;
  std::set<std::string> graph_outputs_;
  std::vector<QdqGroup> groups_;
  std::map<const onnx::NodeProto*, size_t> group_ending_at_;  // Q -> index in groups_
  std::set<const onnx::NodeProto*> waiting_;                  // deferred until their group's Q
  std::set<const onnx::NodeProto*> converted_;                // waiting nodes converted since
};

}  // namespace sf::onnx_import
