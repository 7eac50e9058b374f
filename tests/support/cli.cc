#include "support/cli.h"

#include <sys/wait.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <sstream>

namespace sf::testing {

namespace {

CliResult run_shell_command(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buffer{};
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) out.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace

CliResult run_cli(const std::string& args, bool with_stderr) {
  const std::string command =
      std::string(SLIMFLOW_CLI) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  return run_shell_command(command);
}

CliResult run_shell(const std::string& command) { return run_shell_command(command + " 2>&1"); }

std::vector<std::string> non_empty_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(line);
  return lines;
}

void expect_one_line_error(const std::string& args, const std::vector<std::string>& fragments) {
  SCOPED_TRACE(args);
  const CliResult r = run_cli(args);
  EXPECT_NE(r.exit_code, 0) << r.out;
  const std::vector<std::string> lines = non_empty_lines(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  EXPECT_EQ(lines[0].rfind("slimflow: error: ", 0), 0u) << lines[0];
  for (const std::string& f : fragments)
    EXPECT_NE(lines[0].find(f), std::string::npos) << "\"" << f << "\" not in: " << lines[0];
}

}  // namespace sf::testing
