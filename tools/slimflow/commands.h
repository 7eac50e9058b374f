// The `slimflow` subcommands. Each adds itself to the CLI11 app and runs when selected.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace sf::cli {

// Returns the action to run if the subcommand was chosen.
using Action = std::function<int()>;

Action add_train_command(CLI::App& app);
Action add_eval_command(CLI::App& app);

}  // namespace sf::cli
