// `slimflow inspect`: what a model holds, node by node.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fmt/format.h>
#include <memory>

#include "commands.h"
#include "model_io.h"

namespace sf::cli {

Action add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show a model's nodes, shapes, parameters and bytes");
  auto path = std::make_shared<std::string>();
  auto json_output = std::make_shared<bool>(false);
  cmd->add_option("model", *path, "Model (.sfm or .onnx)")->required();
  cmd->add_flag("--json", *json_output, "Print one JSON object");
  return [path, json_output]() {
    ModelFile model = open_model(*path);
    const Graph& g = model.graph;
    nlohmann::json nodes = nlohmann::json::array();
    int64_t parameters = 0;
    size_t bytes = 0;
    for (const Node& n : g.nodes()) {
      nlohmann::json inputs = nlohmann::json::array();
      for (const Output& in : n.inputs) inputs.push_back(g.node(in.node).name);
      nlohmann::json j = {{"name", n.name},
                          {"op", n.op},
                          {"inputs", inputs},
                          {"dtype", dtype_name(n.outputs[0].dtype)},
                          {"shape", n.outputs[0].shape}};
      if (n.op == "Const") {
        const Tensor& t = n.attrs.get_tensor("value");
        j["parameters"] = t.numel();
        j["bytes"] = t.bytes();
        j["encoding"] = "dense";
        parameters += t.numel();
        bytes += t.bytes();
      }
      nodes.push_back(j);
    }
    if (*json_output) {
      nlohmann::json out = {{"model", *path},
                            {"inputs", model.inputs},
                            {"outputs", model.outputs},
                            {"metadata", model.metadata},
                            {"nodes", nodes},
                            {"parameters", parameters},
                            {"weight_bytes", bytes},
                            {"file_bytes", model.file_bytes}};
      std::printf("%s\n", out.dump().c_str());
      return 0;
    }
    std::printf("%s: %d nodes, inputs [%s], outputs [%s]\n", path->c_str(), g.num_nodes(),
                fmt::format("{}", fmt::join(model.inputs, ", ")).c_str(),
                fmt::format("{}", fmt::join(model.outputs, ", ")).c_str());
    for (const auto& [k, v] : model.metadata) std::printf("  %s: %s\n", k.c_str(), v.c_str());
    std::printf("\n%-28s %-16s %-20s %12s %12s\n", "node", "op", "output", "parameters", "bytes");
    for (const nlohmann::json& j : nodes) {
      std::string shape = fmt::format("{}{}", j["dtype"].get<std::string>(),
                                      shape_str(j["shape"].get<Shape>()));
      std::string params = j.contains("parameters") ? std::to_string(j["parameters"].get<int64_t>()) : "";
      std::string b = j.contains("bytes") ? std::to_string(j["bytes"].get<size_t>()) : "";
      std::printf("%-28s %-16s %-20s %12s %12s\n", j["name"].get<std::string>().c_str(),
                  j["op"].get<std::string>().c_str(), shape.c_str(), params.c_str(), b.c_str());
    }
    std::printf("\n%lld parameters, %.3f MB of weights, %zu bytes on disk\n",
                static_cast<long long>(parameters), static_cast<double>(bytes) / 1e6,
                model.file_bytes);
    return 0;
  };
}

}  // namespace sf::cli
