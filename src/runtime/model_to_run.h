// Opening a model to run it, in one place for the C API and the `slimflow` inference commands:
// the graph gets the execution passes (transforms/execution_passes.h), which are never stored,
// and the ports of the model's inputs and outputs are looked up once. The command imports .onnx
// files itself (the importer is above this layer) and prepares the result with prepare_for_run.
#pragma once

#include <string>
#include <vector>

#include "core/shape.h"
#include "graph/graph.h"
#include "modelfile/model_file.h"
#include "runtime/precision.h"
#include "runtime/session.h"

namespace sf {

struct ModelToRun {
  ModelFile file;                    // graph after the execution passes; names as in the file
  std::vector<Output> input_ports;   // the Placeholder of file.inputs[i]
  std::vector<Output> output_ports;  // the node named file.outputs[i]

  const TensorType& input_type(size_t index) const {
    return file.graph.type(input_ports.at(index));
  }
};

// Loads a .sfm file (memory-mapped) and prepares it to run. Throws sf::Error "<path>: ...".
ModelToRun load_for_run(const std::string& path);
// Prepares a model already in memory (an imported ONNX model) to run.
ModelToRun prepare_for_run(ModelFile model);

// Sets the precision to run `model` (the file `path`) in: `requested` (a --precision value:
// fp32, bf16 or auto) when not empty, else the one the file was quantized for (metadata
// "precision" from `quantize --mode bf16`), else fp32. Under bf16 the layers the file keeps in
// fp32 (metadata "fp32_layers", from --exclude) stay fp32. Throws sf::Error "<path>: ..." on
// malformed metadata.
PrecisionChoice choose_model_precision(const ModelFile& model, const std::string& path,
                                       const std::string& requested, SessionOptions& options);

// Whether 4-D input `index` holds images NCHW (the interface of imported ONNX models, which the
// importer records as metadata "input_layout": "NCHW") rather than slimflow's NHWC. Files
// without that key are judged by the shape: NCHW when dimension 1 alone looks like channels.
bool input_is_nchw(const ModelFile& model, size_t index = 0);
// The declared [height, width, channels] of image input `index`, read in its layout; empty
// when the input is not 4-D.
Shape image_input_hwc(const ModelFile& model, size_t index = 0);

// Where images decoded NHWC enter image input `index`.
struct ImagePort {
  Output port;        // the Placeholder to feed
  bool nchw = false;  // true: permute the images to NCHW first (io/image.h, nhwc_to_nchw)
};
// Prepares `model`'s graph to take NHWC images at input `index` (transforms/image_input.h):
// an NCHW model whose first node moves the input to NHWC takes them there, unpermuted.
// input_ports keeps the declared input; create the session after this call.
ImagePort take_nhwc_images(ModelToRun& model, size_t index = 0);

}  // namespace sf
