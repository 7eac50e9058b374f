// Device names and the devices of this process.
//
// A device is named `/cpu:N` or `/gpu:N` in one process, and `/job:NAME/task:K/cpu:N` for the
// processes of an MPI job (task K is rank K). Names are parsed once, with a one-line error
// naming what was expected; the canonical form is what the placement log prints and what
// `Node::device` holds after placement.
#pragma once

#include <string>
#include <vector>

namespace sf {

struct DeviceName {
  std::string job;   // empty: this process
  int task = -1;     // -1 with an empty job
  std::string type;  // "cpu" or "gpu"
  int index = 0;

  // Throws sf::Error "<where>: device 'x' is not ..." for anything else. `where` names the
  // flag, spec layer or node the name came from.
  static DeviceName parse(const std::string& text, const std::string& where);
  std::string str() const;
  bool operator==(const DeviceName&) const = default;
};

// The devices this process runs kernels on: `cpu_devices` CPU devices, each with its own
// thread(s), sharing the process's memory. GPU names are recognised but no GPU device exists
// here (no kernel is registered for "gpu"), which is what soft placement falls back from.
class DeviceSet {
 public:
  static constexpr int kMaxCpuDevices = 64;

  // `job_tasks` > 0: this process is task `task` of a job named `job` with that many tasks,
  // and the job's devices (`/job:J/task:K/cpu:N`) are known; `/cpu:N` then means this task's.
  explicit DeviceSet(int cpu_devices, std::string job = "", int job_tasks = 0, int task = 0);

  int cpu_devices() const { return cpu_devices_; }
  // Every device a node may be placed on, canonical names, this process's first.
  const std::vector<std::string>& names() const { return names_; }
  // The canonical name of a device of this set, or a one-line error: unknown index or task,
  // a job name this process does not belong to. GPU names are returned as they are (they
  // exist as names, with no kernels).
  std::string resolve(const DeviceName& name, const std::string& where) const;
  // Whether a canonical device runs in this process.
  bool is_local(const std::string& device) const;
  // This process's CPU device `index` (`/cpu:N`, or the job form in a job).
  std::string local_cpu(int index) const;

 private:
  int cpu_devices_;
  std::string job_;
  int job_tasks_;
  int task_;
  std::vector<std::string> names_;
};

// CPU devices when the user names no count: one per core (at most kMaxCpuDevices).
int default_cpu_devices();

}  // namespace sf
