// slimflow: train, compress, evaluate and deploy neural networks.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli_hygiene.h"
#include "commands.h"
#include "core/error.h"
#include "cpu/thread_wait_policy.h"

namespace {

// OpenMP has read its wait policy before main; on busy cores this program starts again with
// passive waiting (cpu/thread_wait_policy.h). Once only: the reason variable marks the new
// image (and is empty in a process that chose to spin); when exec fails, the command runs on
// as it is.
void wait_passively_on_busy_cores(char** argv) {
  if (std::getenv(sf::kWaitPolicyReasonVariable) != nullptr) return;
  const std::string reason = sf::reason_to_wait_passively();
  setenv(sf::kWaitPolicyReasonVariable, reason.c_str(), 1);
  if (reason.empty()) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);
  unsetenv("OMP_WAIT_POLICY");
  setenv(sf::kWaitPolicyReasonVariable, "", 1);
}

}  // namespace

int main(int argc, char** argv) {
  wait_passively_on_busy_cores(argv);
  CLI::App app{"slimflow: train, compress, evaluate and deploy neural networks", "slimflow"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "slimflow 0.1.0");
  std::vector<std::pair<CLI::App*, sf::cli::Action>> commands;
  auto remember = [&](sf::cli::Action action) {
    commands.emplace_back(app.get_subcommands({}).back(), std::move(action));
  };
  remember(sf::cli::add_train_command(app));
  remember(sf::cli::add_eval_command(app));
  remember(sf::cli::add_freeze_command(app));
  remember(sf::cli::add_import_command(app));
  remember(sf::cli::add_classify_command(app));
  remember(sf::cli::add_run_command(app));
  remember(sf::cli::add_bench_command(app));
  remember(sf::cli::add_inspect_command(app));
  remember(sf::cli::add_quantize_command(app));
  remember(sf::cli::add_export_images_command(app));
  remember(sf::cli::add_prune_command(app));
  remember(sf::cli::add_size_report_command(app));
  remember(sf::cli::add_export_command(app));
  remember(sf::cli::add_distill_command(app));
  remember(sf::cli::add_retrain_command(app));
  sf::cli::add_common_limits(app);
  if (int rc = sf::cli::parse_or_report(app, argc, argv); rc >= 0) return rc;
  try {
    for (auto& [sub, action] : commands)
      if (sub->parsed()) return action();
  } catch (const sf::Error& e) {
    std::fprintf(stderr, "\nslimflow: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nslimflow: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
