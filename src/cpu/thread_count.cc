#include "cpu/thread_count.h"

#include <omp.h>

#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/limits.h"

namespace sf {
namespace {

// The largest team shown to start in this process: libgomp keeps its threads once started.
std::atomic<int> proven_threads{1};

// Starts threads - 1 threads (the calling thread is the team's first) and holds them all alive
// at once, as an OpenMP team does, with the same default stack size libgomp uses.
void probe_thread_start(int threads) {
  std::atomic<bool> release{false};
  std::vector<std::thread> started;
  started.reserve(static_cast<size_t>(threads - 1));
  std::string failure;
  try {
    while (static_cast<int>(started.size()) < threads - 1)
      started.emplace_back([&release] { release.wait(false); });
  } catch (const std::system_error& e) {
    failure = e.code().message();
  }
  release = true;
  release.notify_all();
  for (std::thread& t : started) t.join();
  if (!failure.empty())
    fail(
        "cannot start {} threads for the parallel kernels: only {} could be started ({}); ask "
        "for fewer with --threads or OMP_NUM_THREADS, or raise the process's limits (ulimit "
        "-v, ulimit -u)",
        threads, started.size() + 1, failure);
}

}  // namespace

void use_threads(int threads) {
  const int team = threads > 0 ? threads : omp_get_max_threads();
  if (team > limits::kMaxThreads)
    fail("{} threads requested{}; expected at most {}", team,
         threads > 0 ? "" : " by OMP_NUM_THREADS", limits::kMaxThreads);
  if (team > proven_threads.load()) {
    probe_thread_start(team);
    int proven = proven_threads.load();
    while (proven < team && !proven_threads.compare_exchange_weak(proven, team)) {
    }
  }
  if (threads > 0) omp_set_num_threads(threads);
}

bool several_threads() { return omp_get_max_threads() > 1; }

}  // namespace sf
