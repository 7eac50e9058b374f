#include "train/training_run.h"

#include <filesystem>
#include <random>

#include "models/initializers.h"

namespace sf {

namespace {

// The tensors whose names start with `prefix`, by the rest of their names.
std::map<std::string, Tensor> with_prefix(const Checkpoint& checkpoint, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, value] : checkpoint.tensors)
    if (name.rfind(prefix, 0) == 0) out[name.substr(prefix.size())] = value;
  return out;
}

}  // namespace

std::string checkpoint_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "checkpoint.sfck").string();
}

TrainingRun::TrainingRun(const std::string& dir)
    : dir_(dir), checkpoint_file_(checkpoint_path(dir)) {
  if (!std::filesystem::exists(checkpoint_file_))
    fail("{}: not a training run (no {})", dir_, checkpoint_file_);
  checkpoint_ = load_checkpoint(checkpoint_file_);
  try {
    metadata_ = nlohmann::json::parse(checkpoint_.metadata_json);
    spec_ = parse_model_spec(metadata_.at("model_spec").get<std::string>(),
                             metadata_.at("model_origin").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    fail_metadata(e);
  }
}

void TrainingRun::fail_metadata(const nlohmann::json::exception& e) const {
  fail("{}: checkpoint metadata is not a slimflow run: {}", checkpoint_file_, e.what());
}

std::map<std::string, Tensor> TrainingRun::variables() const {
  return with_prefix(checkpoint_, kVariablePrefix);
}

std::map<std::string, Tensor> TrainingRun::optimizer_state() const {
  return with_prefix(checkpoint_, kOptimizerPrefix);
}

void TrainingRun::restore_variables(VariableStore& store, const Model& model,
                                    bool initialize_missing_state) const {
  auto restore = [&](const std::string& name) {
    auto it = checkpoint_.tensors.find(kVariablePrefix + name);
    if (it == checkpoint_.tensors.end())
      fail("{}: checkpoint has no value for variable '{}'", checkpoint_file_, name);
    const TensorType& want = model.graph.node(model.graph.id_of(name)).outputs[0];
    if (it->second.shape() != want.shape || it->second.dtype() != want.dtype)
      fail("{}: variable '{}' is {}{} in the checkpoint, the model expects {}", checkpoint_file_,
           name, dtype_name(it->second.dtype()), shape_str(it->second.shape()), type_str(want));
    store.set(name, it->second.clone());
  };
  for (const Parameter& p : model.parameters) restore(p.name);
  std::mt19937_64 unused_rng(0);
  for (const auto& [name, init] : model.state) {
    if (initialize_missing_state && !checkpoint_.tensors.count(kVariablePrefix + name)) {
      Tensor value(DType::f32, model.graph.node(model.graph.id_of(name)).outputs[0].shape);
      initialize(value, init, 1, 1, unused_rng);
      store.set(name, value);
      continue;
    }
    restore(name);
  }
}

}  // namespace sf
