// `slimflow prune --block` as users run it: bad values are one-line errors before any work.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/cli.h"
#include "support/temp_files.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using Result = testing::CliResult;
using testing::run_cli;

TEST(PruneCli, BadBlockValuesAreOneLineErrors) {
  for (const char* block : {"0", "3", "-8", "32"}) {
    const Result r = run_cli(std::string("prune /nonexistent-run --target 0.9 --out /nonexistent-out "
                                     "--block ") +
                         block);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_EQ(r.out, std::string("\nslimflow: error: prune: --block must be 1, 4, 8 or 16 (output "
                                 "channels per block), got ") +
                         block + "\n");
  }
  const Result word = run_cli("prune /nonexistent-run --target 0.9 --out /x --block wide");
  EXPECT_NE(word.exit_code, 0);
  EXPECT_NE(word.out.find("--block"), std::string::npos) << word.out;
  const Result structured =
      run_cli("prune /nonexistent-run --structured --target 0.5 --out /x --block 8");
  EXPECT_EQ(structured.exit_code, 1);
  EXPECT_EQ(testing::non_empty_lines(structured.out).size(), 1u) << structured.out;
  EXPECT_NE(structured.out.find("--block works with --target or --per-layer"), std::string::npos)
      << structured.out;
}

TEST(PruneCli, OutCannotBeTheRunBeingPruned) {
  const std::string run = testing::make_temp_dir("sf-prune-self");
  for (const std::string how : {"--target 0.5", "--structured --target 0.5"})
    for (const std::string& out : {run, run + "/", run + "/."}) {
      const Result r = run_cli("prune " + run + " " + how + " --lr 0.001 --out " + out);
      EXPECT_EQ(r.exit_code, 1) << r.out;
      EXPECT_EQ(r.out, "\nslimflow: error: prune: --out " + out + " is the run being pruned (" +
                           run + "), which the pruned run would replace; give another directory\n")
          << how;
    }
  std::filesystem::remove_all(run);
}

}  // namespace
}  // namespace sf
