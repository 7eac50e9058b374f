#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "models/spec.h"
#include "support/cli.h"
#include "support/mnist.h"
#include "train/trainer.h"

namespace sf {
namespace {

#define REQUIRE_MNIST()                                                          \
  if (!testing::mnist_available()) GTEST_SKIP() << "MNIST not installed: run scripts/setup.sh"

int64_t parameter_count(const std::string& spec_name) {
  const Model model =
      build_model(load_model_spec(testing::source_path("models/" + spec_name + ".yaml")), 1);
  int64_t count = 0;
  for (const Parameter& p : model.parameters) count += num_elements(model.graph.type(p.output).shape);
  return count;
}

class ModelZooTest : public ::testing::TestWithParam<std::string> {};

// Each spec builds, trains a few steps from the command line with a finite, falling loss and
// batch-norm in training mode, freezes and quantizes to eightbit.
TEST_P(ModelZooTest, TrainsFreezesAndQuantizes) {
  REQUIRE_MNIST();
  const std::string name = GetParam();
  const std::string dir = testing::make_temp_dir("sf-zoo-" + name);
  const std::string spec = testing::source_path("models/" + name + ".yaml");
  TrainOptions o;
  o.model_path = spec;
  o.out_dir = dir + "/run";
  o.epochs = 2;
  o.batch = 16;
  o.train_limit = 96;
  o.test_limit = 32;
  o.threads = 1;
  o.seed = 2;
  std::vector<EpochReport> reports = train(o, {});
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_TRUE(std::isfinite(reports.back().loss));
  EXPECT_LT(reports.back().loss, reports.front().loss) << name;
  testing::CliResult freeze =
      testing::run_cli("freeze " + dir + "/run --out " + dir + "/model.sfm");
  ASSERT_EQ(freeze.exit_code, 0) << freeze.out;
  testing::CliResult quantize =
      testing::run_cli("quantize " + dir + "/model.sfm --mode eightbit --calib-count 32 --threads 1"
                       " --out " + dir + "/model-int8.sfm");
  ASSERT_EQ(quantize.exit_code, 0) << quantize.out;
  testing::CliResult eval =
      testing::run_cli("eval --model " + dir + "/model-int8.sfm --limit 32 --threads 1 --json", false);
  EXPECT_EQ(eval.exit_code, 0) << eval.out;
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Specs, ModelZooTest,
                         ::testing::Values("squeezenet-mnist", "mobilenet-mnist", "resnet-mnist",
                                           "mlp-1200", "mlp-800"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(ModelZooSizeTest, CompactModelsHaveTenTimesFewerParametersThanDeepMnist) {
  const int64_t deep_mnist = parameter_count("deep-mnist");
  for (const char* name : {"squeezenet-mnist", "mobilenet-mnist", "resnet-mnist"})
    EXPECT_LE(10 * parameter_count(name), deep_mnist) << name;
  // Hinton et al.'s pair: 784-1200-1200-10 and 784-800-800-10.
  EXPECT_EQ(parameter_count("mlp-1200"), 784 * 1200 + 1200 + 1200 * 1200 + 1200 + 1200 * 10 + 10);
  EXPECT_EQ(parameter_count("mlp-800"), 784 * 800 + 800 + 800 * 800 + 800 + 800 * 10 + 10);
}

}  // namespace
}  // namespace sf
