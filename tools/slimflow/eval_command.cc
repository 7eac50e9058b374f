#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "commands.h"
#include "train/trainer.h"

namespace sf::cli {

Action add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Evaluate a trained model on a data set's test split");
  struct Args {
    std::string model;
    std::string data = "mnist";
    int64_t limit = 0;
    int threads = 0;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--model", args->model, "Run directory written by `slimflow train`")->required();
  cmd->add_option("--data", args->data, "mnist, fashion-mnist, or a folder of IDX files")
      ->default_str("mnist");
  cmd->add_option("--limit", args->limit, "Evaluate only the first N test examples");
  cmd->add_option("--threads", args->threads, "Threads (0: all cores)");
  cmd->add_flag("--json", args->json, "Print one JSON object on stdout");
  return [args]() {
    EvalResult r = evaluate_run(args->model, args->data, args->limit, args->threads);
    if (args->json) {
      nlohmann::json j = {{"accuracy", r.accuracy}, {"count", r.count}, {"loss", r.loss}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("accuracy %.2f%% on %lld images (loss %.4f)\n", 100.0 * r.accuracy,
                  static_cast<long long>(r.count), r.loss);
    }
    return 0;
  };
}

}  // namespace sf::cli
