// `slimflow freeze` (training run -> .sfm) and `slimflow import` (.onnx -> .sfm).
#include <algorithm>
#include <fmt/ranges.h>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <unistd.h>

#include "commands.h"
#include "io/atomic_file.h"
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
    // Written next to the target and loaded back before it replaces anything: an import that
    // fails at any step leaves no file, or the previous one, at --out.
    // A device or pipe has no folder to stage in and no file to replace: the model is checked
    // in the temporary folder, then written in place.
    const bool in_place = is_device_or_pipe(*out);
    const std::string replaced = file_to_replace(*out);
    const std::string staged =
        in_place ? (std::filesystem::temp_directory_path() /
                    fmt::format("slimflow-import-{}.sfm", ::getpid()))
                       .string()
                 : fmt::format("{}.tmp-{}-import", replaced, ::getpid());
    if (!in_place) remove_stale_temporaries(replaced);
    const std::filesystem::path folder = std::filesystem::path(*out).parent_path();
    if (!in_place && !folder.empty() && !std::filesystem::is_directory(folder))
      fail("{}: cannot write model: folder {} does not exist", *out, folder.string());
    try {
      save_model(staged, model);
    } catch (const Error& e) {
      std::error_code ignored;
      std::filesystem::remove(staged, ignored);
      fail("{}: cannot write model: {}", *out, e.what());
    }
    try {
      (void)load_model(staged);
    } catch (const Error& e) {
      std::error_code ignored;
      std::filesystem::remove(staged, ignored);
      fail("import {}: the converted model does not load back, nothing written to {}: {}", *path,
           *out, e.what());
    }
    std::error_code ec;
    if (in_place) {
      std::filesystem::remove(staged, ec);
      print_saved(*out, model, save_model(*out, model));
      return 0;
    }
    std::filesystem::rename(staged, replaced, ec);
    if (ec) {
      std::filesystem::remove(staged, ec);
      fail("{}: cannot write model: {}", *out, ec.message());
    }
    print_saved(*out, model, std::filesystem::file_size(*out));
    return 0;
  };
}

}  // namespace sf::cli
