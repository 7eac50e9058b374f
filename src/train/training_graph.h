// The graph a training step runs (the model, its loss against the labels or a teacher, the
// gradients of every parameter, rewritten for speed) and its evaluation on a test set.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "io/dataset.h"
#include "models/spec.h"
#include "train/distillation.h"
#include "train/trainer.h"

namespace sf {

class Communicator;
class Session;

// The batch of evaluation runs.
inline constexpr int64_t kEvalBatch = 200;

struct TrainingGraph {
  Model model;
  Output labels;
  Output teacher_logits;  // distillation only
  Output loss;            // what training minimizes
  Output label_loss;      // cross-entropy against the labels (the test loss)
  Output probs;
  std::vector<Output> grads;
  int first_backward = 0;  // the node gradients() added first
  // With micro-batches, evaluation runs micro-batch 0's copy (model.input, labels, label_loss,
  // probs) and a training step feeds every copy's (input, labels) and fetches step_probs.
  std::vector<std::pair<Output, Output>> micro_batch_inputs;
  Output step_probs;
};

// The training graph of `spec` for batches of `batch`: the loss against the labels, or with a
// distillation against the teacher's logits too; the gradients of every parameter; the
// training rewrites (transforms/training_passes.h) applied. Throws sf::Error when a parameter
// does not affect the loss or the teacher's classes differ from the spec's.
TrainingGraph build_training_graph(const ModelSpec& spec, int64_t batch,
                                   const Distillation* distillation = nullptr);

// The training graph of a batch in `micro_batches` micro-batches (train/micro_batches.h);
// `step` is one micro-batch's.
TrainingGraph micro_batched(TrainingGraph step, int64_t micro_batches);

// Test accuracy and loss over `test` in batches of kEvalBatch.
EvalResult evaluate(Session& session, const TrainingGraph& t, const Dataset& test);

// Every rank evaluates its share of the test set; the counts are summed.
EvalResult evaluate_sharded(Session& session, const TrainingGraph& t, const Dataset& test,
                            Communicator& comm);

// How many rows of `probs` [N, classes] have their largest value at the label.
int64_t count_correct(const Tensor& probs, const Tensor& labels);

}  // namespace sf
