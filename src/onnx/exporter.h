// Exports slimflow inference graphs (.sfm models) as ONNX.
//
// The ONNX model keeps the .sfm interface: inputs and outputs have the same names, dtypes and
// shapes (images NHWC), and dimension 0 of each is the symbolic "batch". Inside, convolutions
// and pooling run in ONNX's NCHW with OIHW filters; the exporter tracks in which permutations
// each value is already held and inserts a Transpose only where a consumer needs another one
// (constants are permuted at export time instead), so a chain of image layers has one
// Transpose in and one out.
//
// Float graphs (freeze / import output) map op for op onto standard ONNX. Calibrated eightbit
// graphs (quantize --mode eightbit --calib-data) become ONNX Runtime's QDQ format:
// QuantizeLinear / DequantizeLinear around float Conv, Gemm, pooling, Add and Concat, with u8
// activations, i8 weights (per tensor, or per output channel on axis 0 of the OIHW filter or
// the transposed [N,K] Gemm weight) and i32 biases in units of x_scale * w_scale, which ONNX
// Runtime fuses into its integer kernels. Graphs whose ranges are measured at run time
// (ChooseQParams, RequantizationRange) have no QDQ form and are refused.
#pragma once

#include <string>

#include "modelfile/model_file.h"

namespace sf {

struct ExportOptions {
  int opset = 13;  // 13 to 17
};

// The serialized onnx::ModelProto. `name` (the source model's path) prefixes error messages:
// "m.sfm: node 'loss' (SoftmaxCrossEntropy): cannot be exported to ONNX".
std::string export_onnx_bytes(const ModelFile& model, const std::string& name,
                              const ExportOptions& options = {});

// Writes the model to `path` atomically (a torn file is never left behind); returns the bytes
// written.
uint64_t export_onnx(const ModelFile& model, const std::string& name, const std::string& path,
                     const ExportOptions& options = {});

}  // namespace sf
