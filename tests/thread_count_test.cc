#include "cpu/thread_count.h"

#include <gtest/gtest.h>
#include <omp.h>

#include "core/error.h"
#include "core/limits.h"
#include "cpu/thread_wait_policy.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

TEST(ThreadCount, SetsTheTeamSizeOfLaterParallelRegions) {
  const int before = omp_get_max_threads();
  use_threads(3);
  EXPECT_EQ(omp_get_max_threads(), 3);
  int team = 0;
#pragma omp parallel
  {
#pragma omp single
    team = omp_get_num_threads();
  }
  EXPECT_EQ(team, 3);
  use_threads(before);
}

TEST(ThreadCount, ZeroKeepsOpenMPsDefault) {
  const int before = omp_get_max_threads();
  use_threads(0);
  EXPECT_EQ(omp_get_max_threads(), before);
}

TEST(ThreadCount, MoreThanTheLimitIsAnError) {
  try {
    use_threads(limits::kMaxThreads + 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected at most 1024"), std::string::npos) << e.what();
  }
}

// Passive waiting only on busy cores, and never over the user's own setting.
TEST(ThreadWaitPolicy, PassiveOnlyWhenTheCoresAreBusyAndTheUserChoseNothing) {
  EXPECT_TRUE(should_wait_passively(nullptr, nullptr, 1, 2));
  EXPECT_TRUE(should_wait_passively(nullptr, nullptr, 9, 2));
  EXPECT_TRUE(should_wait_passively(nullptr, nullptr, 1, 16));
  EXPECT_FALSE(should_wait_passively(nullptr, nullptr, 0, 2));  // idle cores, whatever came before
  EXPECT_FALSE(should_wait_passively("active", nullptr, 9, 2));
  EXPECT_FALSE(should_wait_passively(nullptr, "300000", 9, 2));
  EXPECT_FALSE(should_wait_passively(nullptr, nullptr, 5, 0));
}

}  // namespace
}  // namespace sf
