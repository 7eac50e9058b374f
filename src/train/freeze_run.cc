#include "train/freeze_run.h"

#include <set>

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
  ModelFile file;
  file.graph = optimize_for_inference(model.graph, variables, outputs);
  file.inputs = {"input"};
  file.outputs = {file.graph.node(outputs[0].node).name};
  // Pruned weights are stored sparse where that is smaller; loading restores them dense.
  std::set<int> weights;
  for (const WeightUse& use : weight_uses(file.graph)) weights.insert(use.weight.node);
  for (const Node& n : file.graph.nodes())
    if (n.op == op_names::kConst && weights.count(n.id) &&
        n.attrs.get_tensor("value").numel() >= kMinSparseElements)
      if (auto sparse = sparse_if_smaller(n.attrs.get_tensor("value")))
        file.encoded_weights[n.name] = std::move(*sparse);
  file.metadata = {{"producer", "slimflow 0.1.0"},
                   {"source", run_dir},
                   {"model", spec.name},
                   // Training fed pixels / 255; classify applies (pixel - mean) / std.
                   {"input_mean", "0"},
                   {"input_std", "255"}};
  return file;
}

}  // namespace sf
