// The communicator over real MPI jobs: tests/mpi/comm_check runs a scenario on each rank of an
// `mpirun -np 2` job on this machine. Every job is bounded by `timeout`, which also ends
// mpirun's processes; a build without MPI skips these tests.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "comm/communicator.h"
#include "support/cli.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

#ifdef SLIMFLOW_COMM_CHECK

using testing::run_shell;

testing::CliResult run_scenario(const std::string& scenario, const std::string& args = "") {
  return run_shell(std::string("timeout -k 5 60 ") + SLIMFLOW_MPIRUN + " -np 2 " +
                   SLIMFLOW_COMM_CHECK + " " + scenario + " " + args);
}

TEST(Communicator, CollectivesGiveEveryRankTheSameResult) {
  auto r = run_scenario("collectives");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("rank 0 ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1 ok"), std::string::npos) << r.out;
}

TEST(Communicator, PointToPointCarriesEveryDtypeEmptyAndLargeTensors) {
  auto r = run_scenario("p2p");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("rank 1 ok"), std::string::npos) << r.out;
}

TEST(Communicator, ReceiveOfAnotherShapeOrDtypeNamesTagPeerAndTypes) {
  auto shape = run_scenario("shape-mismatch");
  EXPECT_NE(shape.exit_code, 0);
  EXPECT_NE(shape.out.find("slimflow: error: rank 1: receive of tag 7 from rank 0: expected "
                           "f32[3,2], got f32[2,3]"),
            std::string::npos)
      << shape.out;
  auto dtype = run_scenario("dtype-mismatch");
  EXPECT_NE(dtype.out.find("expected f32[3,2], got i32[3,2]"), std::string::npos) << dtype.out;
  auto larger = run_scenario("larger-message");
  EXPECT_NE(larger.out.find("expected f32[3,2], got f32[4,4]"), std::string::npos) << larger.out;
}

TEST(Communicator, ReplicaChecksumsStopTheJobNamingTheRanksThatDrifted) {
  auto agree = run_scenario("replicas-agree");
  EXPECT_EQ(agree.exit_code, 0) << agree.out;
  auto drift = run_scenario("replicas-drift");
  EXPECT_NE(drift.exit_code, 0);
  // Every rank compares the checksums; the first to stop the job prints its line.
  const std::string error = "step 7: the replicas drifted: the parameters of rank(s) 1 differ "
                            "from rank 0's";
  EXPECT_TRUE(drift.out.find("slimflow: error: rank 0: " + error) != std::string::npos ||
              drift.out.find("slimflow: error: rank 1: " + error) != std::string::npos)
      << drift.out;
}

TEST(Communicator, HungPeerEndsTheJobAfterTheTimeoutNamingTheRank) {
  const auto start = std::chrono::steady_clock::now();
  auto r = run_scenario("hung-peer", "2");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(seconds, 45.0) << r.out;  // a bound on a hang, not a timing claim
  EXPECT_NE(r.out.find("slimflow: error: rank 0: allreduce of gradients got no answer in 2 s"),
            std::string::npos)
      << r.out;
}

TEST(Communicator, RingAverageGivesEveryRankTheSameAverageOnTwoAndThreeRanks) {
  for (const char* ranks : {"2", "3"}) {
    auto r = run_shell(std::string("timeout -k 5 60 ") + SLIMFLOW_MPIRUN + " -np " + ranks + " " +
                       SLIMFLOW_COMM_CHECK + " ring-average");
    EXPECT_EQ(r.exit_code, 0) << ranks << " ranks\n" << r.out;
    EXPECT_NE(r.out.find("rank 1 ok"), std::string::npos) << r.out;
  }
}

TEST(DataParallel, OneBitBucketsShareTheRanksOwnSecondMomentsOnTwoAndThreeRanks) {
  for (const char* ranks : {"2", "3"}) {
    auto r = run_shell(std::string("timeout -k 5 60 ") + SLIMFLOW_MPIRUN + " -np " + ranks + " " +
                       SLIMFLOW_COMM_CHECK + " second-moments");
    EXPECT_EQ(r.exit_code, 0) << ranks << " ranks\n" << r.out;
    EXPECT_NE(r.out.find("rank 1 ok"), std::string::npos) << r.out;
  }
}

TEST(Communicator, RingAverageWithAHungPeerNamesTheOperationAndTheRank) {
  auto r = run_scenario("ring-hung-peer", "2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("slimflow: error: rank 0: allreduce of gradients (step 3): "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("from rank 1 got no answer in 2 s"), std::string::npos) << r.out;
}

TEST(Communicator, KilledPeerEndsTheJobNamingTheRank) {
  auto r = run_scenario("dead-peer");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("signal 9"), std::string::npos) << r.out;
}

#endif

TEST(Communicator, LauncherEnvironmentGivesWorldSizeAndRank) {
  ::setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  ::setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  EXPECT_EQ(launched_world_size(), 3);
  EXPECT_EQ(launched_rank(), 2);
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  if (std::getenv("PMI_SIZE") == nullptr) {
    EXPECT_EQ(launched_world_size(), 1);
  }
}

}  // namespace
}  // namespace sf
