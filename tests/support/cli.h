// Running the `slimflow` command from tests, as users do.
#pragma once

#include <string>
#include <vector>

namespace sf::testing {

struct CliResult {
  int exit_code;
  std::string out;  // stdout, and stderr after it unless left out
};

// Runs `slimflow ARGS` through the shell; a command killed by a signal exits 128 + signal.
CliResult run_cli(const std::string& args, bool with_stderr = true);

// Runs a shell command, stderr merged into stdout.
CliResult run_shell(const std::string& command);

std::vector<std::string> non_empty_lines(const std::string& text);

// Expects `slimflow ARGS` to fail with one "slimflow: error: " line holding each of
// `fragments`, and nothing else.
void expect_one_line_error(const std::string& args, const std::vector<std::string>& fragments);

}  // namespace sf::testing
