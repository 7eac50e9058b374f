// Activation ranges learned by quantization-aware training (`train --qat`): a frozen QAT model
// keeps a FakeQuantActivation after each tensor the eightbit graph holds in u8, its range a
// Const. The eightbit rewrite takes those ranges as calibrated ones and drops the nodes, so a QAT
// model quantizes without calibration data, on exactly the grid it was trained for.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "quantize/calibration.h"

namespace sf {

struct LearnedRanges {
  Graph graph;          // the source without its FakeQuantActivation nodes (node names kept)
  TensorRanges ranges;  // by the name of the tensor each removed node read
};

bool has_fake_quant(const Graph& graph);

// FakeQuantActivation nodes named in `outputs`, or whose range is not a finite Const, stay.
LearnedRanges take_learned_ranges(const Graph& graph, const std::vector<std::string>& outputs);

}  // namespace sf
