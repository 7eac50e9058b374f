// ONNX models with symbolic dimensions or shape-like inputs, run at whatever shape they are fed.
//
// The importer builds static graphs (every shape subgraph folds once the input shapes are
// known), so a model whose declared inputs have symbolic dimensions ('batch', 'height', ...) or
// whose shape-like inputs (a Reshape's shape, a Pad's pads, a Resize's sizes, ...) are fed at
// run time is kept as its ONNX form and planned per concrete input: the first run at a new
// shape (or with new shape-like values) imports the model specialized to it, evaluating the
// shape subgraphs from the actual input, and caches the prepared graph and its session. The
// cache holds at most `max_plans` specializations; the least recently used one goes first.
//
// A frozen symbolic model (.sfm) stores the ONNX bytes (symbolic_model_file), so one file serves
// every size.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "modelfile/model_file.h"
#include "onnx/importer.h"
#include "runtime/model_to_run.h"
#include "runtime/session.h"

namespace sf {

// A graph input as the ONNX model declares it.
struct DeclaredInput {
  std::string name;
  DType dtype = DType::f32;
  Shape dims;                          // -1 where symbolic or unknown
  std::vector<std::string> dim_names;  // dim_param ("" when fixed or unnamed)
  // Read at plan time (a Reshape's shape, Squeeze axes, Pad pads, Resize scales, Clip bounds,
  // ...): its values, not only its shape, select the specialization.
  bool shape_argument = false;

  bool symbolic() const;
  // "[batch,3,height,width]"
  std::string dims_str() const;
};

// A fed value that does not fit a model input; `input` is its index (to name the file it came
// from).
class InputMismatch : public Error {
 public:
  InputMismatch(size_t input, const std::string& message) : Error(message), input(input) {}
  size_t input;
};

// Throws InputMismatch naming input `index`, the dimension and what `in` allows when `value`
// does not fit. Dimension 0 of a fixed-batch model may differ (slimflow re-plans any batch
// size, as it always has). `bound` holds the sizes symbolic dimensions took from earlier
// inputs (dim_param -> size, input name).
void check_input(const DeclaredInput& in, size_t index, const Tensor& value,
                 std::map<std::string, std::pair<int64_t, std::string>>& bound);
// check_input for one value per input, in order; `model` names the model when the count is off.
void check_inputs(const std::vector<DeclaredInput>& inputs, const std::vector<Tensor>& values,
                  const std::string& model);
// Index of input `name` in `inputs`, or inputs.size().
size_t input_index(const std::vector<DeclaredInput>& inputs, const std::string& name);

struct SpecializerStats {
  size_t plans = 0;          // specializations in the cache
  size_t max_plans = 0;      // the cap
  size_t plans_made = 0;     // specializations built so far (misses)
  double last_plan_ms = 0;   // import + passes + first-run planning of the latest miss
  size_t cache_bytes = 0;    // weights + arenas of the cached specializations
};

class ShapeSpecializer {
 public:
  // `bytes`: a serialized ModelProto; `name` prefixes errors. `base` supplies fixed shapes
  // (--input-shape) that override the declared ones.
  ShapeSpecializer(std::string bytes, std::string name, ImportOptions base = {},
                   SessionOptions session = {}, size_t max_plans = 8);
  ~ShapeSpecializer();
  ShapeSpecializer(const ShapeSpecializer&) = delete;
  ShapeSpecializer& operator=(const ShapeSpecializer&) = delete;

  const std::vector<DeclaredInput>& inputs() const { return inputs_; }
  const std::vector<std::string>& outputs() const { return outputs_; }
  const std::string& name() const { return name_; }
  // Whether any input has a symbolic dimension or is a shape argument.
  bool dynamic() const;
  // Index of input `name`, or inputs().size().
  size_t input_index(const std::string& name) const;

  // Throws InputMismatch (one line naming the input, the dimension and what the model allows)
  // when a value cannot be its input: dtype, rank, a fixed dimension, or a symbolic dimension
  // that another input already binds to a different size.
  void check_inputs(const std::vector<Tensor>& values) const;

  // One value per input, in inputs() order; returns one tensor per output (valid until the next
  // run).
  std::vector<Tensor> run(const std::vector<Tensor>& values);

  // The specialization `values` would run, built if needed (for inspecting its graph).
  const ModelToRun& specialization(const std::vector<Tensor>& values);
  Session& session(const std::vector<Tensor>& values);

  SpecializerStats stats() const;

 private:
  struct Plan;
  Plan& plan_for(const std::vector<Tensor>& values);

  std::string bytes_, name_;
  ImportOptions base_;
  SessionOptions session_options_;
  size_t max_plans_;
  std::vector<DeclaredInput> inputs_;
  std::vector<std::string> outputs_;
  std::list<std::unique_ptr<Plan>> plans_;  // most recently used first
  size_t plans_made_ = 0;
  double last_plan_ms_ = 0;
};

// The declared inputs of a serialized ModelProto (with shape_argument marked).
std::vector<DeclaredInput> declared_onnx_inputs(const std::string& bytes, const std::string& name);

// Whether a model must be kept symbolic: some input has a symbolic dimension beyond the batch
// (dimension 0) that `fixed` does not fix, or is a shape argument.
bool needs_symbolic_form(const std::vector<DeclaredInput>& inputs,
                         const std::map<std::string, Shape>& fixed);

// A .sfm holding the ONNX model as is (a u8 Const "onnx_model"; metadata "onnx_symbolic": "1"),
// and back. symbolic_onnx_bytes returns nullopt for ordinary model files.
ModelFile symbolic_model_file(const std::string& bytes, const std::string& source);
std::optional<std::string> symbolic_onnx_bytes(const ModelFile& model);

}  // namespace sf
