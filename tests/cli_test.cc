// The `slimflow` command as users run it: exit codes, one-line errors, JSON, kill and resume.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cpu/cpu_features.h"
#include "support/cli.h"
#include "support/mnist.h"
#include "support/temp_files.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using Result = testing::CliResult;
using testing::run_cli;

std::string tiny() { return testing::source_path("tests/data/tiny-cnn.yaml"); }

// The last non-empty line, and how many lines start with "slimflow: error".
std::string error_line(const std::string& out) {
  size_t pos = out.find("slimflow: error: ");
  if (pos == std::string::npos) return "";
  return out.substr(pos, out.find('\n', pos) - pos);
}

TEST(CliTest, HelpListsCommands) {
  Result r = run_cli("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("train"), std::string::npos);
  EXPECT_NE(r.out.find("eval"), std::string::npos);
  Result t = run_cli("train --help");
  EXPECT_EQ(t.exit_code, 0);
  for (const char* option : {"--batch", "--lr", "--optimizer", "--weight-decay", "--lr-schedule",
                             "--seed", "--threads", "--checkpoint-every", "--json", "--resume"})
    EXPECT_NE(t.out.find(option), std::string::npos) << option;
}

TEST(CliTest, MissingDataFolderIsOneLineError) {
  std::string dir = testing::make_temp_dir("sf-cli-nodata");
  Result r = run_cli("train --model " + tiny() + " --data " + dir + " --out " + dir + "/run --quiet");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(error_line(r.out).find(dir), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(CliTest, TruncatedIdxFileIsOneLineError) {
  std::string dir = testing::make_temp_dir("sf-cli-trunc");
  // A header promising 1000 28x28 images followed by only 10 bytes.
  const unsigned char header[] = {0, 0, 8, 3, 0, 0, 3, 0xE8, 0, 0, 0, 28, 0, 0, 0, 28};
  for (const char* name : {"train-images-idx3-ubyte", "t10k-images-idx3-ubyte"}) {
    std::ofstream f(dir + "/" + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(header), sizeof header);
    f.write("0123456789", 10);
  }
  const unsigned char labels[] = {0, 0, 8, 1, 0, 0, 0, 2, 1, 2};
  for (const char* name : {"train-labels-idx1-ubyte", "t10k-labels-idx1-ubyte"}) {
    std::ofstream f(dir + "/" + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(labels), sizeof labels);
  }
  Result r = run_cli("train --model " + tiny() + " --data " + dir + " --out " + dir + "/run --quiet");
  EXPECT_EQ(r.exit_code, 1);
  std::string line = error_line(r.out);
  EXPECT_NE(line.find("train-images-idx3-ubyte"), std::string::npos) << r.out;
  EXPECT_NE(line.find("truncated"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(CliTest, BadModelSpecIsOneLineError) {
  std::string dir = testing::make_temp_dir("sf-cli-spec");
  std::ofstream(dir + "/bad.yaml") << "name: b\ninput: [28, 28, 1]\nclasses: 10\nlayers:\n"
                                      "  - {name: c, type: conv3d, filters: 3}\n";
  Result r = run_cli("train --model " + dir + "/bad.yaml --out " + dir + "/run --quiet");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(error_line(r.out).find("bad.yaml:5: layer 'c': unknown type 'conv3d'"),
            std::string::npos)
      << r.out;
  std::filesystem::remove_all(dir);
}

TEST(CliTest, UnknownOptionValueIsRejected) {
  Result r = run_cli("train --model " + tiny() + " --optimizer adagrad --out /tmp/x");
  EXPECT_NE(r.exit_code, 0);
}

TEST(CliTest, QatAndInitFromOptions) {
  Result help = run_cli("train --help");
  EXPECT_NE(help.out.find("--qat"), std::string::npos);
  EXPECT_NE(help.out.find("--init-from"), std::string::npos);
  EXPECT_NE(run_cli("train --model " + tiny() + " --qat 9 --out /tmp/x").exit_code, 0);
  Result both = run_cli("train --resume /tmp/a --init-from /tmp/b --out /tmp/c");
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(error_line(both.out).find("give one"), std::string::npos) << both.out;
}

TEST(CliTest, JsonEpochLinesAndEval) {
  REQUIRE_MNIST();
  std::string dir = testing::make_temp_dir("sf-cli-json");
  Result r = run_cli("train --model " + tiny() + " --train-limit 320 --test-limit 200 --epochs 2 "
                 "--threads 1 --quiet --json --out " + dir + "/run", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::istringstream lines(r.out);
  std::string line;
  int epochs = 0;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    for (const char* key : {"epoch", "loss", "test_accuracy", "images_per_sec", "epoch_seconds",
                            "peak_rss_mb"})
      EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_GE(j["test_accuracy"].get<double>(), 0.0);
    EXPECT_LE(j["test_accuracy"].get<double>(), 1.0);
    // The default precision is auto: bf16 exactly where the CPU has AMX.
    EXPECT_EQ(j["precision"], cpu_features().amx_bf16 ? "bf16" : "fp32");
    EXPECT_EQ(j["precision_reason"].get<std::string>().rfind("auto:", 0), 0u) << j["precision_reason"];
    ++epochs;
  }
  EXPECT_EQ(epochs, 2);
  Result e = run_cli("eval --model " + dir + "/run --data mnist --limit 200 --json", false);
  ASSERT_EQ(e.exit_code, 0) << e.out;
  auto j = nlohmann::json::parse(e.out);
  EXPECT_EQ(j["count"].get<int>(), 200);
  EXPECT_GT(j["accuracy"].get<double>(), 0.0);
  std::filesystem::remove_all(dir);
}

TEST(CliTest, KilledRunResumesFromItsLastCheckpoint) {
  REQUIRE_MNIST();
  std::string dir = testing::make_temp_dir("sf-cli-kill");
  std::string run_dir = dir + "/run";
  std::string checkpoint = run_dir + "/checkpoint.sfck";
  // Started by the shell because SLIMFLOW_CLI may begin with an emulator (the aarch64 tests run
  // under qemu); its exec leaves one process to kill.
  const std::string command = std::string("exec ") + SLIMFLOW_CLI + " train --model " + tiny() +
                              " --train-limit 3200 --test-limit 200 --epochs 2"
                              " --checkpoint-every 5 --threads 1 --quiet --out " + run_dir;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for a checkpoint, then kill the trainer mid-run (maybe mid-write).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(checkpoint) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(std::filesystem::exists(checkpoint));
  Result r = run_cli("train --resume " + run_dir + " --quiet --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("resuming " + run_dir + " at epoch"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("(step 0)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 2/2"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sf
