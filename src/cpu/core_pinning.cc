#include "cpu/core_pinning.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>

#include <algorithm>

#include "cpu/thread_wait_policy.h"

namespace sf {

namespace {

std::vector<int> allowed_cores() {
  std::vector<int> cores;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

}  // namespace

CorePlan plan_device_cores(const std::vector<std::string>& devices, int threads_per_device) {
  return plan_device_cores(devices, threads_per_device, other_tasks_running());
}

CorePlan plan_device_cores(const std::vector<std::string>& devices, int threads_per_device,
                           int others_running) {
  CorePlan plan;
  const std::vector<int> cores = allowed_cores();
  const size_t threads = static_cast<size_t>(std::max(threads_per_device, 1));
  const size_t needed = devices.size() * threads;
  if (devices.size() < 2 || cores.size() < needed) {
    plan.note = fmt::format("threads not pinned: {} device(s) x {} thread(s) need {} cores, this "
                            "process may use {}",
                            devices.size(), threads, needed, cores.size());
    return plan;
  }
  if (others_running >= 1) {
    plan.note = fmt::format("threads not pinned: the cores are busy ({} other task{} running on "
                            "{} cores)",
                            others_running, others_running == 1 ? "" : "s", cores.size());
    return plan;
  }
  std::vector<std::string> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> parts;
  for (const std::string& device : devices) {
    const size_t slot = static_cast<size_t>(
        std::find(sorted.begin(), sorted.end(), device) - sorted.begin());
    plan.cores.emplace_back(cores.begin() + static_cast<std::ptrdiff_t>(slot * threads),
                            cores.begin() + static_cast<std::ptrdiff_t>((slot + 1) * threads));
    parts.push_back(fmt::format("{} on core{} {}", device, threads > 1 ? "s" : "",
                                fmt::join(plan.cores.back(), ",")));
  }
  plan.note = fmt::format("threads pinned: {}", fmt::join(parts, "; "));
  return plan;
}

void pin_this_thread(const std::vector<int>& cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores) CPU_SET(c, &set);
  // Best effort: a refused mask (a container's cpuset changed under us) leaves the thread free.
  (void)sched_setaffinity(0, sizeof(set), &set);
}

}  // namespace sf
