// Optimizers and learning-rate schedules. Updates run in place on the variable store's tensors;
// per-variable state (momentum, Adam moments) lives in slots that checkpoints save.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace sf {

struct OptimizerConfig {
  std::string kind = "adam";  // sgd | momentum | adam
  double momentum = 0.9;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  // Decoupled weight decay (AdamW-style for adam; added to the gradient for sgd/momentum).
  double weight_decay = 0.0;
  // Adam only: the second moment comes from set_second_moment() instead of the gradients apply()
  // receives, and each step is at most the learning rate per weight. For one-bit compressed data
  // parallelism, whose decoded gradients carry a chunk's mean magnitude for every float: a
  // second moment of those loses Adam's per-weight scaling.
  bool second_moment_from_outside = false;
};

// Elements [begin, end) of a tensor.
struct ElementRange {
  int64_t begin = 0;
  int64_t end = -1;  // -1: to the last element
};

class Optimizer {
 public:
  explicit Optimizer(OptimizerConfig config);
  const OptimizerConfig& config() const { return config_; }

  // Call once per training step before apply(); Adam's bias correction depends on it.
  void begin_step() { ++steps_; }
  // `rounded`, when set, gets the updated param rounded to bf16 as codec/weight_codec.h's
  // float_to_bf16 rounds (the next run's bf16 products read it: Session::bf16_for_next_run).
  // Only the elements in `part` move (all by default), and only their slots: each rank of
  // sharded data parallelism updates its own part (train/data_parallel.h).
  void apply(const std::string& name, Tensor& param, const Tensor& grad, double lr, bool decay,
             uint16_t* rounded = nullptr, ElementRange part = {});

  // With second_moment_from_outside: Adam's second moment of `variable` (its shape) is `v`, an
  // average of squared gradients over `steps` steps, until the next call.
  void set_second_moment(const std::string& variable, const Tensor& v, int64_t steps);
  int64_t second_moment_steps() const { return second_moment_steps_; }

  // Multiplies every slot of `variable` by `mask` (0/1, the variable's shape), so that pruned
  // weights carry no momentum that would move them off zero.
  void mask_state(const std::string& variable, const Tensor& mask);

  // Slots by "<kind>/<slot>/<variable>", plus the step counts, for checkpoints.
  std::map<std::string, Tensor> state() const;
  void restore(const std::map<std::string, Tensor>& tensors);
  int64_t steps() const { return steps_; }
  // The slots this kind keeps per variable (state() keys are "<kind>/<slot>/<variable>").
  std::vector<std::string> slot_names() const;
  // Slot `slot_name` of `variable` (aliasing the optimizer's own); an error if it has none yet.
  Tensor slot_value(const std::string& slot_name, const std::string& variable) const;

 private:
  Tensor& slot(const std::string& slot_name, const std::string& variable, const Tensor& like);
  std::string slot_key(const std::string& slot_name, const std::string& variable) const;
  OptimizerConfig config_;
  std::map<std::string, Tensor> slots_;
  int64_t steps_ = 0;
  int64_t second_moment_steps_ = 0;  // of the last set_second_moment()
};

// "sgd", "momentum", "adam"; throws sf::Error otherwise.
void check_optimizer_kind(const std::string& kind);

struct LrSchedule {
  std::string kind = "constant";  // constant | step | cosine
  double base = 1e-3;
  int64_t total_steps = 1;
  // constant: base; step: base x0.1 after 50% and again after 75% of training;
  // cosine: from base down to 0 along a half cosine.
  double at(int64_t step) const;
};
void check_lr_schedule(const std::string& kind);

}  // namespace sf
