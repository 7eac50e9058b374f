// `slimflow freeze` (training run -> .sfm) and `slimflow import` (.onnx -> .sfm).
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "model_io.h"
#include "modelfile/model_file.h"
#include "train/freeze_run.h"

namespace sf::cli {

namespace {

void print_saved(const std::string& out, const ModelFile& model, uint64_t bytes) {
  std::fprintf(stderr, "wrote %s: %d nodes, %.2f MB of weights, %ju bytes on disk\n", out.c_str(),
               model.graph.num_nodes(), static_cast<double>(weight_bytes(model)) / 1e6,
               static_cast<uintmax_t>(bytes));
}

}  // namespace

Action add_freeze_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "freeze", "Freeze a training run into one deployable model file (.sfm): variables become "
                "constants, dropout goes, batch-norm folds, bias and ReLU fuse");
  auto run_dir = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("run", *run_dir, "Run directory written by `slimflow train`")->required();
  cmd->add_option("--out", *out, "Model file to write (.sfm)")->required();
  return [run_dir, out]() {
    ModelFile model = freeze_run(*run_dir);
    print_saved(*out, model, save_model(*out, model));
    return 0;
  };
}

Action add_import_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("import", "Convert an ONNX model into a slimflow model file");
  auto path = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto shapes = std::make_shared<std::vector<std::string>>();
  cmd->add_option("model", *path, "ONNX model (.onnx)")->required();
  cmd->add_option("--out", *out, "Model file to write (.sfm)")->required();
  cmd->add_option("--input-shape", *shapes,
                  "Specialize to a fixed input shape, NAME=D1,D2,... (repeatable); without it a "
                  "model with symbolic dimensions stays symbolic and runs at any size");
  return [path, out, shapes]() {
    const std::map<std::string, Shape> input_shapes = parse_input_shapes(*shapes);
    if (std::optional<std::string> bytes = onnx_source(*path);
        bytes && needs_symbolic_form(declared_onnx_inputs(*bytes, *path), input_shapes)) {
      // Kept as ONNX: it is imported per input shape when run (onnx/shape_specializer.h).
      const ModelFile symbolic = symbolic_model_file(*bytes, *path);
      const uint64_t written = save_model(*out, symbolic);
      std::fprintf(stderr, "%s: symbolic input dimensions kept; planned per input shape at run "
                   "time (--input-shape specializes)\n", out->c_str());
      print_saved(*out, symbolic, written);
      return 0;
    }
    ModelFile model = open_model(*path, input_shapes);
    for (const auto& [name, shape] : input_shapes)
      if (std::find(model.inputs.begin(), model.inputs.end(), name) == model.inputs.end())
        fail("--input-shape {}: {} has no input named '{}' (inputs: {})", name, *path, name,
             fmt::join(model.inputs, ", "));
    model.metadata["source"] = *path;
    // Loaded back before it replaces anything: an import that fails at any step leaves no
    // file, or the previous one, at --out.
    const auto loads_back = [&](const std::string& written) {
      try {
        (void)load_model(written);
      } catch (const Error& e) {
        fail("import {}: the converted model does not load back, nothing written to {}: {}",
             *path, *out, e.what());
      }
    };
    print_saved(*out, model, save_model(*out, model, loads_back));
    return 0;
  };
}

}  // namespace sf::cli
