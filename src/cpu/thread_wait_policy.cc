#include "cpu/thread_wait_policy.h"

#include <sched.h>

#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

namespace sf {

bool should_wait_passively(const char* omp_wait_policy, const char* gomp_spincount,
                           double load_average, int cores) {
  if (omp_wait_policy != nullptr || gomp_spincount != nullptr) return false;
  return cores > 0 && load_average >= cores;
}

std::string reason_to_wait_passively() {
  double load = 0.0;
  std::ifstream in("/proc/loadavg");
  if (!(in >> load)) return "";
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  if (!should_wait_passively(std::getenv("OMP_WAIT_POLICY"), std::getenv("GOMP_SPINCOUNT"), load,
                             cores))
    return "";
  return fmt::format("load average {:.2f} on {} cores", load, cores);
}

std::string thread_wait_policy() {
  if (const char* policy = std::getenv("OMP_WAIT_POLICY")) {
    const char* reason = std::getenv(kWaitPolicyReasonVariable);
    if (reason != nullptr && *reason != '\0') return std::string(policy) + " (" + reason + ")";
    return std::string(policy) + " (OMP_WAIT_POLICY)";
  }
  if (const char* spins = std::getenv("GOMP_SPINCOUNT"))
    return "spin " + std::string(spins) + " times, then sleep (GOMP_SPINCOUNT)";
  return "spin, then sleep (libgomp's default)";
}

}  // namespace sf
