#include "placement_flags.h"

#include <cstdio>

#include "cli_hygiene.h"
#include "io/atomic_file.h"

namespace sf::cli {

void add_placement_flags(CLI::App* cmd, PlacementFlags& flags) {
  cmd->add_option("--device", flags.device,
                  "Default device of nodes the model places nowhere: /cpu:N, /gpu:N (no GPU "
                  "kernels here: soft placement falls back to /cpu:0) or /job:NAME/task:K/cpu:N")
      ->default_str("/cpu:0");
  cmd->add_option("--cpu-devices", flags.cpu_devices,
                  "CPU devices of this process, /cpu:0 to /cpu:N-1 (default: one per core)")
      ->check(CLI::Range(1, DeviceSet::kMaxCpuDevices));
  cmd->add_option("--device-threads", flags.device_threads,
                  "Threads of each device when the model spans several devices")
      ->default_val(1)
      ->check(at_least(1));
  cmd->add_flag("--strict-placement", flags.strict,
                "A node whose device has no kernel for it is an error (default: it moves to the "
                "CPU and the placement log says why)");
  flags.log = cmd->add_option("--log-placement", flags.log_file,
                              "Print where each node runs and why (summary first) to stderr, or "
                              "with =FILE to FILE; with --json as one JSON object")
                  ->expected(0, 1);
}

DeviceSet device_set(const PlacementFlags& flags) {
  return DeviceSet(flags.cpu_devices > 0 ? flags.cpu_devices : default_cpu_devices());
}

PlacementOptions placement_options(const PlacementFlags& flags) {
  return PlacementOptions{.default_device = flags.device,
                          .soft = !flags.strict,
                          .colocate = {},
                          .device_threads = flags.device_threads};
}

void write_placement_log(const PlacementFlags& flags, const Graph& graph,
                         const PlacementReport& report, bool json) {
  if (flags.log == nullptr || flags.log->count() == 0) return;
  const std::string text =
      json ? placement_json(graph, report) + "\n" : placement_log(graph, report);
  if (flags.log_file.empty()) {
    std::fputs(text.c_str(), stderr);
    return;
  }
  AtomicFile file(flags.log_file, "placement log");
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace sf::cli
