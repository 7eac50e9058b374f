// The deployment commands as users run them on an ONNX model: bench's figures and profile, run's
// .npy outputs, import + inspect, and bad input to each as a one-line error naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/npy.h"
#include "onnx/importer.h"
#include "support/cli.h"
#include "support/temp_files.h"
#include "support/onnx_models.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::expect_one_line_error;
using testing::run_cli;

constexpr int64_t kClasses = 3;

// Conv 3x3 -> Relu -> GlobalAveragePool -> Flatten -> Gemm: an image classifier over
// [1, channels, 8, 8] with three classes.
std::string write_classifier(const std::string& dir, int64_t channels) {
  using namespace testing;
  onnx::ModelProto m = new_onnx_model();
  add_input(m, "x", {1, channels, 8, 8});
  add_init(m, "w", {4, channels, 3, 3}, random_values(static_cast<size_t>(4 * channels * 9), 1));
  add_init(m, "b", {4}, random_values(4, 2));
  add_init(m, "fc", {kClasses, 4}, random_values(kClasses * 4, 3));
  add_init(m, "fb", {kClasses}, random_values(kClasses, 4));
  set_ints(add_node(m, "Conv", {"x", "w", "b"}, {"c"}, "conv"), "pads", {1, 1, 1, 1});
  add_node(m, "Relu", {"c"}, {"r"});
  add_node(m, "GlobalAveragePool", {"r"}, {"p"});
  add_node(m, "Flatten", {"p"}, {"f"});
  set_int(add_node(m, "Gemm", {"f", "fc", "fb"}, {"y"}, "fc"), "transB", 1);
  add_output(m, "y");
  return write_onnx_model(m, dir + "/classifier" + std::to_string(channels) + ".onnx");
}

// An 8x8 binary PGM.
std::string write_pgm(const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  out << "P5\n8 8\n255\n";
  for (int i = 0; i < 64; ++i) out.put(static_cast<char>(i * 4));
  return path;
}

std::string write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string truncated_copy(const std::string& path, const std::string& to) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return write_text(to, bytes.substr(0, bytes.size() / 2));
}

class DeployCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("sf-deploy-cli");
    model_ = write_classifier(dir_, 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_, model_;
};

// bench reports the policy its OpenMP threads waited with; a user's OMP_WAIT_POLICY stands
// (cpu/thread_wait_policy.h).
TEST_F(DeployCli, BenchReportsTheThreadWaitPolicyAndKeepsTheUsers) {
  const testing::CliResult r = testing::run_shell("OMP_WAIT_POLICY=active " +
                                                  std::string(SLIMFLOW_CLI) + " bench --model " +
                                                  model_ + " --runs 1 --warmup 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\"omp_wait_policy\":\"active (OMP_WAIT_POLICY)\""), std::string::npos)
      << r.out;
}

// Through a link the file it names is replaced and the link stays; a pipe is written in place.
// The pipe is named by /proc/self/fd/1, not /dev/stdout: /dev is shared with whatever else ran
// on the machine, and a /dev/stdout some other program replaced by a file once failed this test.
TEST_F(DeployCli, ImportWritesThroughALinkAndIntoAPipe) {
  const std::string real = dir_ + "/real.sfm", link = dir_ + "/link.sfm";
  testing::write_file_bytes(real, "old");
  std::filesystem::create_symlink(real, link);
  ASSERT_EQ(run_cli("import " + model_ + " --out " + link).exit_code, 0);
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(run_cli("inspect " + real).exit_code, 0);
  const testing::CliResult piped =
      testing::run_shell(std::string(SLIMFLOW_CLI) + " import " + model_ +
                         " --out /proc/self/fd/1 2>/dev/null | wc -c");
  ASSERT_EQ(piped.exit_code, 0) << piped.out;
  EXPECT_EQ(std::stoull(piped.out), std::filesystem::file_size(real)) << piped.out;
}

TEST_F(DeployCli, BenchPlacesTheModelOnTheDeviceAndLogsIt) {
  const std::string log = dir_ + "/placement.json", sfm = dir_ + "/classifier.sfm";
  ASSERT_EQ(run_cli("import " + model_ + " --out " + sfm).exit_code, 0);
  const testing::CliResult r =
      run_cli("bench --model " + sfm + " --threads 1 --runs 2 --warmup 1 --json --cpu-devices 2 "
              "--device /cpu:1 --log-placement=" + log);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(testing::run_shell("cat " + log).out);
  ASSERT_EQ(j["devices"].size(), 1u);
  EXPECT_EQ(j["devices"][0]["device"], "/cpu:1");
  EXPECT_TRUE(j["transfers"].empty());
  expect_one_line_error("bench --model " + sfm + " --cpu-devices 2 --device /cpu:2",
                        {"--device: unknown device '/cpu:2'"});
  expect_one_line_error("bench --model " + model_ + " --device /cpu:1",
                        {"is an ONNX model, which runs on /cpu:0 only"});
}

TEST_F(DeployCli, BenchJsonHasTheFiguresAndAProfile) {
  const testing::CliResult r = run_cli(
      "bench --model " + model_ + " --batch 2 --threads 1 --runs 5 --warmup 1 --json --profile",
      false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(testing::non_empty_lines(r.out).back());
  for (const char* key : {"latency_ms_min", "latency_ms_median", "latency_ms_p90",
                          "throughput_per_sec", "peak_rss_mb", "model_bytes", "profile"})
    ASSERT_TRUE(j.contains(key)) << key;
  EXPECT_LE(j["latency_ms_min"].get<double>(), j["latency_ms_median"].get<double>());
  EXPECT_LE(j["latency_ms_median"].get<double>(), j["latency_ms_p90"].get<double>());
  EXPECT_GT(j["throughput_per_sec"].get<double>(), 0.0);
  EXPECT_GT(j["peak_rss_mb"].get<double>(), 0.0);
  EXPECT_EQ(j["model_bytes"].get<uint64_t>(), std::filesystem::file_size(model_));
  ASSERT_FALSE(j["profile"].empty());
  for (const nlohmann::json& row : j["profile"])
    for (const char* key : {"node", "op", "impl", "output_shape", "ms", "share", "gflops"})
      EXPECT_TRUE(row.contains(key)) << key;
}

// --precision bf16 runs the model's products in bf16 and says so; auto says why it chose.
TEST_F(DeployCli, BenchReportsItsPrecision) {
  for (const std::string precision : {"fp32", "bf16", "auto"}) {
    const testing::CliResult r =
        run_cli("bench --model " + model_ + " --threads 1 --runs 2 --warmup 1 --json --profile "
                "--precision " + precision, false);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(testing::non_empty_lines(r.out).back());
    if (precision != "auto") {
      EXPECT_EQ(j["precision"], precision);
    }
    EXPECT_FALSE(j["precision_reason"].get<std::string>().empty());
  }
  const testing::CliResult bad = run_cli("bench --model " + model_ + " --precision fp8");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--precision"), std::string::npos) << bad.out;
}

// classify takes --precision as run, bench and eval do, and runs a `quantize --mode bf16` file
// in bf16 unless told otherwise; the classes and probabilities stay those of fp32.
TEST_F(DeployCli, ClassifyTakesAPrecision) {
  const std::string pgm = write_pgm(dir_ + "/digit.pgm");
  const std::string sfm = dir_ + "/classifier.sfm", half = dir_ + "/classifier-bf16.sfm";
  ASSERT_EQ(run_cli("import " + model_ + " --out " + sfm).exit_code, 0);
  ASSERT_EQ(run_cli("quantize " + sfm + " --mode bf16 --out " + half).exit_code, 0);
  // "label (class): probability" of the top class.
  auto top = [&](const std::string& model, const std::string& flags) {
    const testing::CliResult r =
        run_cli("classify --model " + model + " --image " + pgm + " --top 1" + flags, false);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    const std::string line = testing::non_empty_lines(r.out).at(0);
    return std::make_pair(line.substr(0, line.find(':')), std::stod(line.substr(line.find(':') + 1)));
  };
  const auto fp32 = top(sfm, "");
  for (const auto& [model, flags] : {std::pair{sfm, std::string(" --precision bf16")},
                                     std::pair{half, std::string()},
                                     std::pair{half, std::string(" --precision fp32")}}) {
    const auto got = top(model, flags);
    EXPECT_EQ(got.first, fp32.first) << model << flags;
    EXPECT_NEAR(got.second, fp32.second, 0.02) << model << flags;
  }
  const testing::CliResult bad =
      run_cli("classify --model " + sfm + " --image " + pgm + " --precision fp8");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--precision"), std::string::npos) << bad.out;
}

TEST_F(DeployCli, RunWritesEachOutputAsNpy) {
  const Tensor x = testing::random_tensor({2, 1, 8, 8}, 5);  // batch 2 on a batch-1 model
  write_npy(dir_ + "/x.npy", x);
  const testing::CliResult r = run_cli("run --model " + model_ + " --input x=" + dir_ +
                                       "/x.npy --output-dir " + dir_ + "/out --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const Tensor y = read_npy(dir_ + "/out/y.npy");
  const Tensor want = testing::run_model(import_onnx(model_), x);
  ASSERT_EQ(y.shape(), want.shape());
  const std::vector<float> got = testing::values<float>(y), expected = testing::values<float>(want);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5) << i;
}

TEST_F(DeployCli, ImportedModelInspects) {
  const std::string sfm = dir_ + "/classifier.sfm";
  ASSERT_EQ(run_cli("import " + model_ + " --out " + sfm).exit_code, 0);
  const testing::CliResult r = run_cli("inspect " + sfm + " --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["file_bytes"].get<uint64_t>(), std::filesystem::file_size(sfm));
  EXPECT_EQ(j["parameters"].get<int64_t>(), 4 * 9 + 4 + kClasses * 4 + kClasses);
}

TEST_F(DeployCli, BadInputIsOneLineErrorNamingTheFile) {
  const std::string pgm = write_pgm(dir_ + "/digit.pgm");
  expect_one_line_error("classify --model " + model_ + " --image " + pgm + " --labels " +
                            write_text(dir_ + "/labels.txt", "zero\none\n"),
                        {"labels.txt", "2 labels", "3 classes"});
  expect_one_line_error(
      "classify --model " + model_ + " --image " + write_text(dir_ + "/notes.png", "not a picture"),
      {"notes.png", "not an image"});
  expect_one_line_error("classify --model " + write_classifier(dir_, 2) + " --image " + pgm,
                        {"digit.pgm", "1-channel image", "2 channels"});

  write_npy(dir_ + "/ints.npy",
            Tensor::from_vector<int32_t>({1, 1, 8, 8}, std::vector<int32_t>(64)));
  expect_one_line_error("run --model " + model_ + " --input x=" + dir_ + "/ints.npy",
                        {"ints.npy", "dtype"});
  write_npy(dir_ + "/narrow.npy", testing::random_tensor({1, 1, 8, 7}, 6));
  expect_one_line_error("run --model " + model_ + " --input x=" + dir_ + "/narrow.npy",
                        {"narrow.npy", "shape"});

  const std::string sfm = dir_ + "/classifier.sfm";
  ASSERT_EQ(run_cli("import " + model_ + " --out " + sfm).exit_code, 0);
  for (const std::string& cut :
       {truncated_copy(model_, dir_ + "/cut.onnx"), truncated_copy(sfm, dir_ + "/cut.sfm")}) {
    expect_one_line_error("inspect " + cut, {cut});
    expect_one_line_error("bench --model " + cut + " --runs 1", {cut});
  }
}

}  // namespace
}  // namespace sf
