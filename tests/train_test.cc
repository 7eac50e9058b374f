#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "runtime/process_stats.h"
#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/testing.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

TrainOptions tiny_run(const std::string& out, int64_t train_limit, int64_t epochs) {
  TrainOptions o;
  o.model_path = testing::source_path("tests/data/tiny-cnn.yaml");
  o.data = "mnist";
  o.out_dir = out;
  o.epochs = epochs;
  o.train_limit = train_limit;
  o.test_limit = 400;
  o.threads = 1;
  o.seed = 3;
  return o;
}

TEST(TrainTest, LossFallsAndAccuracyRisesOnAFewHundredImages) {
  REQUIRE_MNIST();
  std::string dir = testing::make_temp_dir("sf-train");
  std::vector<EpochReport> reports = train(tiny_run(dir, 640, 3), {});
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_LT(reports.back().loss, reports.front().loss);
  EXPECT_GT(reports.back().test_accuracy, 0.6);  // chance is 0.1
  EXPECT_GT(reports.back().test_accuracy, reports.front().test_accuracy);
  EvalResult eval = evaluate_run(dir, "mnist", 400, 1);
  EXPECT_EQ(eval.count, 400);
  EXPECT_DOUBLE_EQ(eval.accuracy, reports.back().test_accuracy);
  std::filesystem::remove_all(dir);
}

TEST(TrainTest, ResidentMemoryDoesNotGrowAfterWarmUp) {
  REQUIRE_MNIST();
#if defined(__SANITIZE_ADDRESS__)
  // ASan keeps freed blocks in a quarantine of up to 256 MB, so RSS measures ASan, not us.
  GTEST_SKIP() << "resident memory is not meaningful under AddressSanitizer";
#endif
  std::string dir = testing::make_temp_dir("sf-memory");
  TrainOptions o = tiny_run(dir, 32 * 400, 1);  // 400 steps
  double warm = 0.0, highest = 0.0;
  TrainCallbacks callbacks;
  callbacks.on_progress = [&](const Progress& p) {
    if (p.batch == 40) warm = current_rss_mb();
    if (p.batch > 40) highest = std::max(highest, current_rss_mb());
  };
  train(o, callbacks);
  ASSERT_GT(warm, 0.0);
  EXPECT_LE(highest, warm * 1.03 + 1.0) << "RSS grew from " << warm << " MB to " << highest << " MB";
  std::filesystem::remove_all(dir);
}

std::map<std::string, Tensor> final_variables(const std::string& dir) {
  return load_checkpoint(checkpoint_path(dir)).tensors;
}

void expect_same_tensors(const std::map<std::string, Tensor>& a,
                         const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const Tensor& u = b.at(name);
    ASSERT_EQ(t.bytes(), u.bytes()) << name;
    EXPECT_EQ(std::memcmp(t.raw(), u.raw(), t.bytes()), 0) << name << " differs";
  }
}

TEST(TrainTest, SameSeedOneThreadIsBitForBitReproducible) {
  REQUIRE_MNIST();
  std::string a = testing::make_temp_dir("sf-repro-a"), b = testing::make_temp_dir("sf-repro-b");
  train(tiny_run(a, 256, 1), {});
  train(tiny_run(b, 256, 1), {});
  expect_same_tensors(final_variables(a), final_variables(b));
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);
}

// Mixed precision: a few steps in bf16 follow the fp32 run. The products' inputs keep 8 bits
// (relative error at most 2^-8 each), which moves the first logits by well under 1%; over 8
// small SGD steps the two runs drift apart slowly, so the epoch's mean loss (about 2) agrees
// within 2% and test accuracy within a few images.
TEST(TrainTest, Bf16StepsTrackFp32) {
  REQUIRE_MNIST();
  const std::string a = testing::make_temp_dir("sf-fp32"), b = testing::make_temp_dir("sf-bf16");
  TrainOptions bf16 = tiny_run(b, 256, 1);
  bf16.precision = "bf16";
  const EpochReport fp32_report = train(tiny_run(a, 256, 1), {}).at(0);
  const EpochReport bf16_report = train(bf16, {}).at(0);
  EXPECT_EQ(fp32_report.precision, "fp32");
  EXPECT_EQ(bf16_report.precision, "bf16");
  EXPECT_NE(bf16_report.precision_reason.find("requested"), std::string::npos);
  EXPECT_NE(epoch_report_json(bf16_report).find(R"("precision":"bf16")"), std::string::npos);
  EXPECT_NEAR(bf16_report.loss, fp32_report.loss, 0.02 * fp32_report.loss);
  EXPECT_NEAR(bf16_report.test_accuracy, fp32_report.test_accuracy, 0.02);
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);
}

TEST(TrainTest, ResumingMidEpochMatchesAnUninterruptedRun) {
  REQUIRE_MNIST();
  std::string whole = testing::make_temp_dir("sf-whole"), parts = testing::make_temp_dir("sf-parts");
  train(tiny_run(whole, 320, 2), {});
  // Stop after 13 steps (mid-epoch, 10 steps per epoch) by failing from the progress callback,
  // as a crash would, then resume.
  TrainOptions first = tiny_run(parts, 320, 2);
  first.checkpoint_every = 13;
  TrainCallbacks crash;
  int64_t seen = 0;
  crash.on_progress = [&](const Progress&) {
    if (++seen == 14) throw std::runtime_error("simulated crash");
  };
  EXPECT_THROW(train(first, crash), std::runtime_error);
  TrainOptions resume;
  resume.resume_dir = parts;
  resume.threads = 1;
  std::vector<EpochReport> reports = train(resume, {});
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports.back().step, 20);
  expect_same_tensors(final_variables(whole), final_variables(parts));
  std::filesystem::remove_all(whole);
  std::filesystem::remove_all(parts);
}

TEST(TrainTest, NonFiniteLossStopsWithTheStep) {
  REQUIRE_MNIST();
  std::string dir = testing::make_temp_dir("sf-nan");
  // Weights near the float limit overflow the logits to infinity: inf - inf is NaN.
  std::ofstream(dir + "/overflow.yaml")
      << "name: overflow\ninput: [28, 28, 1]\nclasses: 10\nlayers:\n"
         "  - {type: flatten}\n  - {name: fc, type: dense, units: 10, init: 'constant:3e38'}\n";
  TrainOptions o = tiny_run(dir, 640, 1);
  o.model_path = dir + "/overflow.yaml";
  o.out_dir = dir + "/run";
  try {
    train(o, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("step ", 0), 0u) << m;
    EXPECT_NE(m.find(": loss is "), std::string::npos) << m;
  }
  std::filesystem::remove_all(dir);
}

TEST(TrainTest, OptimizerValuesOutOfRangeAreRefusedBeforeTraining) {
  const std::string dir = testing::make_temp_dir("sf-optimizer-values");
  const double nan = std::nan("");
  struct Case {
    std::optional<double> weight_decay, momentum;
    std::string error;
  };
  for (const Case& c : {Case{nan, {}, "train: --weight-decay must be a number >= 0, got nan"},
                        Case{-1e-4, {}, "train: --weight-decay must be a number >= 0, got -0.0001"},
                        Case{{}, nan, "train: --momentum must be in [0, 1), got nan"},
                        Case{{}, -0.5, "train: --momentum must be in [0, 1), got -0.5"},
                        Case{{}, 1.0, "train: --momentum must be in [0, 1), got 1"}}) {
    TrainOptions o = tiny_run(dir + "/run", 64, 1);
    o.data = dir + "/no-such-data";  // the check comes first: no data is read
    o.optimizer = "momentum";
    o.weight_decay = c.weight_decay;
    o.momentum = c.momentum;
    EXPECT_EQ(testing::error_of([&] { train(o, {}); }), c.error);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sf
