#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "modelfile/model_file.h"
#include "ops/ops.h"
#include "slimflow/slimflow.h"
#include "support/cli.h"
#include "support/temp_files.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

const std::vector<float> kWeights = {0.5f, -1.0f, 0.25f, 1.0f,   0.0f, -0.5f,
                                     2.0f, 0.75f, -1.5f, -0.25f, 1.0f, 0.5f};

// Writes Placeholder x [1,4] -> MatMul(Const w [4,3]) = logits -> Softmax = probs into a fresh
// folder; outputs are probs then logits.
class CapiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelFile m;
    Output x = ops::placeholder(m.graph, DType::f32, {1, 4}, "x");
    Output w = ops::constant(m.graph, Tensor::from_vector<float>({4, 3}, kWeights), "w");
    Output logits = ops::matmul(m.graph, x, w, false, false, "logits");
    ops::softmax(m.graph, logits, "probs");
    m.inputs = {"x"};
    m.outputs = {"probs", "logits"};
    path_ = dir_.file("tiny.sfm");
    save_model(path_, m);
  }
  // x W and its softmax, for each row of x.
  static std::vector<float> expected_logits(const std::vector<float>& x) {
    std::vector<float> y(x.size() / 4 * 3, 0.0f);
    for (size_t r = 0; r < x.size() / 4; ++r)
      for (size_t j = 0; j < 3; ++j)
        for (size_t k = 0; k < 4; ++k) y[r * 3 + j] += x[r * 4 + k] * kWeights[k * 3 + j];
    return y;
  }
  static std::vector<float> softmax_rows(std::vector<float> y) {
    for (size_t r = 0; r < y.size() / 3; ++r) {
      float m = std::max({y[r * 3], y[r * 3 + 1], y[r * 3 + 2]});
      float sum = 0.0f;
      for (size_t j = 0; j < 3; ++j) sum += (y[r * 3 + j] = std::exp(y[r * 3 + j] - m));
      for (size_t j = 0; j < 3; ++j) y[r * 3 + j] /= sum;
    }
    return y;
  }

  testing::TempDir dir_{"slimflow-capi"};
  std::string path_;
};

// Frees the model however the test ends.
struct ModelPtr {
  sf_model* m;
  ~ModelPtr() { sf_model_free(m); }
};

std::string last_error() { return sf_last_error(); }

TEST_F(CapiTest, LoadsDescribesAndRuns) {
  ModelPtr model{sf_model_load(path_.c_str())};
  ASSERT_NE(model.m, nullptr) << sf_last_error();
  EXPECT_EQ(sf_model_num_inputs(model.m), 1);
  EXPECT_EQ(sf_model_num_outputs(model.m), 2);
  EXPECT_STREQ(sf_model_input_name(model.m, 0), "x");
  EXPECT_STREQ(sf_model_output_name(model.m, 0), "probs");
  EXPECT_STREQ(sf_model_output_name(model.m, 1), "logits");

  int64_t dims[4] = {-7, -7, -7, -7};
  ASSERT_EQ(sf_model_input_shape(model.m, 0, dims, 4), 2);
  EXPECT_EQ(dims[0], 1);
  EXPECT_EQ(dims[1], 4);
  EXPECT_EQ(dims[2], -7);  // untouched past the rank

  std::vector<float> x = {1.0f, 2.0f, -1.0f, 0.5f};
  ASSERT_EQ(sf_model_set_input(model.m, 0, x.data(), dims, 2), 0) << sf_last_error();
  x.assign(4, 99.0f);  // the input was copied
  ASSERT_EQ(sf_model_run(model.m), 0) << sf_last_error();

  std::vector<float> want_logits = expected_logits({1.0f, 2.0f, -1.0f, 0.5f});
  std::vector<float> want_probs = softmax_rows(want_logits);
  for (int out = 0; out < 2; ++out) {
    const float* data = nullptr;
    const int64_t* out_dims = nullptr;
    int rank = -1;
    ASSERT_EQ(sf_model_output(model.m, out, &data, &out_dims, &rank), 0) << sf_last_error();
    ASSERT_EQ(rank, 2);
    EXPECT_EQ(out_dims[0], 1);
    EXPECT_EQ(out_dims[1], 3);
    const std::vector<float>& want = out == 0 ? want_probs : want_logits;
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(data[j], want[static_cast<size_t>(j)], 1e-5) << j;
  }

  // A second run with new values reuses the plan.
  std::vector<float> x2 = {0.0f, 0.0f, 0.0f, 1.0f};
  ASSERT_EQ(sf_model_set_input(model.m, 0, x2.data(), dims, 2), 0);
  ASSERT_EQ(sf_model_run(model.m), 0) << sf_last_error();
  const float* data = nullptr;
  const int64_t* out_dims = nullptr;
  int rank = 0;
  ASSERT_EQ(sf_model_output(model.m, 1, &data, &out_dims, &rank), 0);
  EXPECT_NEAR(data[0], kWeights[9], 1e-6);
  EXPECT_NEAR(data[2], kWeights[11], 1e-6);
}

TEST_F(CapiTest, AcceptsAnotherBatchSize) {
  ModelPtr model{sf_model_load(path_.c_str())};
  ASSERT_NE(model.m, nullptr) << sf_last_error();
  std::vector<float> x = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  const int64_t dims[2] = {3, 4};
  ASSERT_EQ(sf_model_set_input(model.m, 0, x.data(), dims, 2), 0) << sf_last_error();
  ASSERT_EQ(sf_model_run(model.m), 0) << sf_last_error();
  const float* data = nullptr;
  const int64_t* out_dims = nullptr;
  int rank = 0;
  ASSERT_EQ(sf_model_output(model.m, 1, &data, &out_dims, &rank), 0);
  ASSERT_EQ(rank, 2);
  EXPECT_EQ(out_dims[0], 3);
  // Row r of the identity picks row r of the weights.
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(data[i], kWeights[static_cast<size_t>(i)], 1e-6) << i;
}

TEST_F(CapiTest, InputShapeWithSmallBuffer) {
  ModelPtr model{sf_model_load(path_.c_str())};
  ASSERT_NE(model.m, nullptr);
  EXPECT_EQ(sf_model_input_shape(model.m, 0, nullptr, 0), 2);
  int64_t one = 0;
  EXPECT_EQ(sf_model_input_shape(model.m, 0, &one, 1), 2);
  EXPECT_EQ(one, 1);
  EXPECT_EQ(sf_model_input_shape(model.m, 0, nullptr, 2), -1);
  EXPECT_EQ(sf_model_input_shape(model.m, 1, &one, 1), -1);
  EXPECT_NE(last_error().find("input index 1 is out of range"), std::string::npos) << last_error();
}

TEST_F(CapiTest, MissingOrCorruptFileGivesNullAndMessage) {
  std::string missing = dir_.file("missing.sfm");
  EXPECT_EQ(sf_model_load(missing.c_str()), nullptr);
  EXPECT_NE(last_error().find(missing), std::string::npos) << last_error();

  std::string junk = dir_.file("junk.sfm");
  FILE* f = std::fopen(junk.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fputs("not a model at all, just text", f);
  std::fclose(f);
  EXPECT_EQ(sf_model_load(junk.c_str()), nullptr);
  EXPECT_NE(last_error().find(junk), std::string::npos) << last_error();

  EXPECT_EQ(sf_model_load(nullptr), nullptr);
  EXPECT_NE(last_error().find("NULL"), std::string::npos) << last_error();
}

TEST_F(CapiTest, BadInputsFailWithMessages) {
  ModelPtr model{sf_model_load(path_.c_str())};
  ASSERT_NE(model.m, nullptr);
  std::vector<float> x(12, 1.0f);
  const int64_t dims3[3] = {1, 4, 1};
  EXPECT_EQ(sf_model_set_input(model.m, 0, x.data(), dims3, 3), -1);
  EXPECT_NE(last_error().find("input 'x': rank 3 given, the model expects rank 2"),
            std::string::npos)
      << last_error();

  const int64_t negative[2] = {1, -4};
  EXPECT_EQ(sf_model_set_input(model.m, 0, x.data(), negative, 2), -1);
  EXPECT_NE(last_error().find("bad dimensions"), std::string::npos) << last_error();

  const int64_t dims[2] = {1, 4};
  EXPECT_EQ(sf_model_set_input(model.m, 0, nullptr, dims, 2), -1);
  EXPECT_NE(last_error().find("data is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(sf_model_set_input(model.m, 0, x.data(), nullptr, 2), -1);
  EXPECT_EQ(sf_model_set_input(model.m, 3, x.data(), dims, 2), -1);
  EXPECT_EQ(sf_model_set_input(nullptr, 0, x.data(), dims, 2), -1);

  // Nothing set yet: run fails, and there are no outputs.
  EXPECT_EQ(sf_model_run(model.m), -1);
  EXPECT_NE(last_error().find("input 'x' was not set"), std::string::npos) << last_error();
  const float* data = nullptr;
  const int64_t* out_dims = nullptr;
  int rank = 0;
  EXPECT_EQ(sf_model_output(model.m, 0, &data, &out_dims, &rank), -1);
  EXPECT_NE(last_error().find("sf_model_run has not succeeded"), std::string::npos) << last_error();

  // Right rank, wrong inner size: the model's shape check fails the run, not the process.
  const int64_t wide[2] = {1, 5};
  ASSERT_EQ(sf_model_set_input(model.m, 0, x.data(), wide, 2), 0);
  EXPECT_EQ(sf_model_run(model.m), -1);
  EXPECT_FALSE(last_error().empty());
  EXPECT_EQ(sf_model_output(model.m, 0, &data, &out_dims, &rank), -1);

  // Recovers after a failed run.
  ASSERT_EQ(sf_model_set_input(model.m, 0, x.data(), dims, 2), 0);
  ASSERT_EQ(sf_model_run(model.m), 0) << sf_last_error();
  EXPECT_EQ(sf_model_output(model.m, 2, &data, &out_dims, &rank), -1);
  EXPECT_NE(last_error().find("output index 2 is out of range"), std::string::npos) << last_error();
  EXPECT_EQ(sf_model_output(model.m, 0, nullptr, &out_dims, &rank), -1);
  EXPECT_EQ(sf_model_output(model.m, 0, &data, &out_dims, &rank), 0);
}

TEST_F(CapiTest, NullModelAndIndexChecks) {
  EXPECT_EQ(sf_model_num_inputs(nullptr), -1);
  EXPECT_EQ(sf_model_num_outputs(nullptr), -1);
  EXPECT_EQ(sf_model_input_name(nullptr, 0), nullptr);
  EXPECT_EQ(sf_model_output_name(nullptr, 0), nullptr);
  EXPECT_EQ(sf_model_input_shape(nullptr, 0, nullptr, 0), -1);
  EXPECT_EQ(sf_model_run(nullptr), -1);
  EXPECT_NE(last_error().find("NULL"), std::string::npos);
  sf_model_free(nullptr);  // a no-op

  ModelPtr model{sf_model_load(path_.c_str())};
  ASSERT_NE(model.m, nullptr);
  EXPECT_EQ(sf_model_input_name(model.m, -1), nullptr);
  EXPECT_EQ(sf_model_input_name(model.m, 1), nullptr);
  EXPECT_EQ(sf_model_output_name(model.m, 2), nullptr);
}

TEST_F(CapiTest, ThreadsAndPerThreadErrors) {
  EXPECT_EQ(sf_set_num_threads(-2), -1);
  EXPECT_NE(last_error().find("-2 threads"), std::string::npos) << last_error();
  // libgomp crashed on 100000 and printed std::bad_alloc for 2^31-1: refused before it sees them.
  EXPECT_EQ(sf_set_num_threads(100000), -1);
  EXPECT_NE(last_error().find("100000 threads requested; expected 0 (all cores) to 1024"),
            std::string::npos)
      << last_error();
  EXPECT_EQ(sf_set_num_threads(2147483647), -1);
  EXPECT_EQ(sf_set_num_threads(1), 0);
  {
    ModelPtr model{sf_model_load(path_.c_str())};
    ASSERT_NE(model.m, nullptr);
    std::vector<float> x(4, 0.5f);
    const int64_t dims[2] = {1, 4};
    ASSERT_EQ(sf_model_set_input(model.m, 0, x.data(), dims, 2), 0);
    ASSERT_EQ(sf_model_run(model.m), 0) << sf_last_error();
  }
  EXPECT_EQ(sf_set_num_threads(0), 0);

  // A failure on another thread leaves this thread's message alone.
  EXPECT_EQ(sf_model_run(nullptr), -1);
  std::string mine = last_error();
  std::string theirs;
  std::thread([&] {
    EXPECT_STREQ(sf_last_error(), "");
    EXPECT_EQ(sf_set_num_threads(-1), -1);
    theirs = sf_last_error();
  }).join();
  EXPECT_EQ(last_error(), mine);
  EXPECT_NE(theirs, mine);
}

testing::CliResult run_example(const std::string& args) {
  return testing::run_shell(std::string(SLIMFLOW_C_EXAMPLE) + " " + args);
}

TEST_F(CapiTest, CExampleRuns) {
  const testing::CliResult runs = run_example(path_);
  ASSERT_EQ(runs.exit_code, 0) << runs.out;
  // Zero input: all logits are 0, so every class has probability 1/3 and argmax is 0.
  EXPECT_NE(runs.out.find("input 'x' rank 2: zeros"), std::string::npos) << runs.out;
  EXPECT_NE(runs.out.find("output 'probs' [1,3]: argmax 0, values 0.333333 0.333333 0.333333"),
            std::string::npos)
      << runs.out;
  EXPECT_NE(runs.out.find("output 'logits' [1,3]: argmax 0, values 0 0 0"), std::string::npos)
      << runs.out;

  const std::string missing = dir_.file("missing.sfm");
  const testing::CliResult no_file = run_example(missing);
  EXPECT_EQ(no_file.exit_code, 1) << no_file.out;
  EXPECT_NE(no_file.out.find(missing), std::string::npos) << no_file.out;
  const testing::CliResult no_args = run_example("");
  EXPECT_EQ(no_args.exit_code, 2) << no_args.out;
  EXPECT_NE(no_args.out.find("usage"), std::string::npos) << no_args.out;
}

}  // namespace
}  // namespace sf
