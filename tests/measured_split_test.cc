#include "cpu/measured_split.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <thread>
#include <vector>

#include "cpu/thread_count.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// Runs `split` through `runs` calls with `work` and returns the ways it ran, one per call; a run
// the `slow_way` sleeps 3 ms more than the other.
std::vector<bool> ways(MeasuredSplit& split, int runs, double work, bool slow_way) {
  std::vector<bool> ran;
  for (int i = 0; i < runs; ++i)
    split.run(work, 10, 100, [&](bool way) {
      ran.push_back(way);
      if (way == slow_way) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    });
  return ran;
}

class MeasuredSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    before_ = omp_get_max_threads();
    use_threads(2);
  }
  void TearDown() override { use_threads(before_); }
  int before_ = 1;
};

TEST_F(MeasuredSplitTest, SmallWorkStaysWholeAndLargeWorkAlwaysSplits) {
  MeasuredSplit small, large;
  for (bool way : ways(small, 30, 5, false)) EXPECT_FALSE(way);
  for (bool way : ways(large, 30, 100, true)) EXPECT_TRUE(way);
  EXPECT_FALSE(small.decided());
  EXPECT_FALSE(large.decided());
}

TEST_F(MeasuredSplitTest, TimesBothWaysThenKeepsTheFaster) {
  const int measuring = 2 * (MeasuredSplit::kTimedRuns + 1);
  for (bool slow_way : {false, true}) {
    MeasuredSplit split;
    const std::vector<bool> ran = ways(split, measuring + 5, 50, slow_way);
    for (int i = 0; i < measuring; ++i) EXPECT_EQ(ran[static_cast<size_t>(i)], i % 2 == 1) << i;
    ASSERT_TRUE(split.decided());
    EXPECT_EQ(split.split(), !slow_way);
    for (size_t i = measuring; i < ran.size(); ++i) EXPECT_EQ(ran[i], !slow_way) << i;
  }
}

TEST_F(MeasuredSplitTest, OneThreadNeverSplits) {
  use_threads(1);
  MeasuredSplit split;
  for (bool way : ways(split, 30, 1000, false)) EXPECT_FALSE(way);
}

}  // namespace
}  // namespace sf
