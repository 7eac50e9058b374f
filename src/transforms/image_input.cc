#include "transforms/image_input.h"

#include <algorithm>

#include "ops/op_names.h"
#include "transforms/graph_uses.h"

namespace sf {

namespace {

// Whether node `reader`, reading the 4-D NCHW `input`, yields its NHWC form.
bool moves_to_nhwc(const Node& reader, const TensorType& input) {
  if (reader.inputs.size() != 1 || reader.outputs.size() != 1) return false;
  const Shape& s = input.shape;
  const Shape nhwc = {s[0], s[2], s[3], s[1]};
  if (reader.outputs[0] != TensorType{input.dtype, nhwc}) return false;
  if (reader.op == op_names::kTranspose)
    return reader.attrs.get_ints("perm") == std::vector<int64_t>{0, 2, 3, 1};
  // The importer's move when the channel axis can go last without reordering any data.
  return reader.op == op_names::kReshape && (s[1] == 1 || s[2] * s[3] == 1);
}

}  // namespace

ImageFeed feed_nhwc_images(Graph& graph, const std::string& input, bool input_is_nchw,
                           const std::vector<std::string>& outputs) {
  const ImageFeed as_declared{input, input_is_nchw};
  const int id = graph.id_of(input);
  const TensorType type = graph.type({id, 0});
  if (!input_is_nchw || type.shape.size() != 4 ||
      std::find(outputs.begin(), outputs.end(), input) != outputs.end())
    return as_declared;
  const GraphUses uses = GraphUses::of_all_nodes(graph);
  if (uses.uses(id) != 1) return as_declared;
  const int reader = uses.readers(id).front().first;
  if (!moves_to_nhwc(graph.node(reader), type)) return as_declared;
  // Rewritten in place, not copied, so that node ids held elsewhere (eightbit layers) stay valid.
  Node& move = graph.mutable_node(reader);
  const TensorType nhwc = move.outputs[0];
  move.op = op_names::kPlaceholder;
  move.inputs.clear();
  move.attrs = Attrs{{"dtype", std::string(dtype_name(nhwc.dtype))}, {"shape", nhwc.shape}};
  return ImageFeed{move.name, false};
}

}  // namespace sf
