// TrainingRun opens a run directory the way train, eval, freeze and prune all do, and turns
// every broken part into a one-line error naming the file.
#include "train/training_run.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// A run of tests/data/tiny-cnn.yaml as `slimflow train` would leave it, without training: every
// variable random, one optimizer slot, and the metadata `meta` (the spec is added).
class TrainingRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("sf-training-run");
    spec_ = load_model_spec(testing::source_path("tests/data/tiny-cnn.yaml"));
    model_ = build_model(spec_, 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void write_run(nlohmann::json meta, const std::string& skip_variable = "") {
    Checkpoint c;
    uint32_t seed = 1;
    for (const Parameter& p : model_.parameters)
      if (p.name != skip_variable)
        c.tensors[kVariablePrefix + p.name] =
            testing::random_tensor(model_.graph.type(p.output).shape, ++seed);
    c.tensors[std::string(kOptimizerPrefix) + "fc2/weights/m"] = testing::random_tensor({2}, 99);
    c.metadata_json = meta.dump();
    save_checkpoint(checkpoint_path(dir_), c);
  }
  nlohmann::json run_metadata() const {
    return {{"format", "slimflow-run"},
            {"model_origin", spec_.origin},
            {"model_spec", spec_.text},
            {"options", {{"lr", 0.002}}}};
  }
  std::string error_opening() const {
    try {
      TrainingRun run(dir_);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }

  std::string dir_;
  ModelSpec spec_;
  Model model_;
};

TEST_F(TrainingRunTest, OpensTheSpecVariablesAndOptimizerState) {
  write_run(run_metadata());
  const TrainingRun run(dir_);
  EXPECT_EQ(run.dir(), dir_);
  EXPECT_EQ(run.checkpoint_file(), dir_ + "/checkpoint.sfck");
  EXPECT_EQ(run.spec().name, "tiny-cnn");
  EXPECT_EQ(run.spec().text, spec_.text);
  const double lr = run.read_metadata(
      [](const nlohmann::json& m) { return m.at("options").at("lr").get<double>(); });
  EXPECT_DOUBLE_EQ(lr, 0.002);
  const std::map<std::string, Tensor> variables = run.variables();
  EXPECT_EQ(variables.size(), model_.parameters.size());
  EXPECT_EQ(run.optimizer_state().count("fc2/weights/m"), 1u);

  VariableStore store;
  run.restore_variables(store, model_);
  for (const Parameter& p : model_.parameters)
    EXPECT_EQ(testing::values<float>(store.get(p.name)),
              testing::values<float>(variables.at(p.name)))
        << p.name;
}

TEST_F(TrainingRunTest, ABrokenRunIsAOneLineErrorNamingTheFile) {
  const std::string file = dir_ + "/checkpoint.sfck";
  EXPECT_EQ(error_opening(), dir_ + ": not a training run (no " + file + ")");

  nlohmann::json no_spec = run_metadata();
  no_spec.erase("model_spec");
  write_run(no_spec);
  std::string message = error_opening();
  EXPECT_EQ(message.rfind(file + ": checkpoint metadata is not a slimflow run: ", 0), 0u)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;

  write_run(run_metadata());
  const TrainingRun run(dir_);
  testing::expect_error(
      [&] { run.read_metadata([](const nlohmann::json& m) { return m.at("position").dump(); }); },
      file + ": checkpoint metadata is not a slimflow run: ");

  write_run(run_metadata(), "conv2/weights");
  VariableStore store;
  testing::expect_error([&] { TrainingRun(dir_).restore_variables(store, model_); },
                        file + ": checkpoint has no value for variable 'conv2/weights'");
  write_run(run_metadata());
  std::string narrower = spec_.text;
  narrower.replace(narrower.find("units: 64"), 9, "units: 32");
  const Model other = build_model(parse_model_spec(narrower, spec_.origin), 1);
  testing::expect_error([&] { TrainingRun(dir_).restore_variables(store, other); },
                        "variable 'fc1/weights' is f32[784,64] in the checkpoint, the model "
                        "expects f32[784,32]");

  std::filesystem::resize_file(file, 10);
  message = error_opening();
  EXPECT_NE(message.find(file + ": corrupt checkpoint"), std::string::npos) << message;
}

}  // namespace
}  // namespace sf
