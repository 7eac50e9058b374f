// `slimflow distill`: trains a student spec from a teacher's softened outputs and the labels;
// every `train` flag applies, and the result is an ordinary run.
#include <filesystem>
#include <memory>
#include <optional>

#include "commands.h"
#include "teacher.h"
#include "train/training_run.h"
#include "train_flags.h"

namespace sf::cli {

Action add_distill_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "distill", "Train a student model from a teacher's soft outputs (knowledge distillation)");
  struct Args {
    TrainOptions options;
    bool json = false, quiet = false;
    std::string teacher, teacher_logits;
    std::optional<double> temperature, alpha;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--teacher", a->teacher, "Teacher: a run directory, a .sfm or an .onnx model");
  cmd->add_option("--student", a->options.model_path,
                  "Student model spec (YAML), e.g. models/mlp-800.yaml (same as --model)");
  cmd->add_option("--teacher-logits", a->teacher_logits,
                  "The teacher's logits node (default: the input of its final softmax)");
  cmd->add_option("--temperature", a->temperature, "Softmax temperature T > 0 (default 4)");
  cmd->add_option("--alpha", a->alpha,
                  "Weight of the teacher's soft targets in [0, 1]; labels get 1 - alpha "
                  "(default 0.9)");
  add_training_flags(cmd, a->options, a->json, a->quiet);
  return [a, cmd]() {
    TeacherSource source{.path = a->teacher,
                         .logits_node = a->teacher_logits,
                         .temperature = a->temperature.value_or(4.0),
                         .alpha = a->alpha.value_or(0.9),
                         .threads = a->options.threads};
    if (!a->options.resume_dir.empty()) {
      // The run remembers how it was taught; flags given now override it.
      const TrainingRun run(a->options.resume_dir);
      if (!run.metadata().contains("distill"))
        fail("{}: not a distillation run; resume it with slimflow train --resume",
             a->options.resume_dir);
      run.read_metadata([&](const nlohmann::json& meta) {
        const nlohmann::json& d = meta.at("distill");
        if (source.path.empty()) source.path = d.at("teacher");
        if (source.logits_node.empty() && d.contains("teacher_logits") &&
            !std::filesystem::is_directory(source.path))
          source.logits_node = d.at("teacher_logits");
        if (!a->temperature) source.temperature = d.at("temperature");
        if (!a->alpha) source.alpha = d.at("alpha");
        return 0;
      });
    }
    if (a->options.resume_dir.empty() && a->options.init_from.empty() &&
        a->options.model_path.empty())
      fail("distill: --student SPEC is required");
    TrainOptions options = a->options;
    // A resumed run keeps its own data set unless --data names another.
    if (!options.resume_dir.empty() && cmd->get_option("--data")->count() == 0) options.data.clear();
    options.distillation = open_teacher(source);
    train(options, printing_callbacks(a->json, a->quiet));
    return 0;
  };
}

}  // namespace sf::cli
