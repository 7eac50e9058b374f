// Internal to the ONNX exporter: the per-model state shared by the op writers.
//
// A form is a permutation: the ONNX value permute(ours, form), so that
// onnx_shape[i] = our_shape[form[i]]. The empty form is the tensor as our graph holds it;
// kChannelsFirst turns NHWC into NCHW. Every graph value records the forms already written;
// asking for another adds one Transpose (or, for a constant, a permuted initializer).
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "modelfile/model_file.h"
#include "onnx/exporter.h"

namespace sf::onnx_export {

using Form = std::vector<int64_t>;

inline const Form kAsIs{};
inline const Form kChannelsFirst{0, 3, 1, 2};  // NHWC -> NCHW
inline const Form kFilterOihw{3, 2, 0, 1};     // HWIO -> OIHW
inline const Form kSwapRows{1, 0};             // [K,N] -> [N,K]

// A quantization's ONNX scale and zero point initializers.
struct QuantNames {
  std::string scale, zero_point;
};

class Context {
 public:
  Context(const ModelFile& model, std::string name, const ExportOptions& options,
          onnx::GraphProto& graph);

  const Graph& g;
  const std::string name;  // prefixes errors
  const ExportOptions options;
  const Node* node = nullptr;  // the node being written

  // --- values ---
  const TensorType& type(Output o) const { return g.type(o); }
  const Shape& shape(Output o) const { return g.type(o).shape; }
  const Tensor* const_value(Output o) const;
  // A const input's tensor; fails naming `what` when the input is computed.
  const Tensor& const_in(int i, const char* what) const;
  // The ONNX name of `o` in `form`, adding a Transpose or an initializer when needed.
  std::string get(Output o, const Form& form = kAsIs);
  // The form `o` is preferably read in: channels-first when it already exists, else as is
  // (a constant has every form for free and reports as is).
  Form held_form(Output o) const;
  bool has_form(Output o, const Form& form) const;
  // Every form `o` is held in (a constant's as-is initializer is made first).
  const std::map<Form, std::string>& forms(Output o);
  // Records that ONNX value `onnx_name` is `o` in `form`.
  void define(Output o, const Form& form, const std::string& onnx_name);
  // The current node's output `index` in `form`: a fresh ONNX name that is recorded.
  std::string define_out(const Form& form, int index = 0);

  // --- writing ---
  std::string fresh(const std::string& base);
  onnx::NodeProto& add_node(const std::string& op, const std::vector<std::string>& inputs,
                            const std::vector<std::string>& outputs);
  // A new ONNX value computed by `op` from `inputs`, named after the current node.
  std::string add(const std::string& op, const std::vector<std::string>& inputs,
                  const std::string& suffix, onnx::NodeProto** made = nullptr);
  std::string initializer(const Tensor& t, const std::string& base);
  std::string scalar_f32(float v, const std::string& base);
  std::string ints_i64(const std::vector<int64_t>& v, const std::string& base);
  // The scale and u8 zero point of a Const params f32[2] = [scale, zero_point] input.
  QuantNames quant_params(Output params);

  // --- errors ---
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw Error(fmt::format("{}: node '{}' ({}): {}", name, node->name, node->op,
                            fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  std::map<Output, std::map<Form, std::string>> forms_;
  std::map<Output, QuantNames> quant_names_;
  std::set<std::string> names_;
  std::set<std::string> output_names_;
  onnx::GraphProto& graph_;
};

// Attribute helpers for NodeProto.
void set_attr(onnx::NodeProto& n, const std::string& name, int64_t v);
void set_attr(onnx::NodeProto& n, const std::string& name, float v);
void set_attr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v);
void set_attr(onnx::NodeProto& n, const std::string& name, const std::string& v);

// The element type code of a dtype.
int onnx_elem_type(DType dtype);
// `form` with an identity permutation written as kAsIs.
Form normalized(Form form);
// The ONNX axis holding our axis `axis` in `form`.
int64_t axis_in(const Form& form, int64_t axis, size_t rank);

// Writers by op. Each reads c.node and defines the node's outputs.
using Writer = void (*)(Context&);
using WriterMap = std::map<std::string, Writer>;
void add_float_writers(WriterMap& m);
void add_quantized_writers(WriterMap& m);

// Writes `op` reading `inputs` as the current node's output 0 in `form`.
onnx::NodeProto& emit(Context& c, const std::string& op, const std::vector<std::string>& inputs,
                      const Form& form);
// x after a fused activation as Relu or Clip(0, 6); `last` makes it the current node's output 0
// in `form`.
std::string activation(Context& c, const std::string& x, Activation act, const Form& form,
                       bool last);

// Ops of eightbit graphs whose ranges are measured at run time: no QDQ form.
bool is_run_time_range_op(const std::string& op);

}  // namespace sf::onnx_export
