// Partitioning: a placed graph split into one graph per device.
//
// Each cross-device edge (an output read on another device) becomes a Recv node on the
// consumer's side, keyed by the edge (`edge_key`); the producer's side sends the output under
// the same key as soon as it is computed (the runtime does that: runtime/partitioned_run.h).
// Nodes keep their names, so a device's graph reads like the part of the model it runs, and
// their order, so every device runs its nodes in one global topological order: a Recv waits
// only for an earlier node of the graph, which is why no placement can deadlock a step.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "placement/placer.h"

namespace sf {

struct DevicePart {
  std::string device;
  Graph graph;
  std::vector<int> local_of;  // by node id of the placed graph: its id here, -1 when elsewhere
};

struct Partition {
  std::vector<DevicePart> parts;  // in order of their first node
  std::vector<TransferEdge> transfers;
  std::vector<std::string> keys;  // by transfer: its rendezvous key
};

// "<producer>:<output>-><device>": the same in every process of a job.
std::string edge_key(const Graph& graph, const TransferEdge& edge);

// Splits the `needed` nodes of a graph whose `Node::device`s are set (by place()).
Partition partition_graph(const Graph& placed, const std::vector<bool>& needed);

}  // namespace sf
