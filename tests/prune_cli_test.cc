// `slimflow prune --block` as users run it: bad values are one-line errors before any work.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace sf {
namespace {

struct Result {
  int exit_code;
  std::string out;  // stdout and stderr together
};

Result run(const std::string& args) {
  const std::string command = std::string(SLIMFLOW_CLI) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buffer{};
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) out.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

int nonempty_lines(const std::string& text) {
  int n = 0;
  for (size_t i = 0; i < text.size(); ++i)
    n += text[i] != '\n' && (i + 1 == text.size() || text[i + 1] == '\n');
  return n;
}

TEST(PruneCli, BadBlockValuesAreOneLineErrors) {
  for (const char* block : {"0", "3", "-8", "32"}) {
    const Result r = run(std::string("prune /nonexistent-run --target 0.9 --out /nonexistent-out "
                                     "--block ") +
                         block);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_EQ(r.out, std::string("\nslimflow: error: prune: --block must be 1, 4, 8 or 16 (output "
                                 "channels per block), got ") +
                         block + "\n");
  }
  const Result word = run("prune /nonexistent-run --target 0.9 --out /x --block wide");
  EXPECT_NE(word.exit_code, 0);
  EXPECT_NE(word.out.find("--block"), std::string::npos) << word.out;
  const Result structured =
      run("prune /nonexistent-run --structured --target 0.5 --out /x --block 8");
  EXPECT_EQ(structured.exit_code, 1);
  EXPECT_EQ(nonempty_lines(structured.out), 1) << structured.out;
  EXPECT_NE(structured.out.find("--block works with --target or --per-layer"), std::string::npos)
      << structured.out;
}

}  // namespace
}  // namespace sf
