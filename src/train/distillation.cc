#include "train/distillation.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/ops.h"

namespace sf {

void check_distillation_weights(double temperature, double alpha) {
  if (!std::isfinite(temperature) || temperature <= 0.0)
    fail("distill: --temperature must be a positive number, got {}", temperature);
  if (!std::isfinite(alpha) || alpha < 0.0 || alpha > 1.0)
    fail("distill: --alpha must be in [0, 1], got {}", alpha);
}

Output distillation_loss(Graph& g, Output student_logits, Output teacher_logits,
                         Output label_loss, double temperature, double alpha) {
  check_distillation_weights(temperature, alpha);
  const Shape student = g.type(student_logits).shape;
  const Shape teacher = g.type(teacher_logits).shape;
  if (student != teacher)
    fail("distill: teacher logits {} vs student logits {}: class counts differ",
         shape_str(teacher), shape_str(student));
  const auto inv_t = static_cast<float>(1.0 / temperature);
  Output soft_teacher = ops::softmax(
      g, ops::mul(g, teacher_logits, ops::scalar(g, inv_t, "distill/inv_t_teacher")),
      "distill/soft_teacher");
  Output soft_student_logits =
      ops::mul(g, student_logits, ops::scalar(g, inv_t, "distill/inv_t"), "distill/student_t");
  // KL(q || p) = CE(q, p) - H(q): the cross-entropy against the teacher's soft targets has the
  // KL's gradient, and the teacher's entropy (constant for the student) makes the value a KL
  // divergence, zero when the student matches. max(q, tiny) keeps 0 * log 0 at 0.
  Output soft_ce = ops::softmax_cross_entropy(g, soft_student_logits, soft_teacher, "distill/soft_ce");
  Output q_log_q = ops::mul(
      g, soft_teacher,
      ops::log(g, ops::maximum(g, soft_teacher, ops::scalar(g, 1e-30f, "distill/tiny"))));
  const auto rows = static_cast<float>(student[0]);
  Output neg_entropy = ops::mul(g, ops::reduce_sum(g, q_log_q, {0, 1}),
                                ops::scalar(g, 1.0f / rows, "distill/inv_rows"),
                                "distill/neg_entropy");
  Output kl = ops::add(g, soft_ce, neg_entropy, "distill/kl");
  const auto soft_weight = static_cast<float>(alpha * temperature * temperature);
  const auto hard_weight = static_cast<float>(1.0 - alpha);
  return ops::add(g, ops::mul(g, kl, ops::scalar(g, soft_weight, "distill/soft_weight")),
                  ops::mul(g, label_loss, ops::scalar(g, hard_weight, "distill/hard_weight")),
                  "loss");
}

TeacherOutputs::TeacherOutputs(const Distillation& distillation, const Dataset& train, bool cache,
                               int64_t batch,
                               const std::function<void(const std::string&)>& message)
    : distillation_(distillation) {
  if (!distillation_.teacher_logits) fail("distill: no teacher");
  if (!cache) return;
  const int64_t n = train.size();
  cache_ = Tensor(DType::f32, {n, distillation_.classes});
  BatchIterator it(train, BatchOptions{.batch_size = batch, .shuffle = false});
  Tensor images, labels;
  int64_t row = 0;
  while (it.next(images, labels)) {
    Tensor logits = run_teacher(images);
    std::memcpy(cache_.data<float>() + row * distillation_.classes, logits.data<float>(),
                static_cast<size_t>(logits.numel()) * sizeof(float));
    row += images.dim(0);
  }
  if (message)
    message(fmt::format("distill: teacher logits of {} training examples cached ({} teacher runs)",
                        n, teacher_runs_));
}

Tensor TeacherOutputs::run_teacher(const Tensor& images) {
  Tensor logits = distillation_.teacher_logits(images);
  ++teacher_runs_;
  const Shape want = {images.dim(0), distillation_.classes};
  if (logits.dtype() != DType::f32 || logits.shape() != want)
    fail("distill: the teacher returned {}{} for {} images, expected logits f32{}",
         dtype_name(logits.dtype()), shape_str(logits.shape()), images.dim(0), shape_str(want));
  return logits;
}

Tensor TeacherOutputs::for_batch(const Tensor& images, const std::vector<int64_t>& indices) {
  if (!cache_.defined()) return run_teacher(images);
  const int64_t classes = distillation_.classes;
  const auto rows = static_cast<int64_t>(indices.size());
  Tensor out(DType::f32, {rows, classes});
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data<float>() + r * classes, cache_.data<float>() + indices[r] * classes,
                static_cast<size_t>(classes) * sizeof(float));
  return out;
}

}  // namespace sf
