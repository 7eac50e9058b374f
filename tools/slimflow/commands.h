// The `slimflow` subcommands. Each adds itself to the CLI11 app and runs when selected.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace sf::cli {

// Returns the action to run if the subcommand was chosen.
using Action = std::function<int()>;

Action add_train_command(CLI::App& app);
Action add_eval_command(CLI::App& app);
Action add_freeze_command(CLI::App& app);
Action add_import_command(CLI::App& app);
Action add_classify_command(CLI::App& app);
Action add_run_command(CLI::App& app);
Action add_bench_command(CLI::App& app);
Action add_inspect_command(CLI::App& app);
Action add_quantize_command(CLI::App& app);
Action add_export_images_command(CLI::App& app);
Action add_prune_command(CLI::App& app);
Action add_size_report_command(CLI::App& app);
Action add_export_command(CLI::App& app);
Action add_distill_command(CLI::App& app);
Action add_retrain_command(CLI::App& app);

// --precision on the commands that run a model (runtime/precision.h).
inline void add_precision_option(CLI::App* cmd, std::string& precision) {
  cmd->add_option("--precision", precision,
                  "fp32, bf16 (convolutions and matrix products round their inputs and weights "
                  "to bf16, accumulate and output fp32; layers without a bf16 kernel stay fp32) "
                  "or auto (bf16 where the CPU has AMX); default: the model's (bf16 for a "
                  "quantize --mode bf16 file), else fp32")
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
}

}  // namespace sf::cli
