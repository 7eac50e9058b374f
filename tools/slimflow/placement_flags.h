// The placement flags of train, bench and run: --device, --cpu-devices, --device-threads,
// --strict-placement and --log-placement[=FILE].
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "placement/placer.h"

namespace sf::cli {

struct PlacementFlags {
  std::string device = "/cpu:0";
  int cpu_devices = 0;  // 0: one per core
  int device_threads = 1;
  bool strict = false;
  CLI::Option* log = nullptr;  // given: write the log to log_file, or stderr when empty
  std::string log_file;
};

void add_placement_flags(CLI::App* cmd, PlacementFlags& flags);

// The process's devices for --cpu-devices.
DeviceSet device_set(const PlacementFlags& flags);
PlacementOptions placement_options(const PlacementFlags& flags);

// Writes the placement log where --log-placement asked (nothing when it was not given): stderr
// or FILE (replaced atomically), as text or, with `json`, one JSON object.
void write_placement_log(const PlacementFlags& flags, const Graph& graph,
                         const PlacementReport& report, bool json);

}  // namespace sf::cli
