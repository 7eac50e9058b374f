// A training run: the directory `slimflow train` writes, whose checkpoint.sfck holds the
// variables ("variables/<name>"), the optimizer's state ("optimizer/<name>") and JSON metadata
// naming the model spec the run trains and its options. Resuming, fine-tuning (--init-from),
// evaluating, freezing and pruning all open a run through this one type.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "graph/variable_store.h"
#include "models/spec.h"
#include "train/checkpoint.h"

namespace sf {

// The checkpoint file of a run directory.
std::string checkpoint_path(const std::string& run_dir);
// Name prefixes of a run's checkpoint tensors.
inline constexpr const char* kVariablePrefix = "variables/";
inline constexpr const char* kOptimizerPrefix = "optimizer/";

class TrainingRun {
 public:
  // Reads the run's checkpoint and the model spec its metadata holds. Throws a one-line
  // sf::Error: "<dir>: not a training run (no <dir>/checkpoint.sfck)", the checkpoint's own
  // errors, "<checkpoint>: checkpoint metadata is not a slimflow run: <what is wrong>", or the
  // spec's errors.
  explicit TrainingRun(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::string& checkpoint_file() const { return checkpoint_file_; }
  const ModelSpec& spec() const { return spec_; }
  const Checkpoint& checkpoint() const { return checkpoint_; }
  const nlohmann::json& metadata() const { return metadata_; }

  // `read(metadata())`, with a missing or mistyped field reported as metadata that is not a
  // slimflow run (the one-line error above).
  template <typename Read>
  auto read_metadata(Read&& read) const {
    try {
      return read(metadata_);
    } catch (const nlohmann::json::exception& e) {
      fail_metadata(e);
    }
  }

  // The "variables/..." tensors by variable name.
  std::map<std::string, Tensor> variables() const;
  // The "optimizer/..." tensors by slot name (Optimizer::restore takes them).
  std::map<std::string, Tensor> optimizer_state() const;

  // Copies the checkpoint's value of every parameter and state variable of `model` into
  // `store`, checking each against the graph's type; a missing one is an error naming it. With
  // `initialize_missing_state`, state the checkpoint lacks starts from its initializer instead
  // (a float run fine-tuned with --qat has no learned activation ranges yet).
  void restore_variables(VariableStore& store, const Model& model,
                         bool initialize_missing_state = false) const;

 private:
  [[noreturn]] void fail_metadata(const nlohmann::json::exception& e) const;

  std::string dir_;
  std::string checkpoint_file_;
  Checkpoint checkpoint_;
  nlohmann::json metadata_;
  ModelSpec spec_;
};

}  // namespace sf
