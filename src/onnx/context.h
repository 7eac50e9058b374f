// Internal to the ONNX importer: the per-model conversion state shared by the op converters.
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"
#include "onnx/importer.h"

namespace sf::onnx_import {

// One ONNX value. The graph may hold it as is (`plain`), as the NHWC form of a 4-D NCHW value
// (`nhwc`), or both; a value known at import time has `constant` and gets nodes only on use.
struct Value {
  Shape shape;  // ONNX shape
  DType dtype = DType::f32;
  Output plain;
  Output nhwc;
  std::optional<Tensor> constant;  // ONNX layout
  bool is_nhwc() const { return nhwc.valid(); }
  bool is_const() const { return constant.has_value(); }
};

// Layouts a converter can ask for.
enum class Layout { kPlain, kNhwc };

// NCHW <-> NHWC permutations.
inline const std::vector<int64_t> kToNhwc{0, 2, 3, 1};
inline const std::vector<int64_t> kToNchw{0, 3, 1, 2};

class Context {
 public:
  Context(Graph& graph, std::string path, int opset)
      : g(graph), path(std::move(path)), opset(opset) {}

  Graph& g;
  std::string path;
  int opset;
  std::map<std::string, Value> values;
  std::set<std::string> reserved_names;   // graph output names, kept for the final nodes
  const onnx::NodeProto* node = nullptr;  // the node being converted
  std::string label = "graph";            // names nodes added outside any ONNX node

  // --- the current node ---
  std::string node_name() const;
  const std::string& op() const { return node->op_type(); }
  int num_inputs() const { return node->input_size(); }
  bool has_input(int i) const { return i < node->input_size() && !node->input(i).empty(); }
  Value& in(int i);
  // The constant value of input i; throws OnnxUnsupported naming `what` when not constant.
  const Tensor& const_in(int i, const char* what);
  // Defines output i (ignored when the node does not have it).
  void set_out(int i, Value v);
  void set_out(int i, Output out, Layout layout);
  // Defines output i as a constant.
  void set_const(int i, Tensor t);

  // --- attributes of the current node ---
  const onnx::AttributeProto* attr(const std::string& name) const;
  int64_t attr_int(const std::string& name, int64_t def) const;
  float attr_float(const std::string& name, float def) const;
  std::string attr_string(const std::string& name, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> def = {}) const;

  // --- graph building ---
  // A fresh node name "<onnx node>[/suffix]".
  std::string fresh(const std::string& suffix = "");
  Output add(const std::string& op, std::vector<Output> inputs, Attrs attrs = {},
             const std::string& suffix = "");
  Output constant(Tensor t, const std::string& suffix = "const");
  // The value in the requested form (layout.cc); adds Const/Transpose/Reshape nodes as needed.
  Output plain(Value& v);
  Output nhwc(Value& v);
  Output get(Value& v, Layout layout) { return layout == Layout::kNhwc ? nhwc(v) : plain(v); }
  // The ONNX shape of a graph output held in `layout`.
  Shape onnx_shape(Output out, Layout layout) const;

  // --- errors ---
  template <typename... Args>
  [[noreturn]] void unsupported(fmt::format_string<Args...> format, Args&&... args) const {
    throw OnnxUnsupported(fmt::format("{}: node '{}' ({}): {}", path, node_name(), op(),
                                      fmt::format(format, std::forward<Args>(args)...)));
  }
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw Error(fmt::format("{}: node '{}' ({}): {}", path, node_name(), op(),
                            fmt::format(format, std::forward<Args>(args)...)));
  }
};

using Converter = void (*)(Context&);
using ConverterMap = std::map<std::string, Converter>;

// Converter families; each adds its ops to the map.
void add_nn_converters(ConverterMap& m);
void add_math_converters(ConverterMap& m);
void add_shape_converters(ConverterMap& m);
void add_quant_converters(ConverterMap& m);
void add_einsum_converter(ConverterMap& m);
void add_rnn_converters(ConverterMap& m);

// --- importer.cc ---
// Every converter, by ONNX op type.
const ConverterMap& converters();
// Runs `convert` as the conversion of node n (c.node = &n): errors become one line naming the
// file and the node.
void convert_as(Context& c, const onnx::NodeProto& n, const std::function<void()>& convert);
// Converts node n with its converter (or folds it).
void convert_node(Context& c, const onnx::NodeProto& n);

// --- ops_nn.cc, shared with the quantized converters ---
// A Conv node's OIHW filter as HWIO.
Output conv_filter(Context& c, Value& w);
// The Conv2D attributes of the current Conv-like node for x (NCHW) and w (OIHW).
Attrs conv2d_attrs(Context& c, const Shape& x, const Shape& w);
// The MaxPool (max) or AvgPool attributes of the current pooling node for x (NCHW).
Attrs pool2d_attrs(Context& c, const Shape& x, bool max);

// --- tensors.cc ---
DType dtype_from_onnx(int elem_type, const std::string& where);
const char* onnx_type_name(int elem_type);
Tensor tensor_from_proto(const onnx::TensorProto& proto, const std::string& where);

// --- layout.cc ---
// Permutes a host tensor: out.shape[i] = in.shape[perm[i]].
Tensor permute(const Tensor& t, const std::vector<int64_t>& perm);
// `shape` padded with leading 1s to `rank`.
Shape pad_rank(const Shape& shape, size_t rank);
// The layout an elementwise op over `vs` should run in: NHWC when the result is 4-D and
// holding the inputs that way costs fewer transposes than holding them as is.
Layout elementwise_layout(Context& c, const std::vector<Value*>& vs);
// The operand in `layout` for an elementwise op whose result has rank 4 (broadcast-aligned:
// lower-rank operands are padded with leading 1s first when NHWC is asked for).
Output elementwise_operand(Context& c, Value& v, Layout layout);

// --- fold.cc ---
// Evaluates the current node at import time when its inputs are constant (or, for Shape,
// static); returns false when it cannot.
bool try_fold(Context& c);
// Our op `op` on host tensors, computed by its reference kernel (used by folding and by weight
// preprocessing); errors name the op as a graph node would.
Tensor evaluate_reference(const std::string& op, const std::vector<Tensor>& inputs,
                          Attrs attrs = {});
Tensor cast_tensor(const Tensor& t, DType dtype);
// Integer or float tensor elements as int64 (for shapes, axes, pads, ...).
std::vector<int64_t> to_ints(const Tensor& t);
std::vector<float> to_floats(const Tensor& t);

// --- ops_quant.cc ---
// (q - zero_point) * scale on the host; scale and zero_point hold one value or one per index
// of `axis` (already in [0, rank)).
Tensor dequantize_tensor(const Tensor& q, const Tensor& scale, const Tensor& zero_point,
                         int64_t axis);

}  // namespace sf::onnx_import
