// Synchronous data parallelism: shards, and `slimflow train` under `mpirun -np 2` on this
// machine (each job bounded by `timeout`, which also ends mpirun's processes).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "support/cli.h"
#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/mpi_jobs.h"
#include "train/sharded_batches.h"
#include "train/training_run.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// Examples whose single pixel holds their own index.
Dataset indexed_examples(int64_t n) {
  Dataset d;
  d.name = "indexed";
  d.images = Tensor(DType::f32, {n, 1, 1, 1});
  d.labels = Tensor(DType::i32, {n});
  for (int64_t i = 0; i < n; ++i) {
    d.images.data<float>()[i] = static_cast<float>(i);
    d.labels.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  }
  return d;
}

// The examples each rank of a `world`-rank job takes in `steps` steps from `offset`.
std::vector<int64_t> consume(const Dataset& data, int64_t batch, int world, int64_t epoch,
                             int64_t offset, int64_t steps) {
  std::vector<int64_t> seen;
  for (int r = 0; r < world; ++r) {
    ShardedBatches shard(data, batch, 7, r, world);
    shard.seek(epoch, offset);
    Tensor images, labels;
    for (int64_t s = 0; s < steps && shard.next(images, labels); ++s)
      for (int64_t k = 0; k < batch; ++k)
        seen.push_back(static_cast<int64_t>(images.data<float>()[k]));
  }
  return seen;
}

TEST(ShardedBatches, ShardsAreDisjointAndCoverTheEpochOfOneProcess) {
  const Dataset data = indexed_examples(103);
  for (int world : {1, 2, 3, 4}) {
    const int64_t batch = 5;
    std::vector<int64_t> all = consume(data, batch, world, 2, 0, 1000);
    const int64_t steps = 103 / (batch * world);
    ASSERT_EQ(static_cast<int64_t>(all.size()), steps * batch * world) << world;
    EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), all.size()) << world;
    // The union is what one process with the global batch takes: the first examples of the
    // epoch's order.
    std::vector<int64_t> single = consume(data, batch * world, 1, 2, 0, 1000);
    std::sort(all.begin(), all.end());
    std::sort(single.begin(), single.end());
    EXPECT_EQ(all, single) << world;
  }
}

TEST(ShardedBatches, ResumeWithAnotherWorldSizeNeitherRepeatsNorSkips) {
  const Dataset data = indexed_examples(240);
  // Two ranks x 6 for 7 steps, then three ranks x 4 from where they stopped.
  std::vector<int64_t> first = consume(data, 6, 2, 1, 0, 7);
  const int64_t offset = 7 * 12;
  std::vector<int64_t> rest = consume(data, 4, 3, 1, offset, 1000);
  std::vector<int64_t> all = first;
  all.insert(all.end(), rest.begin(), rest.end());
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), all.size());
  EXPECT_EQ(static_cast<int64_t>(all.size()), 240);  // (240 - 84) is a multiple of 12
  ShardedBatches probe(data, 4, 7, 0, 3);
  probe.seek(1, offset);
  EXPECT_EQ(probe.step_in_epoch(), 7);
}

TEST(ShardedBatches, TooFewExamplesForOneStepIsAnError) {
  try {
    ShardedBatches(indexed_examples(10), 4, 1, 0, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "train: a step of 3 ranks x batch 4 needs 12 examples, the data has 10");
  }
}

#ifdef SLIMFLOW_MPIRUN

using testing::count_lines_starting;
using testing::run_shell;

std::string mpirun(int ranks) { return testing::mpirun_slimflow(ranks, 120); }

// `ranks` ranks x batch `batch` and one process x `ranks` * `batch` train 20 steps to the same
// weights, and to the same optimizer momentum: each rank updates its own part of every
// parameter, and the ranks share their parts of the momentum before a checkpoint.
void expect_ranks_match_one_process(int ranks, int64_t batch) {
  const std::string dir = testing::make_temp_dir("dp-equal");
  const std::string spec = testing::write_deterministic_cnn_spec(dir, 256);
  const std::string common = "train --model " + spec + " --data mnist --train-limit " +
                             std::to_string(20 * ranks * batch) +
                             " --test-limit 200 --epochs 1 "
                             "--optimizer momentum --lr 0.05 --threads 1 --quiet --json "
                             // fp32 even on AMX: a bf16 product's error exceeds the tolerance
                             // this test sets for summing a batch in parts.
                             "--precision fp32 ";
  auto one = testing::run_cli(common + "--batch " + std::to_string(ranks * batch) + " --out " +
                              dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  auto many = run_shell(mpirun(ranks) + common + "--batch " + std::to_string(batch) +
                        " --lr-scaling none --bucket-mb 0.05 --check-replicas 5 --out " + dir +
                        "/many");
  ASSERT_EQ(many.exit_code, 0) << many.out;
  EXPECT_NE(many.out.find("\"world_size\":" + std::to_string(ranks)), std::string::npos)
      << many.out;
  EXPECT_NE(many.out.find("\"global_batch\":" + std::to_string(ranks * batch)),
            std::string::npos)
      << many.out;
  EXPECT_NE(many.out.find("\"step\":20"), std::string::npos) << many.out;
  // fc1's gradient [784, 256] crossed as its factors x [batch, 784] and dy [batch, 256].
  EXPECT_NE(many.out.find("\"factored_gradients\":1"), std::string::npos) << many.out;
  EXPECT_EQ(count_lines_starting(many.out, "epoch 1/1"), 1) << "rank 0 alone reports\n"
                                                            << many.out;
  const TrainingRun run_one(dir + "/one"), run_many(dir + "/many");
  std::map<std::string, Tensor> a = run_one.variables(), b = run_many.variables();
  int velocities = 0;
  for (const auto& [name, value] : run_one.checkpoint().tensors)
    if (name.rfind(std::string(kOptimizerPrefix) + "momentum/velocity/", 0) == 0) {
      a[name] = value;
      ASSERT_TRUE(run_many.checkpoint().tensors.count(name)) << name;
      b[name] = run_many.checkpoint().tensors.at(name);
      ++velocities;
    }
  EXPECT_EQ(velocities, static_cast<int>(run_one.variables().size())) << "one slot per variable";
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, value] : a) {
    const Tensor& other = b.at(name);
    ASSERT_EQ(value.numel(), other.numel()) << name;
    double worst = 0.0;
    for (int64_t i = 0; i < value.numel(); ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(value.data<float>()[i] -
                                                            other.data<float>()[i])));
    // Float summation order differs (a mean of means vs one mean): a few ulps per step.
    EXPECT_LT(worst, 1e-4) << name;
  }
  std::filesystem::remove_all(dir);
}

TEST(DataParallel, TwoRanksOfBatch32MatchOneProcessOfBatch64After20Steps) {
  REQUIRE_MNIST();
  expect_ranks_match_one_process(2, 32);
}

// Three ranks own chunks that start inside parameters and cross from one to the next.
TEST(DataParallel, ThreeRanksOfBatch20MatchOneProcessOfBatch60After20Steps) {
  REQUIRE_MNIST();
  expect_ranks_match_one_process(3, 20);
}

TEST(DataParallel, BadArgumentsAreOneLineErrors) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("dp-args");
  const std::string base = "train --model " + testing::source_path("tests/data/tiny-cnn.yaml") +
                           " --train-limit 256 --test-limit 100 --epochs 1 --threads 1 --quiet ";
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--lr-scaling cubic --out " + dir + "/a",
       "slimflow: error: rank 0: train: --lr-scaling must be linear, sqrt or none, got 'cubic'"},
      {"--bucket-mb 0 --out " + dir + "/b",
       "slimflow: error: rank 0: train: --bucket-mb must be a positive number, got 0"},
      {"--batch 200 --out " + dir + "/c",
       "slimflow: error: rank 0: train: a step of 2 ranks x batch 200 needs 400 examples, the "
       "data has 256"},
      {"--comm-timeout 0 --out " + dir + "/d",
       "slimflow: error: train: --comm-timeout must be a positive number of seconds, got 0"},
  };
  for (const Case& c : cases) {
    auto r = run_shell(mpirun(2) + base + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(count_lines_starting(r.out, "slimflow: error:"), 1) << r.out;
  }
  std::filesystem::remove_all(dir);
}

TEST(DataParallel, KilledRankEndsTheJobNamingItAndResumeWithAnyRanksFinishesTheRun) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("dp-kill");
  const std::string run = dir + "/run";
  const std::string spec = testing::write_deterministic_cnn_spec(dir, 256);
  // Each rank records its pid; once the first mid-epoch checkpoint exists, rank 1 is killed.
  const std::string train = "train --model " + spec +
                            " --data mnist --train-limit 12800 --test-limit 200 --epochs 1 "
                            "--batch 32 --threads 1 --checkpoint-every 10 --quiet --out " + run;
  const std::string script =
      "(" + std::string("timeout -k 5 120 ") + SLIMFLOW_MPIRUN +
      " -np 2 sh -c 'echo $$ > " + dir + "/rank$OMPI_COMM_WORLD_RANK.pid; exec " + SLIMFLOW_CLI +
      " " + train + "' > " + dir + "/job.log 2>&1; echo exit=$? >> " + dir + "/job.log) & " +
      "job=$!; for i in $(seq 600); do [ -s " + run + "/checkpoint.sfck ] && [ -s " + dir +
      "/rank1.pid ] && break; sleep 0.1; done; kill -9 $(cat " + dir + "/rank1.pid); " +
      "start=$(date +%s%N); wait $job; echo ended_after_ms=$(( ($(date +%s%N) - start) / 1000000 )); "
      "cat " + dir + "/job.log";
  auto killed = run_shell("bash -c '" + [&] {
    std::string quoted;
    for (char ch : script) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return quoted;
  }() + "'");
  EXPECT_EQ(killed.out.find("exit=0"), std::string::npos) << killed.out;
  EXPECT_NE(killed.out.find("rank 1"), std::string::npos) << killed.out;
  EXPECT_NE(killed.out.find("signal 9"), std::string::npos) << killed.out;
  const auto at = killed.out.find("ended_after_ms=");
  ASSERT_NE(at, std::string::npos) << killed.out;
  EXPECT_LT(std::stod(killed.out.substr(at + 15)), 20000.0) << killed.out;  // a bound, not a claim

  // Rank 0's last checkpoint is mid-epoch; one process (batch 32, half the global batch)
  // continues from the image where the two ranks stopped.
  int64_t offset = 0, step = 0;
  TrainingRun(run).read_metadata([&](const nlohmann::json& meta) {
    offset = meta.at("position").at("images");
    step = meta.at("position").at("step");
  });
  ASSERT_GT(offset, 0);
  ASSERT_LT(offset, 12800);
  EXPECT_EQ(offset, step * 64);
  std::filesystem::copy(run, dir + "/run2", std::filesystem::copy_options::recursive);
  auto resumed = testing::run_cli("train --resume " + run + " --threads 1 --quiet --json");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("at epoch 1, image " + std::to_string(offset) +
                             "/12800 (step " + std::to_string(step) +
                             "; saved by 2 rank(s), now 1 x batch 32)"),
            std::string::npos)
      << resumed.out;
  // Every remaining image once: (12800 - offset) / 32 more steps.
  EXPECT_NE(resumed.out.find("\"step\":" + std::to_string(step + (12800 - offset) / 32)),
            std::string::npos)
      << resumed.out;

  // Resumed with the same two ranks, the run ends where an uninterrupted one does.
  auto accuracy = [](const std::string& out) {
    for (const std::string& line : testing::non_empty_lines(out))
      if (line.rfind("{", 0) == 0) return nlohmann::json::parse(line).at("test_accuracy").get<double>();
    return -1.0;
  };
  auto resumed2 = run_shell(mpirun(2) + "train --resume " + dir + "/run2 --threads 1 --quiet --json");
  ASSERT_EQ(resumed2.exit_code, 0) << resumed2.out;
  auto whole = run_shell(mpirun(2) + train.substr(0, train.rfind("--out")) + "--json --out " + dir +
                         "/whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  EXPECT_NEAR(accuracy(resumed2.out), accuracy(whole.out), 0.001) << resumed2.out << whole.out;
  EXPECT_GT(accuracy(whole.out), 0.5) << whole.out;
  std::filesystem::remove_all(dir);
}

TEST(DataParallel, ResumeWithAnotherModelIsAnError) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("dp-model");
  auto first = testing::run_cli("train --model " + testing::source_path("tests/data/tiny-cnn.yaml") +
                                " --train-limit 128 --test-limit 50 --epochs 1 --threads 1 "
                                "--quiet --out " + dir + "/run");
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const std::string other = testing::write_deterministic_cnn_spec(dir);
  auto r = run_shell(mpirun(2) + "train --resume " + dir + "/run --model " + other +
                     " --threads 1 --quiet");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("slimflow: error: rank 0: train: --resume " + dir +
                       "/run trains the run's own model; drop --model " + other),
            std::string::npos)
      << r.out;
  EXPECT_EQ(count_lines_starting(r.out, "slimflow: error:"), 1) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(DataParallel, CompressedGradientsWithErrorFeedbackConvergeOnFewerBytes) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("dp-compress");
  const std::string spec = testing::write_deterministic_cnn_spec(dir);
  const std::string common = "train --model " + spec +
                             " --data mnist --train-limit 1280 --test-limit 500 --epochs 3 "
                             "--batch 32 --threads 1 --quiet --json --out " + dir + "/";
  auto json_value = [](const std::string& out, const std::string& key) {
    const auto lines = testing::non_empty_lines(out);
    std::string last;
    for (const std::string& line : lines)
      if (line.rfind("{", 0) == 0) last = line;
    return nlohmann::json::parse(last).at(key).get<double>();
  };
  // Against the weight gradients' own bytes, as the compressed runs send them: not as factors.
  auto plain = run_shell(mpirun(2) + common + "none --factored-gradients off");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  const double plain_bytes = json_value(plain.out, "comm_bytes");
  const double plain_accuracy = json_value(plain.out, "test_accuracy");
  struct Case {
    std::string scheme;
    double min_ratio;
  };
  const double plain_per_step = json_value(plain.out, "comm_bytes_per_step");
  EXPECT_EQ(plain_per_step, plain_bytes / 20.0);  // the last epoch: 20 steps
  // One-bit cannot pass 32x: one bit for each 32-bit float. Its ranks also average Adam's second
  // moment at steps 1, 2, 4, ..., 32 (the first two epochs), not in the third.
  for (const Case& c : std::vector<Case>{{"fp16", 1.99}, {"topk:0.01", 100.0}, {"onebit", 30.0}}) {
    auto r = run_shell(mpirun(2) + common + c.scheme.substr(0, 4) + " --grad-compression " +
                       c.scheme);
    ASSERT_EQ(r.exit_code, 0) << c.scheme << "\n" << r.out;
    EXPECT_GT(plain_bytes / json_value(r.out, "comm_bytes"), c.min_ratio) << c.scheme;
    EXPECT_GT(plain_per_step / json_value(r.out, "comm_bytes_per_step"), c.min_ratio) << c.scheme;
    // Converges: most of the uncompressed run's accuracy after 60 steps.
    EXPECT_GT(json_value(r.out, "test_accuracy"), 0.6 * plain_accuracy) << c.scheme << r.out;
  }
  auto bad = run_shell(mpirun(2) + common + "bad --grad-compression topk:7");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("slimflow: error: rank 0: train: --grad-compression must be none, fp16, "
                         "topk:F (0 < F <= 1) or onebit, got 'topk:7'"),
            std::string::npos)
      << bad.out;
  EXPECT_EQ(count_lines_starting(bad.out, "slimflow: error:"), 1) << bad.out;
  std::filesystem::remove_all(dir);
}

TEST(DataParallel, CompressionResidualsResumeWithTheSameRanksAndAreDroppedWithOthers) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("dp-residuals");
  const std::string spec = testing::write_deterministic_cnn_spec(dir);
  // Two epochs at once, and one epoch resumed for a second: the same weights only if the
  // residuals (most of each gradient, with top-k 1%) came back, and with one-bit each rank's own
  // second moment (Adam's, shared between the ranks every so often).
  for (const std::string scheme : {"topk:0.01", "onebit"}) {
    const std::string common = "train --model " + spec +
                               " --data mnist --train-limit 1280 --test-limit 100 --batch 32 "
                               "--threads 1 --quiet --grad-compression " + scheme + " ";
    const std::string runs = dir + "/" + scheme.substr(0, 4);
    auto whole = run_shell(mpirun(2) + common + "--epochs 2 --out " + runs + "/whole");
    ASSERT_EQ(whole.exit_code, 0) << whole.out;
    auto first = run_shell(mpirun(2) + common + "--epochs 1 --out " + runs + "/split");
    ASSERT_EQ(first.exit_code, 0) << first.out;
    const TrainingRun saved(runs + "/split");
    EXPECT_EQ(saved.checkpoint().tensors.count("compression/rank1/fc1/weights"), 1u);
    EXPECT_EQ(saved.checkpoint().tensors.count("compression/rank1/second_moment/fc1/weights"),
              scheme == "onebit" ? 1u : 0u);
    EXPECT_EQ(saved.metadata().at("compression").at("ranks"), 2);
    std::filesystem::copy(runs + "/split", runs + "/other",
                          std::filesystem::copy_options::recursive);
    std::filesystem::copy(runs + "/split", runs + "/three",
                          std::filesystem::copy_options::recursive);
    auto second = run_shell(mpirun(2) + "train --resume " + runs +
                            "/split --epochs 1 --threads 1 --quiet --grad-compression " + scheme);
    ASSERT_EQ(second.exit_code, 0) << second.out;
    EXPECT_EQ(second.out.find("dropped"), std::string::npos) << second.out;
    const auto a = TrainingRun(runs + "/whole").variables();
    const auto b = TrainingRun(runs + "/split").variables();
    for (const auto& [name, value] : a)
      for (int64_t i = 0; i < value.numel(); ++i)
        ASSERT_NEAR(value.data<float>()[i], b.at(name).data<float>()[i], 1e-6)
            << scheme << " " << name << " " << i;
    // One process has no residuals to continue: a note, and training goes on.
    auto alone =
        testing::run_cli("train --resume " + runs + "/other --epochs 1 --threads 1 --quiet");
    ASSERT_EQ(alone.exit_code, 0) << alone.out;
    EXPECT_NE(alone.out.find("note: the " + scheme + " compression residuals of the 2 rank(s) "
                             "that saved " + runs + "/other are dropped (this job: 1 rank(s), "
                             "compression none); error feedback starts from zero"),
              std::string::npos)
        << alone.out;
    // Three ranks have no residuals of their own either; one-bit's second moments restart from
    // the last shared one.
    auto three = run_shell(mpirun(3) + "train --resume " + runs +
                           "/three --epochs 1 --threads 1 --quiet --grad-compression " + scheme);
    ASSERT_EQ(three.exit_code, 0) << three.out;
    EXPECT_NE(three.out.find("are dropped (this job: 3 rank(s), compression " + scheme +
                             "); error feedback starts from zero" +
                             (scheme == "onebit" ? ", and each rank's second moment from the "
                                                   "last one the ranks shared"
                                                 : "")),
              std::string::npos)
        << three.out;
  }
  std::filesystem::remove_all(dir);
}

#endif

}  // namespace
}  // namespace sf
