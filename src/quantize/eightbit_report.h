// How far each rewritten layer of an eightbit graph (quantize/eightbit_rewrite.h) strays from
// the float graph it came from, measured on calibration examples: for spotting the layers to
// exclude or calibrate differently.
//
// Each layer's u8 result is dequantized and compared with the float graph's tensor at the same
// point, with both graphs fed the same examples. Errors therefore accumulate: a layer's figure
// includes what the layers before it lost, as it would in deployment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/op_names.h"
#include "quantize/calibration.h"
#include "quantize/eightbit_rewrite.h"

namespace sf {

struct LayerError {
  std::string name;          // the source node rewritten, e.g. "conv1"
  std::string op;            // e.g. op_names::kFusedConv2D
  std::string tensor;        // the float tensor compared with (a fused Relu's for an Add)
  std::string quantized_op;  // e.g. op_names::kQuantizedConv2DRequantized
  // 10 log10(sum x^2 / sum (x - x')^2) over all elements of all examples, x float and x'
  // dequantized; +inf when they agree exactly.
  double sqnr_db = 0.0;
  double max_abs_error = 0.0;
  double max_abs_value = 0.0;  // largest |x|, to put the error in scale
  int64_t elements = 0;
};

struct EightbitReport {
  std::vector<LayerError> layers;  // worst (lowest SQNR) first; ties in graph order
};

// Runs both graphs over `source` (fed to the Placeholders named `inputs`, which both graphs
// have) in batches of options.batch_size with options.threads; options.range is unused.
EightbitReport compare_layers(const Graph& float_graph, const EightbitGraph& quantized,
                              const std::vector<std::string>& inputs, CalibrationSource& source,
                              const CalibrationOptions& options = {});

}  // namespace sf
