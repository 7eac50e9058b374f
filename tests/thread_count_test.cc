#include "cpu/thread_count.h"

#include <gtest/gtest.h>
#include <omp.h>

#include "core/error.h"
#include "core/limits.h"

namespace sf {
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

}  // namespace
}  // namespace sf
