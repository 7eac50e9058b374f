// Distinct cores for the CPU devices of a partitioned run.
//
// Each device's thread (and the OpenMP team it starts, which inherits its cores) is pinned to
// its own cores, so two devices never share one while other cores sit idle. Pinning needs as
// many cores as all devices' threads together; with fewer, nothing is pinned and the
// placement log says so. Nor is anything pinned when other processes' tasks are running
// (cpu/thread_wait_policy.h's other_tasks_running): a thread pinned to a busy core waits for
// it while another core is free (Deep-MNIST split over 2 devices on 2 cores at a load average
// of 7: 435-586 images/s pinned, 785-992 not).
#pragma once

#include <string>
#include <vector>

namespace sf {

struct CorePlan {
  std::vector<std::vector<int>> cores;  // by device, in the order given; empty: not pinned
  std::string note;                     // for the placement log
};

// `devices` are canonical names, the same list (in any order) in every process of a job: a
// device's slot is its place in sorted order, so the processes of a job on one machine take
// different cores.
CorePlan plan_device_cores(const std::vector<std::string>& devices, int threads_per_device);
// The same with `others_running` tasks of other processes running (the one above counts them).
CorePlan plan_device_cores(const std::vector<std::string>& devices, int threads_per_device,
                           int others_running);

// Restricts the calling thread to `cores` (threads it starts inherit them).
void pin_this_thread(const std::vector<int>& cores);

}  // namespace sf
