// Opening models for the commands: .sfm files directly, .onnx through the importer, and helpers
// shared by classify/run/eval/bench.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "modelfile/model_file.h"
#include "onnx/shape_specializer.h"
#include "placement_flags.h"
#include "runtime/model_to_run.h"
#include "runtime/session.h"

namespace sf::cli {

// "name=1,3,224,224" -> {name, shape}; throws sf::Error on bad syntax.
std::pair<std::string, Shape> parse_input_shape(const std::string& text);

// The --input-shape values (NAME=D1,D2,...) as a map; throws on bad syntax or a repeated name.
std::map<std::string, Shape> parse_input_shapes(const std::vector<std::string>& texts);

// Loads a .sfm (memory-mapped) or imports a .onnx model, as stored: for commands that read or
// rewrite a model. A symbolic model (a .onnx, or a .sfm that `import` kept symbolic) is
// specialized to `input_shapes`.
ModelFile open_model(const std::string& path,
                     const std::map<std::string, Shape>& input_shapes = {});

// The same prepared to run (runtime/model_to_run.h): the C API's load_for_run, plus .onnx.
ModelToRun open_model_to_run(const std::string& path,
                             const std::map<std::string, Shape>& input_shapes = {});

// The ONNX bytes of a .onnx file or of a symbolic .sfm; nullopt for other model files.
std::optional<std::string> onnx_source(const std::string& path);

// The inputs of a model as declared (-1 for symbolic dimensions), for commands that pick a
// concrete shape from what they feed (eval's data set, classify's image).
std::vector<DeclaredInput> declared_inputs(const std::string& path);

// The input shapes to open an image model at: `given` (--input-shape), plus, for a one-input
// ONNX model whose spatial dimensions are symbolic, the NCHW shape [1, C, height, width] of
// the images it will be fed (the shape comes from the input, as ONNX Runtime takes it).
std::map<std::string, Shape> image_input_shapes(const std::string& path,
                                                std::map<std::string, Shape> given, int64_t height,
                                                int64_t width, int64_t channels);

// A model to run on given inputs: ONNX models (and symbolic .sfm files) are planned per input
// shape (onnx/shape_specializer.h); other .sfm files run their one graph, whose session
// re-plans for a new batch size.
class ModelRunner {
 public:
  // With `placement`, a .sfm graph is placed (and its log written) before its session is made;
  // ONNX models run on the default CPU device only.
  // `precision` is a --precision value, or empty for the model's (choose_model_precision).
  ModelRunner(const std::string& path, const std::map<std::string, Shape>& input_shapes,
              SessionOptions options, const std::string& precision,
              const PlacementFlags* placement = nullptr, bool json = false);
  const PrecisionChoice& precision() const { return precision_; }
  const std::vector<DeclaredInput>& inputs() const { return inputs_; }
  const std::vector<std::string>& outputs() const { return outputs_; }
  size_t input_index(const std::string& name) const;
  // Throws one line naming the input and what the model allows when a value does not fit.
  void check_inputs(const std::vector<Tensor>& values) const;
  // One value per input, in inputs() order.
  std::vector<Tensor> run(const std::vector<Tensor>& values);
  // The graph and session that run `values` (planned if new): for profiles and FLOP counts.
  const ModelToRun& model_for(const std::vector<Tensor>& values);
  Session& session_for(const std::vector<Tensor>& values);
  // Plan cache figures: specializations (ONNX) or the session's plans (.sfm).
  SpecializerStats plan_stats() const;

 private:
  std::string path_;
  std::vector<DeclaredInput> inputs_;
  std::vector<std::string> outputs_;
  std::unique_ptr<ShapeSpecializer> specializer_;
  std::optional<ModelToRun> fixed_;
  std::unique_ptr<Session> session_;
  PrecisionChoice precision_;
};

// The model's input shape with its batch dimension set to `batch`.
Shape with_batch(const Shape& shape, int64_t batch);

// A metadata value as a number, or `fallback`.
double metadata_number(const ModelFile& model, const std::string& key, double fallback);

// Throws sf::Error "<where>: control byte ..." when `label` holds one: labels are printed.
void check_printable_label(const std::string& label, const std::string& where);

// The label names a model stores in class order (metadata "labels", a JSON array of strings, as
// `retrain` writes it); empty when it stores none. Throws sf::Error naming `path` when malformed.
std::vector<std::string> metadata_labels(const ModelFile& model, const std::string& path);

// Output 0 of a classifier as probabilities [batch, classes] (softmax applied if needed).
Tensor as_probabilities(const Tensor& output);

}  // namespace sf::cli
