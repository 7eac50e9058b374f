// `slimflow run`: feed .npy inputs, write one .npy per output (to compare with other runtimes).
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "commands.h"
#include "io/npy.h"
#include "model_io.h"

namespace sf::cli {

Action add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run a model on .npy inputs and write .npy outputs");
  struct Args {
    std::string model, output_dir = ".";
    std::vector<std::string> inputs, input_shapes;
    int threads = 0;
    std::string precision;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--model", a->model, "Model (.sfm or .onnx)")->required();
  cmd->add_option("--input", a->inputs, "NAME=file.npy (repeatable; NAME= may be omitted for a "
                                        "single-input model)")->required();
  cmd->add_option("--output-dir", a->output_dir, "Folder for <output>.npy files");
  cmd->add_option("--threads", a->threads, "Threads (0: all cores)");
  add_precision_option(cmd, a->precision);
  cmd->add_option("--input-shape", a->input_shapes,
                  "Specialize a symbolic input, NAME=D1,D2,... (repeatable; by default the "
                  "shape comes from the input given)");
  auto placement = std::make_shared<PlacementFlags>();
  add_placement_flags(cmd, *placement);
  return [a, placement]() {
    ModelRunner runner(a->model, parse_input_shapes(a->input_shapes),
                       SessionOptions{.threads = a->threads}, a->precision, placement.get());
    const std::vector<DeclaredInput>& inputs = runner.inputs();
    std::vector<Tensor> values(inputs.size());
    std::vector<std::string> files(inputs.size());
    for (const std::string& spec : a->inputs) {
      auto eq = spec.find('=');
      std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
      std::string file = eq == std::string::npos ? spec : spec.substr(eq + 1);
      if (name.empty()) {
        if (inputs.size() != 1)
          fail("--input {}: the model has {} inputs; name them (NAME=file.npy)", spec, inputs.size());
        name = inputs[0].name;
      }
      const size_t index = runner.input_index(name);
      if (index == inputs.size())
        fail("--input {}: the model has no input '{}'", spec, name);
      values[index] = read_npy(file);
      files[index] = file;
    }
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!values[i].defined())
        fail("the model has {} inputs; input '{}' was not given (--input {}=file.npy)",
             inputs.size(), inputs[i].name, inputs[i].name);
    try {
      runner.check_inputs(values);
    } catch (const InputMismatch& e) {
      fail("{}: {}", files[e.input], e.what());
    }
    // One file per output, checked before anything runs or is written: 'a/b' and 'a_b' would
    // otherwise both become a_b.npy, the second silently replacing the first.
    std::vector<std::string> output_files;
    std::map<std::string, std::string> owner;  // file name -> the output written there
    for (const std::string& output : runner.outputs()) {
      std::string name = output;
      for (char& c : name)
        if (c == '/' || c == ':') c = '_';
      if (auto [it, fresh] = owner.emplace(name, output); !fresh)
        fail("outputs '{}' and '{}' would both be written to {}.npy", it->second, output, name);
      output_files.push_back(name + ".npy");
    }
    std::vector<Tensor> outs = runner.run(values);
    std::filesystem::create_directories(a->output_dir);
    for (size_t i = 0; i < outs.size(); ++i) {
      std::string path = (std::filesystem::path(a->output_dir) / output_files[i]).string();
      write_npy(path, outs[i]);
      std::fprintf(stderr, "wrote %s %s%s\n", path.c_str(), dtype_name(outs[i].dtype()),
                   shape_str(outs[i].shape()).c_str());
    }
    return 0;
  };
}

}  // namespace sf::cli
