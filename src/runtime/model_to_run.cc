#include "runtime/model_to_run.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "transforms/execution_passes.h"
#include "transforms/image_input.h"

namespace sf {

namespace {

const Shape& declared_input_shape(const ModelFile& model, size_t index) {
  return model.graph.node(model.graph.id_of(model.inputs.at(index))).outputs[0].shape;
}

}  // namespace

ModelToRun load_for_run(const std::string& path) {
  ModelFile model = load_model(path);
  auto symbolic = model.metadata.find("onnx_symbolic");
  if (symbolic != model.metadata.end() && symbolic->second == "1")
    fail("{}: holds an ONNX model with symbolic dimensions, which only the slimflow command "
         "plans per input shape; make a fixed-shape file with `slimflow import MODEL.onnx "
         "--input-shape NAME=D1,D2,...`",
         path);
  return prepare_for_run(std::move(model));
}

ModelToRun prepare_for_run(ModelFile model) {
  ModelToRun run;
  run.file = std::move(model);
  run.file.graph = optimize_for_execution(run.file.graph, run.file.outputs);
  const Graph& g = run.file.graph;
  for (const std::string& name : run.file.inputs)
    run.input_ports.push_back(Output{g.id_of(name), 0});
  for (const std::string& name : run.file.outputs)
    run.output_ports.push_back(Output{g.id_of(name), 0});
  return run;
}

bool input_is_nchw(const ModelFile& model, size_t index) {
  auto it = model.metadata.find("input_layout");
  if (it != model.metadata.end()) return it->second == "NCHW";
  const Shape& s = declared_input_shape(model, index);
  return s.size() == 4 && (s[1] == 1 || s[1] == 3) && s[3] != 1 && s[3] != 3;
}

Shape image_input_hwc(const ModelFile& model, size_t index) {
  const Shape& s = declared_input_shape(model, index);
  if (s.size() != 4) return {};
  return input_is_nchw(model, index) ? Shape{s[2], s[3], s[1]} : Shape{s[1], s[2], s[3]};
}

ImagePort take_nhwc_images(ModelToRun& model, size_t index) {
  ModelFile& file = model.file;
  const ImageFeed feed =
      feed_nhwc_images(file.graph, file.inputs.at(index), input_is_nchw(file, index), file.outputs);
  return ImagePort{Output{file.graph.id_of(feed.placeholder), 0}, feed.nchw};
}

PrecisionChoice choose_model_precision(const ModelFile& model, const std::string& path,
                                       const std::string& requested, SessionOptions& options) {
  const auto stored = model.metadata.find(kPrecisionMetadataKey);
  if (stored != model.metadata.end() && stored->second != "fp32" && stored->second != "bf16")
    fail("{}: metadata {} must be fp32 or bf16 ({} bytes of something else)", path,
         kPrecisionMetadataKey, stored->second.size());
  PrecisionChoice choice;
  if (!requested.empty())
    choice = choose_precision(requested, "--precision");
  else if (stored != model.metadata.end() && stored->second == "bf16")
    choice = {Precision::bf16, "the model's (quantize --mode bf16); " + bf16_hardware()};
  else
    choice = {Precision::fp32, "default"};
  options.precision = choice.precision;
  options.fp32_layers.clear();
  if (const auto layers = model.metadata.find(kFp32LayersMetadataKey);
      layers != model.metadata.end()) {
    const nlohmann::json names = nlohmann::json::parse(layers->second, nullptr, false);
    if (!names.is_array())
      fail("{}: metadata {} is not a JSON array of node names", path, kFp32LayersMetadataKey);
    for (const nlohmann::json& name : names) {
      if (!name.is_string())
        fail("{}: metadata {} holds a {}, not a node name", path, kFp32LayersMetadataKey,
             name.type_name());
      options.fp32_layers.insert(name.get<std::string>());
    }
  }
  return choice;
}

}  // namespace sf
