// Whether a loop of a few microseconds runs faster split over the threads or whole on the
// calling thread, decided for one call site by timing both on its first runs.
//
// Below ~10 us of work neither always wins: a libgomp parallel region costs 1.2 us empty and
// ~2 us around a few microseconds of work in these VMs, and how that compares with half the
// loop differs between machines of the same kind. Deep-MNIST's XNOR conv2 at batch 1 took
// 7.2 us whole and 9.5 us split on one 2-core AMD EPYC, 12 us whole and 8.7 us split on
// another. A fixed threshold is wrong on one of them; measuring is right on both.
#pragma once

#include <algorithm>
#include <chrono>
#include <limits>

#include "cpu/thread_count.h"

namespace sf {

class MeasuredSplit {
 public:
  // How many timed runs each way before deciding; the first run of each way is not timed
  // (buffers are sized and caches filled then).
  static constexpr int kTimedRuns = 8;

  // Runs run(split) once. A loop of less than `may_pay` work never splits, one of `always_pays`
  // or more always does (when several threads may run); in between, the first runs alternate
  // the two ways and time them, and then the faster (by its quickest run) is kept.
  template <class Run>
  void run(double work, double may_pay, double always_pays, const Run& run) {
    if (work < may_pay || !several_threads()) return run(false);
    if (work >= always_pays) return run(true);
    if (decided_) return run(split_);
    const bool split = runs_ % 2 == 1;
    const auto start = std::chrono::steady_clock::now();
    run(split);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (runs_ >= 2) best_[split] = std::min(best_[split], seconds);
    if (++runs_ == 2 * (kTimedRuns + 1)) {
      decided_ = true;
      split_ = best_[1] < best_[0];
    }
  }

  // The way kept, once decided (for tests).
  bool decided() const { return decided_; }
  bool split() const { return split_; }

 private:
  int runs_ = 0;
  double best_[2] = {std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::infinity()};
  bool decided_ = false;
  bool split_ = false;
};

}  // namespace sf
