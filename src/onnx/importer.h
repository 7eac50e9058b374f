// Imports ONNX models (float, opsets 9-18; older ones upgraded by the ONNX version converter)
// into a slimflow inference graph.
//
// The model keeps its ONNX interface: inputs are fed in ONNX layout (NCHW images) and outputs
// come back as ONNX defines them. Inside, image ops run NHWC; the importer tracks for every
// ONNX value whether the graph holds it as is or as the NHWC form of a 4-D NCHW value, and
// inserts a Transpose only where a consumer needs the other form (see layout.cc).
//
// Shape-computing subgraphs (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, ...) are folded
// to constants at import time, since every shape is static once the inputs' shapes are fixed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "modelfile/model_file.h"

namespace sf {

// Thrown when a model uses an op or a feature of an op that the importer does not handle (as
// opposed to a broken model). The message lists every unsupported node where it can.
class OnnxUnsupported : public Error {
 public:
  using Error::Error;
};

// The newest default-domain opset the importer reads; newer models are refused by name.
inline constexpr int kNewestOnnxOpset = 18;

struct ImportOptions {
  // Shapes for graph inputs (ONNX layout), overriding the declared ones. Needed when spatial
  // dimensions are dynamic; a dynamic batch dimension defaults to 1.
  std::map<std::string, Shape> input_shapes;
  // Graph inputs bound to fixed values: they become constants instead of placeholders (for
  // models that take their weights or shape parameters as inputs).
  std::map<std::string, Tensor> constant_inputs;
  // Runs the QDQ groups of quantized models (DequantizeLinear -> Conv/MatMul/Gemm/pooling/Add/
  // Concat -> QuantizeLinear) on the integer ops; false keeps them as the float ops between
  // QuantizeLinear/DequantizeLinear that the model spells out (qdq_fusion.h).
  bool fuse_qdq = true;
};

// Reads and converts `path`. The result's inputs are the model's non-constant graph inputs
// (Placeholder nodes named as in ONNX) and its outputs are nodes named as the ONNX outputs; its
// metadata records the source, the opset and "input_layout": "NCHW" (the interface kept).
// Throws OnnxUnsupported listing every unsupported node ("model.onnx: 2 unsupported nodes:
// 'n3' (LSTM), 'n7' (Einsum)"), and sf::Error "<path>: ..." for unreadable or invalid models.
ModelFile import_onnx(const std::string& path, const ImportOptions& options = {});

// The same from serialized ModelProto bytes; `name` prefixes error messages.
ModelFile import_onnx_bytes(const std::string& bytes, const std::string& name,
                            const ImportOptions& options = {});

// The ONNX op types (default domain) the importer has a converter for, sorted.
std::vector<std::string> supported_onnx_ops();
// The same as the README lists them: one Markdown list item per family of ops ("- Recurrent:
// `GRU`, `LSTM`"), the ops backticked and comma-separated.
std::string supported_onnx_ops_markdown();

// Reads a serialized onnx::TensorProto (a backend test's input_0.pb, ...) into a tensor.
Tensor read_onnx_tensor(const std::string& path);

}  // namespace sf
