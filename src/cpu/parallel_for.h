// Loops split over OpenMP's threads only where that pays. libgomp ends every parallel region,
// even one its if clause made serial, with a futex wake: a system call, 1.2 us a region in this
// VM, more than many batch-1 layers take in all. So a loop below the work at which threads
// help, or with one thread to run on, runs on the calling thread without entering a region.
#pragma once

#include <omp.h>

#include <cstdint>

#include "cpu/thread_count.h"

namespace sf {

// body(lo, hi) over [begin, end): one contiguous share per thread of a team (as a static
// schedule) when `worth_threads` and more than one thread may run, else the whole range at once
// on the calling thread. The body loops over its share itself, so it is called once per thread
// and its loop vectorizes as a plain one does.
template <class Body>
void parallel_for(int64_t begin, int64_t end, bool worth_threads, const Body& body) {
  if (end <= begin) return;
  if (worth_threads && several_threads()) {
#pragma omp parallel
    {
      const int64_t n = end - begin, threads = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t lo = begin + n * t / threads, hi = begin + n * (t + 1) / threads;
      if (lo < hi) body(lo, hi);
    }
  } else {
    body(begin, end);
  }
}

// region() on a team of threads when `worth_threads` and more than one thread may run, else once
// on the calling thread (thread number 0 of 1). Its worksharing loops (#pragma omp for) split
// over the team, or run whole; inside another thread's region they would bind to that region,
// so there region() gets a team of its own, of one thread.
template <class Region>
void parallel_region(bool worth_threads, const Region& region) {
  if (worth_threads && several_threads()) {
#pragma omp parallel
    region();
  } else if (omp_in_parallel()) {
#pragma omp parallel num_threads(1)
    region();
  } else {
    region();
  }
}

}  // namespace sf
