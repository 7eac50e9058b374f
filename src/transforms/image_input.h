// Feeding images, which slimflow decodes NHWC, to a model whose image input is NCHW (the
// interface the ONNX importer keeps). Such a model's first node moves the input to NHWC, for the
// image ops inside, so images fed where that node's result would be need no permute at all.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace sf {

struct ImageFeed {
  std::string placeholder;  // the Placeholder NHWC images are fed to
  bool nchw = false;        // true: permute them to NCHW first (io/image.h, nhwc_to_nchw)
};

// Prepares `graph` to take NHWC images for its image input `input` (a Placeholder, NCHW when
// `input_is_nchw`; `outputs` are the graph's output names). When the NCHW input's only reader
// moves it to NHWC (a Transpose, or a Reshape where channels or pixels are 1 and nothing
// moves), that node becomes a Placeholder of its own name and type, which is returned; node ids
// do not change and the NCHW placeholder stays, unread. Otherwise `input` is returned as is.
ImageFeed feed_nhwc_images(Graph& graph, const std::string& input, bool input_is_nchw,
                           const std::vector<std::string>& outputs);

}  // namespace sf
