#include "train/freeze_run.h"

#include <set>

#include "codec/binary_weights.h"
#include "codec/sparse_codec.h"
#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "train/training_run.h"
#include "transforms/inference_passes.h"

namespace sf {

namespace {
// Smaller weights are not worth a sparse header.
constexpr int64_t kMinSparseElements = 256;
}  // namespace

ModelFile freeze_run(const std::string& run_dir) {
  const TrainingRun run(run_dir);
  const ModelSpec& spec = run.spec();
  Model model = build_model(spec, 1);
  Output probabilities = ops::softmax(model.graph, model.logits, "probabilities");
  VariableStore variables;
  for (const auto& [name, value] : run.variables()) variables.set(name, value);
  std::vector<Output> outputs = {probabilities};
  // The layers trained binarized: their weight constants are named "<layer>/..." (the
  // variable's name, or "<layer>/folded_weights" after a batch-norm folds into them).
  std::set<std::string> binarized;
  for (const Parameter& p : model.parameters)
    if (p.clip_to_unit) binarized.insert(p.name.substr(0, p.name.rfind('/') + 1));
  auto trained_binarized = [&](const std::string& name) {
    const size_t slash = name.rfind('/');
    return slash != std::string::npos && binarized.count(name.substr(0, slash + 1)) > 0;
  };
  ModelFile file;
  file.graph = optimize_for_inference(model.graph, variables, outputs);
  file.inputs = {"input"};
  file.outputs = {file.graph.node(outputs[0].node).name};
  // Binarized weights are stored in 1 bit (ternary: 2) with a scale per channel; pruned ones
  // sparse where that is smaller; loading restores them dense.
  std::set<int> weights;
  for (const WeightUse& use : weight_uses(file.graph)) weights.insert(use.weight.node);
  for (const Node& n : file.graph.nodes()) {
    if (n.op != op_names::kConst || !weights.count(n.id)) continue;
    const Tensor& value = n.attrs.get_tensor("value");
    if (trained_binarized(n.name)) {
      if (const std::optional<quant::SignedLevels> levels = quant::signed_levels(value)) {
        file.encoded_weights[n.name] =
            levels->ternary ? quant::encode_ternary(value) : quant::encode_binary(value);
        continue;
      }
    }
    if (value.numel() >= kMinSparseElements)
      if (auto sparse = sparse_if_smaller(value)) file.encoded_weights[n.name] = std::move(*sparse);
  }
  file.metadata = {{"producer", "slimflow 0.1.0"},
                   {"source", run_dir},
                   {"model", spec.name},
                   // Training fed pixels / 255; classify applies (pixel - mean) / std.
                   {"input_mean", "0"},
                   {"input_std", "255"}};
  return file;
}

}  // namespace sf
