#include "cpu/parallel_for.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <vector>

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// Restores the calling thread's team size when a test ends.
class ParallelFor : public ::testing::Test {
 protected:
  void TearDown() override { omp_set_num_threads(saved_); }
  const int saved_ = omp_get_max_threads();
};

// How many times each index of [0, n) was visited, and by how many threads in all.
struct Visits {
  std::vector<std::atomic<int>> count;
  std::atomic<int> calls{0};
  explicit Visits(int64_t n) : count(static_cast<size_t>(n)) {}
};

TEST_F(ParallelFor, VisitsEachIndexOnceWithAnyThreadCountAndRange) {
  for (int threads : {1, 2, 3, 7})
    for (int64_t n : {0, 1, 2, 5, 64, 1001})
      for (bool worth : {false, true}) {
        omp_set_num_threads(threads);
        Visits v(n + 3);
        parallel_for(3, n + 3, worth, [&](int64_t begin, int64_t end) {
          ++v.calls;
          for (int64_t i = begin; i < end; ++i) ++v.count[static_cast<size_t>(i)];
        });
        for (int64_t i = 0; i < n + 3; ++i)
          EXPECT_EQ(v.count[static_cast<size_t>(i)], i < 3 ? 0 : 1)
              << "index " << i << " of [3, " << n + 3 << "), " << threads << " threads";
        // Without threads to split over, or work worth them, the loop runs whole, in one call.
        if (threads == 1 || !worth) {
          EXPECT_EQ(v.calls, n > 0 ? 1 : 0);
        }
        if (threads > 1 && worth) {
          EXPECT_LE(v.calls, threads);
        }
      }
}

TEST_F(ParallelFor, SharesAreContiguousAndInOrderOfThreads) {
  omp_set_num_threads(4);
  std::vector<int> owner(100, -1);
  parallel_for(0, 100, true, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) owner[static_cast<size_t>(i)] = omp_get_thread_num();
  });
  for (size_t i = 1; i < owner.size(); ++i) EXPECT_LE(owner[i - 1], owner[i]) << "index " << i;
  EXPECT_EQ(owner.front(), 0);
  EXPECT_EQ(owner.back(), 3);
}

TEST_F(ParallelFor, RegionWorksharingLoopsRunWholeWithOrWithoutATeam) {
  for (int threads : {1, 3})
    for (bool worth : {false, true}) {
      omp_set_num_threads(threads);
      Visits v(50);
      std::atomic<int> members{0};
      parallel_region(worth, [&] {
        ++members;
#pragma omp for
        for (int64_t i = 0; i < 50; ++i) ++v.count[static_cast<size_t>(i)];
      });
      for (int64_t i = 0; i < 50; ++i)
        EXPECT_EQ(v.count[static_cast<size_t>(i)], 1) << "index " << i;
      EXPECT_EQ(members, worth ? threads : 1);
    }
}

// A kernel run by one thread of an outer team (as each device's thread runs its nodes) must
// still cover its whole loop: a worksharing loop there would otherwise bind to the outer team
// and leave each caller a part of it.
TEST_F(ParallelFor, InsideAnotherTeamEachCallerCoversItsWholeLoop) {
  omp_set_num_threads(2);
  std::vector<int> covered(2, 0);
#pragma omp parallel num_threads(2)
  {
    const int caller = omp_get_thread_num();
    std::vector<int> seen(40, 0);
    parallel_region(false, [&] {
#pragma omp for
      for (int64_t i = 0; i < 40; ++i) ++seen[static_cast<size_t>(i)];
    });
    parallel_for(0, 40, false, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ++seen[static_cast<size_t>(i)];
    });
    int whole = 1;
    for (int s : seen) whole &= s == 2;
    covered[static_cast<size_t>(caller)] = whole;
  }
  EXPECT_EQ(covered, (std::vector<int>{1, 1}));
}

}  // namespace
}  // namespace sf
