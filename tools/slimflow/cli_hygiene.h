// What every subcommand shares: --max-memory, the --threads bound, and CLI11's parse errors
// reported in our one-line format (exit 2), so that no command can forget one of them.
#pragma once

#include <CLI/CLI.hpp>

namespace sf::cli {

// Adds --max-memory to every subcommand and bounds every --threads option.
void add_common_limits(CLI::App& app);

// A validator for integer options: the value must be at least `minimum`.
CLI::Validator at_least(int64_t minimum);

// Parses argv; returns -1 to go on, else the exit code after printing help, the version or
// one `slimflow: error:` line.
int parse_or_report(CLI::App& app, int argc, char** argv);

}  // namespace sf::cli
