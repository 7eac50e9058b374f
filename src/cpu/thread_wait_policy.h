// How OpenMP's idle threads wait, chosen by how busy the cores are.
//
// libgomp's idle threads spin (up to 300,000 pauses, milliseconds) before they sleep. On cores
// that other processes share, a spinning thread holds the core its descheduled teammate needs,
// and every parallel region then waits for that teammate: beside one busy process on this
// 2-core machine, mobilenet_v2 at batch 1 took 150-250 ms per run with libgomp's default and
// 12-19 ms with OMP_WAIT_POLICY=passive. On idle cores spinning is what makes small parallel
// regions fast, so passive waiting is chosen only when the cores are busy.
//
// libgomp reads OMP_WAIT_POLICY once, when it loads, before main runs: a process that wants
// another policy starts a new image of itself with the variable set (see the slimflow
// command's main).
#pragma once

#include <string>
#include <vector>

namespace sf {

// Whether a process about to use OpenMP should restart with OMP_WAIT_POLICY=passive: only when
// the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT (the values, or null) and other tasks
// are running now (`others_running`, besides this process) on a machine where this process
// may use `cores` cores: one of its threads would then wait for a core while the others spin.
// Not the 1-minute load average: it stays high for a minute after a build has ended and the
// cores are idle again (batch-1 latencies were 2-4x worse for it), and it is slow to see a
// process that has just started.
bool should_wait_passively(const char* omp_wait_policy, const char* gomp_spincount,
                           int others_running, int cores);

// Tasks of other processes running or ready to run now: the runnable count of /proc/loadavg
// less this process's own runnable threads and those of pipeline_readers(stdout), the median
// of 5 samples a millisecond apart (one sample can catch a short-lived task: a shell, a
// compiler's driver); -1 when unreadable. Calls within a second of a reading return that
// reading. The readers are left out because they start with this process and wait for its
// output: `slimflow bench --json | jq` found jq starting up (20-30 ms of work) in every run and
// waited passively, which made a small model's batch-1 latency 3.4x worse.
int other_tasks_running();

// The processes downstream of `fd` when it is a pipe: those whose standard input is that pipe,
// those whose standard input is one of those processes' standard output, and so on (`slimflow
// ... | tee out.json | jq ...` gives tee and jq). Empty when `fd` is not a pipe; processes
// this one may not inspect are left out.
std::vector<int> pipeline_readers(int fd);

// The same decision for this process, from its environment, other_tasks_running() and its CPU
// affinity mask: why it should wait passively ("2 other tasks running on 2 cores"), or "" when
// it should not (or the count cannot be read).
std::string reason_to_wait_passively();

// The environment variable by which a process that restarted itself with passive waiting tells
// its new image why.
inline constexpr const char* kWaitPolicyReasonVariable = "SLIMFLOW_WAIT_POLICY_CHOSEN";

// What this process's OpenMP threads do while idle, for reports: "passive (2 other tasks
// running on 2 cores)", "active (OMP_WAIT_POLICY)", "spin, then sleep (libgomp's default)", ...
std::string thread_wait_policy();

}  // namespace sf
