// Knowledge distillation (Hinton et al. 2015): a student learns from a teacher's softened
// outputs as well as from the labels. The objective is
//   alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T)) + (1 - alpha) * CE(labels)
// (T^2 keeps the soft term's gradient on the scale of the hard one as T grows). The training
// loop feeds the teacher's logits for each batch; they come from the teacher model on the fly,
// or from a cache of the whole training set computed once when inputs never change.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"
#include "io/dataset.h"

namespace sf {

struct Distillation {
  double temperature = 1.0;  // > 0
  double alpha = 0.5;        // weight of the soft term, in [0, 1]
  int64_t classes = 0;       // the teacher's class count, checked against the student's
  // The teacher's logits f32 [n, classes] for images f32 [n, H, W, C] as the data set holds
  // them (pixels / 255); any n.
  std::function<Tensor(const Tensor& images)> teacher_logits;
  // How the run was taught (teacher, temperature, alpha), kept in the run's metadata so that
  // the run can be resumed with the same teacher.
  nlohmann::json description;
};

// Throws a one-line sf::Error unless T > 0 and alpha is in [0, 1] (both finite).
void check_distillation_weights(double temperature, double alpha);

// The distillation objective as graph nodes (a scalar named "loss"), built from the student's
// logits [N, C], the teacher's logits [N, C] (fed, not trained) and `label_loss`, the
// student's cross-entropy against the labels. Its gradient reaches the student's logits only.
Output distillation_loss(Graph& g, Output student_logits, Output teacher_logits,
                         Output label_loss, double temperature, double alpha);

// The teacher's logits for the training batches. With `cache`, the teacher runs once over the
// whole training set (in batches of `batch`) and each batch gathers its rows; otherwise it runs
// on every batch's images (which augmentation changes from epoch to epoch).
class TeacherOutputs {
 public:
  TeacherOutputs(const Distillation& distillation, const Dataset& train, bool cache,
                 int64_t batch, const std::function<void(const std::string&)>& message);

  // Logits [rows, classes] for `images` [rows, ...], whose examples are train[indices[i]].
  Tensor for_batch(const Tensor& images, const std::vector<int64_t>& indices);

  // How many times the teacher model ran (tests count them).
  int64_t teacher_runs() const { return teacher_runs_; }

 private:
  Tensor run_teacher(const Tensor& images);

  const Distillation& distillation_;
  Tensor cache_;  // [N, classes] when caching
  int64_t teacher_runs_ = 0;
};

}  // namespace sf
