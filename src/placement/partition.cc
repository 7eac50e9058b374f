#include "placement/partition.h"

#include <fmt/format.h>

#include <map>

#include "core/error.h"
#include "ops/op_names.h"

namespace sf {

std::string edge_key(const Graph& graph, const TransferEdge& edge) {
  return fmt::format("{}:{}->{}", graph.node(edge.from.node).name, edge.from.index, edge.to_device);
}

Partition partition_graph(const Graph& placed, const std::vector<bool>& needed) {
  SF_CHECK(needed.size() == static_cast<size_t>(placed.num_nodes()), "needed has {} entries",
           needed.size());
  Partition partition;
  partition.transfers = transfer_edges(placed, needed);
  std::map<std::pair<Output, std::string>, size_t> transfer_of;
  for (size_t t = 0; t < partition.transfers.size(); ++t) {
    const TransferEdge& e = partition.transfers[t];
    partition.keys.push_back(edge_key(placed, e));
    transfer_of[{e.from, e.to_device}] = t;
  }

  std::map<std::string, size_t> part_of;
  auto part_for = [&](const std::string& device) -> DevicePart& {
    auto [it, inserted] = part_of.emplace(device, partition.parts.size());
    if (inserted) {
      partition.parts.push_back(DevicePart{device, Graph{}, {}});
      partition.parts.back().local_of.assign(static_cast<size_t>(placed.num_nodes()), -1);
    }
    return partition.parts[it->second];
  };

  // Recv nodes by (edge, device), made just before their first reader so that each device's
  // order stays the graph's.
  std::map<std::pair<Output, std::string>, int> recv_of;
  for (int id = 0; id < placed.num_nodes(); ++id) {
    if (!needed[static_cast<size_t>(id)]) continue;
    const Node& node = placed.node(id);
    DevicePart& part = part_for(node.device);
    std::vector<Output> inputs;
    for (const Output& in : node.inputs) {
      const Node& producer = placed.node(in.node);
      if (producer.device == node.device) {
        inputs.push_back(Output{part.local_of[static_cast<size_t>(in.node)], in.index});
        continue;
      }
      auto [it, inserted] = recv_of.emplace(std::make_pair(in, node.device), -1);
      if (inserted) {
        const TensorType& type = placed.type(in);
        const size_t t = transfer_of.at({in, node.device});
        std::string name = fmt::format("{}/recv:{}", producer.name, in.index);
        while (placed.find(name) >= 0 || part.graph.find(name) >= 0) name += "_";
        it->second = part.graph.add_node(op_names::kRecv, {},
                                         {{"edge", partition.keys[t]},
                                          {"dtype", std::string(dtype_name(type.dtype))},
                                          {"shape", type.shape}},
                                         name);
        part.graph.mutable_node(it->second).device = node.device;
      }
      inputs.push_back(Output{it->second, 0});
    }
    const int local = part.graph.add_node(node.op, std::move(inputs), node.attrs, node.name);
    Node& copy = part.graph.mutable_node(local);
    copy.device = node.device;
    copy.requested_device = node.requested_device;
    part.local_of[static_cast<size_t>(id)] = local;
  }
  return partition;
}

}  // namespace sf
