// GPipe-style micro-batches (`train --micro-batches M`): one training step's graph with the
// batch cut into M equal micro-batches, so that devices holding consecutive stages of a model
// work on different micro-batches at once.
//
// The graph holds M copies of the step's forward pass and loss (nodes `NAME/mbK`), in order of
// K, then M copies of its backward pass in reverse order (the last micro-batch's first, as its
// forward pass ends last), each followed by the accumulation of its weight gradients; the
// variables are shared. Every device runs its nodes in this one global topological order
// (runtime/partitioned_run.h), so a step still cannot deadlock, and a device holding early
// layers computes micro-batch K+1's forward pass while the next device computes micro-batch
// K's. Cross-device edges are keyed by their producer's name, which carries the micro-batch.
//
// Each copy's gradient seed is 1/M instead of 1, so the accumulated gradient of a step whose
// loss is a mean over its micro-batch (b examples) is the gradient of the mean over the whole
// batch (M x b examples): the optimizer then takes one step with the whole batch's update.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace sf {

// One training step's graph for one micro-batch.
struct StepGraph {
  const Graph* graph = nullptr;
  // Nodes [0, first_backward) are the forward pass and the loss; the rest (from the gradient
  // seed, a scalar 1) were added by gradients().
  int first_backward = 0;
  std::vector<Output> fed;  // the placeholders a step feeds (input, labels)
  Output loss;              // scalar, a mean over the micro-batch
  Output probs;             // [micro-batch, classes]
  std::vector<Output> grads;  // by parameter
};

struct MicroBatchGraph {
  Graph graph;
  std::vector<std::vector<Output>> fed;  // by micro-batch: StepGraph::fed's copies
  std::vector<Output> losses, probs;     // by micro-batch
  Output loss;   // the mean of the micro-batches' losses
  Output probs_all;  // the micro-batches' probs in order, [M x micro-batch, classes]
  std::vector<Output> grads;  // by parameter: accumulated over the micro-batches
};

// `micro_batches` >= 2.
MicroBatchGraph micro_batch_graph(const StepGraph& step, int64_t micro_batches);

}  // namespace sf
