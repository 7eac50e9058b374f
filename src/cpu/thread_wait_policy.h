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

namespace sf {

// Whether a process about to use OpenMP should restart with OMP_WAIT_POLICY=passive: only when
// the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT (the values, or null) and the
// 1-minute load average is at least the number of cores this process may use.
bool should_wait_passively(const char* omp_wait_policy, const char* gomp_spincount,
                           double load_average, int cores);

// The same decision for this process, from its environment, /proc/loadavg and its CPU
// affinity mask: why it should wait passively ("load average 9.70 on 2 cores"), or "" when it
// should not (or the load cannot be read).
std::string reason_to_wait_passively();

// The environment variable by which a process that restarted itself with passive waiting tells
// its new image why.
inline constexpr const char* kWaitPolicyReasonVariable = "SLIMFLOW_WAIT_POLICY_CHOSEN";

// What this process's OpenMP threads do while idle, for reports: "passive (load average 9.70
// on 2 cores)", "active (OMP_WAIT_POLICY)", "spin, then sleep (libgomp's default)", ...
std::string thread_wait_policy();

}  // namespace sf
