#include "train/training_graph.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "autodiff/gradients.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "train/micro_batches.h"
#include "transforms/training_passes.h"

namespace sf {

TrainingGraph build_training_graph(const ModelSpec& spec, int64_t batch,
                                   const Distillation* distillation) {
  TrainingGraph t{build_model(spec, batch), {}, {}, {}, {}, {}, {}};
  Graph& g = t.model.graph;
  t.labels = ops::placeholder(g, DType::i32, {batch}, "labels");
  if (distillation) {
    if (distillation->classes != spec.classes)
      fail("distill: the teacher has {} classes, the student {} ({}) has {}",
           distillation->classes, spec.name, spec.origin, spec.classes);
    t.label_loss = ops::softmax_cross_entropy(g, t.model.logits, t.labels, "label_loss");
    t.teacher_logits =
        ops::placeholder(g, DType::f32, {batch, distillation->classes}, "teacher_logits");
    t.loss = distillation_loss(g, t.model.logits, t.teacher_logits, t.label_loss,
                               distillation->temperature, distillation->alpha);
  } else {
    t.loss = t.label_loss = ops::softmax_cross_entropy(g, t.model.logits, t.labels, "loss");
  }
  t.probs = Output{t.label_loss.node, 1};
  std::vector<Output> wrt;
  for (const Parameter& p : t.model.parameters) wrt.push_back(p.output);
  t.first_backward = g.num_nodes();
  t.grads = gradients(g, t.loss, wrt);
  for (size_t i = 0; i < wrt.size(); ++i)
    if (!t.grads[i].valid())
      fail("{}: parameter '{}' does not affect the loss", spec.origin,
           t.model.parameters[i].name);
  // The training rewrites, every output the loop holds mapped along.
  std::vector<Output*> held = {&t.model.input, &t.model.logits, &t.labels,
                               &t.loss,        &t.label_loss,   &t.probs};
  if (t.teacher_logits.valid()) held.push_back(&t.teacher_logits);
  for (Parameter& p : t.model.parameters) held.push_back(&p.output);
  for (MovingAverage& m : t.model.moving_averages) held.push_back(&m.batch_value);
  for (Output& grad : t.grads) held.push_back(&grad);
  std::vector<Output> outputs;
  for (const Output* o : held) outputs.push_back(*o);
  // The rewrite keeps the nodes' order and names, not their ids: the gradient seed is found
  // again by name.
  const std::string seed = t.model.graph.node(t.first_backward).name;
  t.model.graph = rewrite_training_graph(t.model.graph, outputs);
  t.first_backward = t.model.graph.id_of(seed);
  for (size_t i = 0; i < held.size(); ++i) *held[i] = outputs[i];
  t.step_probs = t.probs;
  return t;
}

TrainingGraph micro_batched(TrainingGraph step, int64_t micro_batches) {
  MicroBatchGraph mb = micro_batch_graph(
      StepGraph{.graph = &step.model.graph,
                .first_backward = step.first_backward,
                .fed = {step.model.input, step.labels},
                .loss = step.loss,
                .probs = step.probs,
                .grads = step.grads},
      micro_batches);
  TrainingGraph t;
  t.model = std::move(step.model);
  t.model.graph = std::move(mb.graph);
  for (Parameter& p : t.model.parameters) p.output = Output{t.model.graph.id_of(p.name), 0};
  t.model.input = mb.fed[0][0];
  t.labels = mb.fed[0][1];
  t.model.logits = Output{};  // one per micro-batch
  t.label_loss = mb.losses[0];
  t.probs = mb.probs[0];
  t.loss = mb.loss;
  t.step_probs = mb.probs_all;
  t.grads = mb.grads;
  for (const auto& fed : mb.fed) t.micro_batch_inputs.emplace_back(fed[0], fed[1]);
  return t;
}

int64_t count_correct(const Tensor& probs, const Tensor& labels) {
  const int64_t n = probs.dim(0), classes = probs.dim(1);
  const float* p = probs.data<float>();
  const int32_t* y = labels.data<int32_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = p + i * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (row[c] > row[best]) best = c;
    correct += best == y[i];
  }
  return correct;
}

EvalResult evaluate(Session& session, const TrainingGraph& t, const Dataset& test) {
  BatchIterator it(test, BatchOptions{.batch_size = kEvalBatch, .seed = 0, .shuffle = false});
  Tensor images, labels;
  EvalResult result;
  double loss_sum = 0.0;
  int64_t correct = 0;
  while (it.next(images, labels)) {
    Feeds feeds = {{t.model.input, images}, {t.labels, labels}};
    // Shapes are re-inferred over the whole graph for the evaluation batch, so the teacher's
    // input (which the test loss does not read) gets a placeholder of that batch.
    if (t.teacher_logits.valid()) {
      Tensor unused(DType::f32, {labels.numel(), t.model.graph.type(t.teacher_logits).shape[1]});
      std::fill(unused.data<float>(), unused.data<float>() + unused.numel(), 0.0f);
      feeds.emplace_back(t.teacher_logits, unused);
    }
    auto out = session.run(feeds, {t.label_loss, t.probs}, false);
    loss_sum += static_cast<double>(*out[0].data<float>()) * static_cast<double>(labels.numel());
    correct += count_correct(out[1], labels);
    result.count += labels.numel();
  }
  result.accuracy = result.count ? static_cast<double>(correct) / static_cast<double>(result.count) : 0.0;
  result.loss = result.count ? loss_sum / static_cast<double>(result.count) : 0.0;
  return result;
}

EvalResult evaluate_sharded(Session& session, const TrainingGraph& t, const Dataset& test,
                            Communicator& comm) {
  const int64_t n = test.size(), world = comm.size(), r = comm.rank();
  EvalResult local;
  const int64_t begin = n * r / world, end = n * (r + 1) / world;
  if (end > begin) local = evaluate(session, t, rows(test, begin, end));
  Tensor counts(DType::i64, {2});
  counts.data<int64_t>()[0] = std::llround(local.accuracy * static_cast<double>(local.count));
  counts.data<int64_t>()[1] = local.count;
  Tensor loss(DType::f32, {1});
  loss.data<float>()[0] = static_cast<float>(local.loss * static_cast<double>(local.count));
  comm.allreduce(counts, ReduceOp::sum, "test counts");
  comm.allreduce(loss, ReduceOp::sum, "test loss");
  EvalResult result;
  result.count = counts.data<int64_t>()[1];
  if (result.count > 0) {
    result.accuracy = static_cast<double>(counts.data<int64_t>()[0]) / static_cast<double>(result.count);
    result.loss = static_cast<double>(loss.data<float>()[0]) / static_cast<double>(result.count);
  }
  return result;
}

}  // namespace sf
