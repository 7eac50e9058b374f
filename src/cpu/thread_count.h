// The thread count of the parallel kernels (OpenMP, which oneDNN uses too), set only after the
// process has shown it can start that many threads. When libgomp cannot create a thread it
// prints its own message and exits the process, so a memory or thread limit (ulimit -v, -u, a
// container's pids limit) would end a run without our error; a probe that starts the same
// number of threads first turns that into an sf::Error.
#pragma once

#include <omp.h>

namespace sf {

// Sets the count for parallel regions started by the calling thread: `threads` > 0, or 0 for
// OpenMP's default (all cores, or OMP_NUM_THREADS). Throws sf::Error, saying how many threads
// could be started, when the process cannot start that many or the count exceeds
// limits::kMaxThreads. Probes once per count: a count no larger than one already shown to
// start costs nothing.
void use_threads(int threads);

// Whether a parallel region started by the calling thread would have more than one thread. Kernels
// start one only then: libgomp ends even a one-thread region with a futex wake, a system call
// (1.2 us a region in this VM, more than many batch-1 layers take in all).
bool several_threads();

// Runs the calling thread's next parallel regions (oneDNN's included) on one thread, restoring
// the count it had when it ends. oneDNN fixes a primitive's thread count when it is created, so
// a primitive meant to run on one thread is created under this as well as executed under it.
class OneThread {
 public:
  OneThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

}  // namespace sf
