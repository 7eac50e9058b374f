#include "cpu/thread_count.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

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

// A process that waits, reading `in` on its standard input and writing its standard output to
// `out`, until it is killed.
pid_t start_pipeline_stage(int in, int out) {
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    for (;;) pause();
  }
  return pid;
}

// What reads this process's output through a pipe, directly or through another stage, is
// found (and so not counted as load); a pipe no one reads and a file have no readers.
TEST(ThreadWaitPolicy, FindsTheProcessesDownstreamOfAPipe) {
  int first[2], second[2], unread[2];
  ASSERT_EQ(pipe(first), 0);
  ASSERT_EQ(pipe(second), 0);
  ASSERT_EQ(pipe(unread), 0);
  // The last stage writes to a file: were it the test's own output, a pipe when the test's
  // output is piped, whatever reads that would be downstream too.
  const int null = open("/dev/null", O_WRONLY);
  const pid_t tee = start_pipeline_stage(first[0], second[1]);
  const pid_t jq = start_pipeline_stage(second[0], null);
  ASSERT_GT(tee, 0);
  ASSERT_GT(jq, 0);
  // The children set up their standard streams soon after fork.
  std::vector<int> readers;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((readers = pipeline_readers(first[1])).size() < 2 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(readers, (std::vector<int>{tee, jq}));
  EXPECT_EQ(pipeline_readers(second[1]), std::vector<int>{jq});
  EXPECT_TRUE(pipeline_readers(unread[1]).empty());
  const int file = open("/proc/self/stat", O_RDONLY);
  EXPECT_TRUE(pipeline_readers(file).empty());
  close(file);
  for (const pid_t pid : {tee, jq}) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  for (int fd : {first[0], first[1], second[0], second[1], unread[0], unread[1], null}) close(fd);
}

}  // namespace
}  // namespace sf
