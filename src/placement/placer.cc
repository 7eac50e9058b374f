#include "placement/placer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"
#include "cpu/core_pinning.h"
#include "graph/op_registry.h"
#include "kernels/kernel.h"
#include "ops/op_names.h"

namespace sf {

namespace {

bool is_source(const std::string& op) {
  return op == op_names::kPlaceholder || op == op_names::kVariable || op == op_names::kConst;
}

int64_t output_bytes(const TensorType& type) {
  return num_elements(type.shape) * static_cast<int64_t>(dtype_size(type.dtype));
}

class Groups {
 public:
  explicit Groups(int n) : parent_(static_cast<size_t>(n)) {
    std::iota(parent_.begin(), parent_.end(), 0);
  }
  int find(int x) {
    while (parent_[static_cast<size_t>(x)] != x)
      x = parent_[static_cast<size_t>(x)] =
          parent_[static_cast<size_t>(parent_[static_cast<size_t>(x)])];
    return x;
  }
  void join(int a, int b) {
    a = find(a), b = find(b);
    if (a != b) parent_[static_cast<size_t>(std::max(a, b))] = std::min(a, b);
  }

 private:
  std::vector<int> parent_;
};

// A group's members for messages: the first few names, then how many more.
std::string group_str(const Graph& graph, Groups& groups, int id) {
  std::vector<std::string> names;
  int count = 0;
  const int root = groups.find(id);
  for (int k = 0; k < graph.num_nodes(); ++k) {
    if (groups.find(k) != root) continue;
    if (++count <= 4) names.push_back(graph.node(k).name);
  }
  if (count == 1) return "none";
  return fmt::format("[{}{}]", fmt::join(names, ", "),
                     count > 4 ? fmt::format(", ... {} in all", count) : "");
}

// The CPU of the process that owns `device`: where soft placement sends what `device` cannot run.
std::string fallback_cpu(const DeviceName& device) {
  return DeviceName{device.job, device.task, "cpu", 0}.str();
}

std::string si(double value) {
  if (value >= 1e9) return fmt::format("{:.2f}G", value / 1e9);
  if (value >= 1e6) return fmt::format("{:.2f}M", value / 1e6);
  if (value >= 1e3) return fmt::format("{:.1f}K", value / 1e3);
  return fmt::format("{:.0f}", value);
}

struct DeviceSummary {
  std::string device;
  int64_t nodes = 0;
  double flops = 0.0;
  int64_t parameter_bytes = 0;
};

std::vector<DeviceSummary> summarize(const Graph& graph, const PlacementReport& report) {
  std::vector<DeviceSummary> out;
  for (const std::string& d : report.devices) out.push_back({d});
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const std::string& device = report.nodes[static_cast<size_t>(id)].device;
    auto it =
        std::find_if(out.begin(), out.end(), [&](const auto& s) { return s.device == device; });
    SF_CHECK(it != out.end(), "device {} of node {} not in the report", device, id);
    ++it->nodes;
    it->flops += node_flops(graph, id);
    const Node& n = graph.node(id);
    if (n.op == op_names::kVariable) it->parameter_bytes += output_bytes(n.outputs[0]);
  }
  return out;
}

std::string output_name(const Graph& graph, Output out) {
  return fmt::format("{}:{}", graph.node(out.node).name, out.index);
}

}  // namespace

PlacementReport place(Graph& graph, const DeviceSet& devices, const PlacementOptions& options) {
  const int n = graph.num_nodes();
  const std::string default_device =
      devices.resolve(DeviceName::parse(options.default_device, "--device"), "--device");

  // Requests, parsed and resolved once.
  std::vector<std::string> requested(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    const Node& node = graph.node(id);
    if (node.requested_device.empty()) continue;
    const std::string where = fmt::format("node '{}' ({})", node.name, node.op);
    requested[static_cast<size_t>(id)] =
        devices.resolve(DeviceName::parse(node.requested_device, where), where);
  }

  Groups groups(n);
  for (int id = 0; id < n; ++id) {
    const Node& node = graph.node(id);
    if (node.colocate_with.empty()) continue;
    const int other = graph.find(node.colocate_with);
    if (other < 0)
      fail("node '{}' ({}): colocate_with '{}' is not a node of the graph", node.name, node.op,
           node.colocate_with);
    groups.join(id, other);
  }
  for (const auto& [a, b] : options.colocate) {
    const int ia = graph.find(a), ib = graph.find(b);
    if (ia < 0 || ib < 0)
      fail("colocation of '{}' with '{}': '{}' is not a node of the graph", a, b, ia < 0 ? a : b);
    groups.join(ia, ib);
  }

  // The member whose request decides each group (the first that has one).
  std::map<int, int> decided_by;
  for (int id = 0; id < n; ++id) {
    if (requested[static_cast<size_t>(id)].empty()) continue;
    auto [it, inserted] = decided_by.emplace(groups.find(id), id);
    const int first = it->second;
    if (!inserted && requested[static_cast<size_t>(first)] != requested[static_cast<size_t>(id)])
      fail(
          "colocation group {}: node '{}' requests {} but node '{}' requests {}, and they must "
          "share a device",
          group_str(graph, groups, id), graph.node(first).name,
          requested[static_cast<size_t>(first)], graph.node(id).name,
          requested[static_cast<size_t>(id)]);
  }

  // A source without a request in a group without one (a variable with its gradient) goes
  // where the group's first computing node goes, placed last.
  std::vector<bool> deferred(static_cast<size_t>(n), false);
  {
    std::map<int, bool> computes;  // group -> has a node with inputs
    for (int id = 0; id < n; ++id)
      if (!graph.node(id).inputs.empty()) computes[groups.find(id)] = true;
    for (int id = 0; id < n; ++id)
      deferred[static_cast<size_t>(id)] =
          graph.node(id).inputs.empty() && requested[static_cast<size_t>(id)].empty() &&
          !decided_by.count(groups.find(id)) && computes.count(groups.find(id));
  }
  std::vector<int> order;
  for (int id = 0; id < n; ++id)
    if (!deferred[static_cast<size_t>(id)]) order.push_back(id);
  for (int id = 0; id < n; ++id)
    if (deferred[static_cast<size_t>(id)]) order.push_back(id);

  PlacementReport report;
  report.nodes.resize(static_cast<size_t>(n));
  std::vector<bool> placed(static_cast<size_t>(n), false);
  std::map<int, int> first_placed;  // group -> its first placed member
  const KernelRegistry& kernels = KernelRegistry::global();
  for (int id : order) {
    const Node& node = graph.node(id);
    const int group = groups.find(id);
    NodePlacement& p = report.nodes[static_cast<size_t>(id)];
    // The first input already placed (a deferred variable is not yet).
    const Output* placed_input = nullptr;
    for (const Output& in : node.inputs)
      if (placed[static_cast<size_t>(in.node)]) {
        placed_input = &in;
        break;
      }
    if (!requested[static_cast<size_t>(id)].empty()) {
      p = {requested[static_cast<size_t>(id)], "requested"};
    } else if (auto it = decided_by.find(group); it != decided_by.end()) {
      p = {requested[static_cast<size_t>(it->second)],
           "colocated with " + graph.node(it->second).name};
    } else if (auto first = first_placed.find(group); first != first_placed.end()) {
      p = {report.nodes[static_cast<size_t>(first->second)].device,
           "colocated with " + graph.node(first->second).name};
    } else if (placed_input != nullptr) {
      p = {report.nodes[static_cast<size_t>(placed_input->node)].device,
           "inherited from input " + graph.node(placed_input->node).name};
    } else {
      p = {default_device, "default device"};
    }
    first_placed.emplace(group, id);

    const DeviceName device = DeviceName::parse(p.device, "placement");
    KernelSpec spec{node, {}};
    for (const Output& in : node.inputs) spec.inputs.push_back(graph.type(in));
    const DType dtype = kernel_dtype(spec);
    const bool runs =
        is_source(node.op) ? device.type == "cpu" : kernels.has_kernel(node.op, device.type, dtype);
    if (!runs) {
      const std::string why =
          is_source(node.op)
              ? fmt::format("no {} memory here", device.type)
              : fmt::format("no {} kernel for {} {}", device.type, node.op, dtype_name(dtype));
      if (!options.soft) {
        std::vector<std::string> with_kernels;
        for (const std::string& d : devices.names()) {
          const DeviceName dn = DeviceName::parse(d, "device set");
          if (is_source(node.op) ? dn.type == "cpu" : kernels.has_kernel(node.op, dn.type, dtype))
            with_kernels.push_back(d);
        }
        fail(
            "node '{}' ({}): {} on {} ({}); devices with kernels: {}; colocation group: {} "
            "(--strict-placement; without it the node moves to {})",
            node.name, node.op, why, p.device, p.reason,
            with_kernels.empty() ? "none" : fmt::format("{}", fmt::join(with_kernels, ", ")),
            group_str(graph, groups, id), fallback_cpu(device));
      }
      p.reason += fmt::format("; soft fallback from {}: {}", p.device, why);
      p.device = fallback_cpu(device);
    }
    graph.mutable_node(id).device = p.device;
    placed[static_cast<size_t>(id)] = true;
  }

  for (const std::string& d : devices.names())
    for (const NodePlacement& p : report.nodes)
      if (p.device == d) {
        report.devices.push_back(d);
        break;
      }
  report.transfers = transfer_edges(graph);
  if (report.devices.size() > 1)
    report.pinning = plan_device_cores(report.devices, options.device_threads).note;
  return report;
}

std::vector<TransferEdge> transfer_edges(const Graph& graph, const std::vector<bool>& needed) {
  std::vector<TransferEdge> edges;
  std::map<std::pair<Output, std::string>, size_t> seen;
  for (int id = 0; id < graph.num_nodes(); ++id) {
    if (!needed.empty() && !needed[static_cast<size_t>(id)]) continue;
    const Node& node = graph.node(id);
    for (const Output& in : node.inputs) {
      const std::string& from = graph.node(in.node).device;
      if (from == node.device) continue;
      if (!seen.emplace(std::make_pair(in, node.device), edges.size()).second) continue;
      edges.push_back(TransferEdge{in, from, node.device, output_bytes(graph.type(in))});
    }
  }
  return edges;
}

std::string placement_log(const Graph& graph, const PlacementReport& report) {
  int64_t transfer_bytes = 0;
  for (const TransferEdge& e : report.transfers) transfer_bytes += e.bytes;
  std::string out =
      fmt::format("placement: {} node{} on {} device{}, {} transfer{} moving {} bytes per step\n",
                  graph.num_nodes(), graph.num_nodes() == 1 ? "" : "s", report.devices.size(),
                  report.devices.size() == 1 ? "" : "s", report.transfers.size(),
                  report.transfers.size() == 1 ? "" : "s", transfer_bytes);
  size_t width = 6;
  for (const std::string& d : report.devices) width = std::max(width, d.size());
  for (const DeviceSummary& s : summarize(graph, report))
    out += fmt::format("  {:<{}}  {:>6} nodes  {:>9} FLOPs  {:>10} parameter bytes\n", s.device,
                       width, s.nodes, si(s.flops), s.parameter_bytes);
  if (!report.pinning.empty()) out += "  " + report.pinning + "\n";
  out += "nodes:\n";
  size_t name_width = 4, op_width = 2;
  for (const Node& n : graph.nodes()) {
    name_width = std::max(name_width, std::min<size_t>(n.name.size(), 40));
    op_width = std::max(op_width, n.op.size());
  }
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const Node& n = graph.node(id);
    const NodePlacement& p = report.nodes[static_cast<size_t>(id)];
    out += fmt::format("  {:<{}}  {:<{}}  {:<{}}  {}\n", n.name, name_width, n.op, op_width,
                       p.device, width, p.reason);
  }
  out += "transfers:\n";
  if (report.transfers.empty()) out += "  none\n";
  for (const TransferEdge& e : report.transfers)
    out += fmt::format("  {}  {} -> {}  {}  {} bytes per step\n", output_name(graph, e.from),
                       e.from_device, e.to_device, type_str(graph.type(e.from)), e.bytes);
  return out;
}

std::string placement_json(const Graph& graph, const PlacementReport& report) {
  nlohmann::json j;
  j["devices"] = nlohmann::json::array();
  for (const DeviceSummary& s : summarize(graph, report))
    j["devices"].push_back({{"device", s.device},
                            {"nodes", s.nodes},
                            {"flops", s.flops},
                            {"parameter_bytes", s.parameter_bytes}});
  j["nodes"] = nlohmann::json::array();
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const Node& n = graph.node(id);
    const NodePlacement& p = report.nodes[static_cast<size_t>(id)];
    j["nodes"].push_back(
        {{"node", n.name}, {"op", n.op}, {"device", p.device}, {"reason", p.reason}});
  }
  j["transfers"] = nlohmann::json::array();
  for (const TransferEdge& e : report.transfers)
    j["transfers"].push_back({{"output", output_name(graph, e.from)},
                              {"from", e.from_device},
                              {"to", e.to_device},
                              {"type", type_str(graph.type(e.from))},
                              {"bytes_per_step", e.bytes}});
  if (!report.pinning.empty()) j["pinning"] = report.pinning;
  return j.dump();
}

}  // namespace sf
