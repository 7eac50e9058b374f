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
    std::vector<std::string> inputs;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--model", a->model, "Model (.sfm or .onnx)")->required();
  cmd->add_option("--input", a->inputs, "NAME=file.npy (repeatable; NAME= may be omitted for a "
                                        "single-input model)")->required();
  cmd->add_option("--output-dir", a->output_dir, "Folder for <output>.npy files");
  cmd->add_option("--threads", a->threads, "Threads (0: all cores)");
  return [a]() {
    ModelToRun run = open_model_to_run(a->model);
    const ModelFile& model = run.file;
    Feeds feeds;
    for (const std::string& spec : a->inputs) {
      auto eq = spec.find('=');
      std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
      std::string file = eq == std::string::npos ? spec : spec.substr(eq + 1);
      if (name.empty()) {
        if (model.inputs.size() != 1)
          fail("--input {}: the model has {} inputs; name them (NAME=file.npy)", spec, model.inputs.size());
        name = model.inputs[0];
      }
      size_t index = model.inputs.size();
      for (size_t i = 0; i < model.inputs.size(); ++i)
        if (model.inputs[i] == name) index = i;
      if (index == model.inputs.size())
        fail("--input {}: the model has no input '{}'", spec, name);
      Tensor value = read_npy(file);
      const TensorType& want = run.input_type(index);
      if (value.dtype() != want.dtype)
        fail("{}: dtype {} does not fit input '{}' ({})", file, dtype_name(value.dtype()), name,
             type_str(want));
      bool fits = value.rank() == static_cast<int>(want.shape.size());
      for (size_t d = 1; fits && d < want.shape.size(); ++d) fits = value.shape()[d] == want.shape[d];
      if (!fits)
        fail("{}: shape {} does not fit input '{}' {} (only the batch dimension may differ)", file,
             shape_str(value.shape()), name, shape_str(want.shape));
      feeds.emplace_back(run.input_ports[index], value);
    }
    if (feeds.size() != model.inputs.size())
      fail("the model has {} inputs, {} given", model.inputs.size(), feeds.size());
    // One file per output, checked before anything runs or is written: 'a/b' and 'a_b' would
    // otherwise both become a_b.npy, the second silently replacing the first.
    std::vector<std::string> files;
    std::map<std::string, std::string> owner;  // file name -> the output written there
    for (const std::string& output : model.outputs) {
      std::string name = output;
      for (char& c : name)
        if (c == '/' || c == ':') c = '_';
      if (auto [it, fresh] = owner.emplace(name, output); !fresh)
        fail("outputs '{}' and '{}' would both be written to {}.npy", it->second, output, name);
      files.push_back(name + ".npy");
    }
    Session session(model.graph, SessionOptions{.threads = a->threads});
    std::vector<Tensor> outs = session.run(feeds, run.output_ports);
    std::filesystem::create_directories(a->output_dir);
    for (size_t i = 0; i < outs.size(); ++i) {
      std::string path = (std::filesystem::path(a->output_dir) / files[i]).string();
      write_npy(path, outs[i]);
      std::fprintf(stderr, "wrote %s %s%s\n", path.c_str(), dtype_name(outs[i].dtype()),
                   shape_str(outs[i].shape()).c_str());
    }
    return 0;
  };
}

}  // namespace sf::cli
