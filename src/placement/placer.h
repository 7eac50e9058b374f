// Placement: which device runs each node, and why.
//
// In the documented order: a node's own request (`Node::requested_device`); its colocation
// group's (a gradient with its forward op, a variable with its gradient, a user's
// `colocate_with`: every member of a group shares one device, and two different requests in
// one group are an error); the device of its first input; the default device. Soft placement
// (on by default) then moves a node whose device has no kernel for its op and dtype to the
// CPU of the same process, and records why; strict placement makes that an error.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "placement/device_name.h"

namespace sf {

struct PlacementOptions {
  std::string default_device = "/cpu:0";
  bool soft = true;  // false: --strict-placement
  // Pairs of node names that must share a device (e.g. each variable and its gradient).
  std::vector<std::pair<std::string, std::string>> colocate;
  int device_threads = 1;  // for the placement log's note on pinning threads to cores
};

struct NodePlacement {
  std::string device;
  // "requested", "colocated with X", "inherited from input Y", "default device", each
  // followed by "; soft fallback from /gpu:0: no gpu kernel for MatMul f32" when moved.
  std::string reason;
};

// One cross-device edge: output `from` is read on `to_device` (once, however many nodes there
// read it), moving `bytes` per step.
struct TransferEdge {
  Output from;
  std::string from_device;
  std::string to_device;
  int64_t bytes = 0;
};

struct PlacementReport {
  std::vector<NodePlacement> nodes;  // by node id
  std::vector<TransferEdge> transfers;
  std::vector<std::string> devices;  // the devices that got nodes, in the device set's order
  // With several devices: whether (and where) their threads are pinned to cores of their own
  // (cpu/core_pinning.h), as the partitioned run does.
  std::string pinning;
};

// Places every node of `graph` (setting `Node::device`) and reports why. Throws sf::Error
// naming the node for malformed or unknown devices, unknown `colocate_with` nodes, conflicting
// requests in one colocation group and, when strict, a device without a kernel.
PlacementReport place(Graph& graph, const DeviceSet& devices, const PlacementOptions& options);

// The cross-device edges among `needed` nodes (all when empty), in consumer order.
std::vector<TransferEdge> transfer_edges(const Graph& graph, const std::vector<bool>& needed = {});

// The placement log: a per-device summary first (nodes, FLOPs, parameter bytes), then one line
// per node with its reason, then every transfer with its bytes per step.
std::string placement_log(const Graph& graph, const PlacementReport& report);
// The same as one JSON object: {"devices": [...], "nodes": [...], "transfers": [...]}.
std::string placement_json(const Graph& graph, const PlacementReport& report);

}  // namespace sf
