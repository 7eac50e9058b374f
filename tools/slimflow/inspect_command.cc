// `slimflow inspect`: what a model holds, node by node.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <memory>

#include "commands.h"
#include "kernels/cpu_report.h"
#include "kernels/sparse/sparse_weights.h"
#include "modelfile/verify.h"
#include "model_io.h"
#include "ops/op_names.h"
#include "quantize/eightbit_rewrite.h"

namespace sf::cli {

namespace {

// How a Const's tensor is stored: "dense", "linear8", "linear4/ch", "kmeans4 (16)", "f16",
// "bf16".
std::string storage_text(const quant::WeightEncoding& e) {
  switch (e.kind) {
    case quant::Encoding::linear:
      return fmt::format("linear{}{}", e.bits, e.per_channel() ? "/ch" : "");
    case quant::Encoding::kmeans:
      return fmt::format("kmeans{} ({})", e.bits, e.codebook.size());
    case quant::Encoding::f16:
      return "f16";
    case quant::Encoding::bf16:
      return "bf16";
    case quant::Encoding::sparse:
      return "sparse";
    case quant::Encoding::binary:
      return "binary1/ch";
    case quant::Encoding::ternary:
      return "ternary2/ch";
  }
  return "?";
}

int print_cpu_report(bool json_output) {
  const CpuReport r = describe_cpu();
  if (json_output) {
    nlohmann::json paths = nlohmann::json::object();
    for (const KernelPath& p : r.paths) paths[p.work] = p.path;
    const nlohmann::json out = {{"cpu", r.model},        {"logical_cpus", r.logical_cpus},
                                {"features", r.features}, {"amx", r.amx},
                                {"onednn_version", r.onednn_version},
                                {"onednn_isa", r.onednn_isa}, {"kernel_paths", paths},
                                {"bf16", r.bf16}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("cpu: %s, %u logical CPUs\n", r.model.c_str(), r.logical_cpus);
  std::printf("features: %s\n", fmt::format("{}", fmt::join(r.features, " ")).c_str());
  std::printf("oneDNN %s, effective ISA %s\n", r.onednn_version.c_str(), r.onednn_isa.c_str());
  std::printf("bf16: %s\n\n", r.bf16.c_str());
  size_t width = 0;
  for (const KernelPath& p : r.paths) width = std::max(width, p.work.size());
  for (const KernelPath& p : r.paths)
    std::printf("  %-*s  %s\n", static_cast<int>(width), p.work.c_str(), p.path.c_str());
  return 0;
}

// Fails unless the weight data of an .sfm file matches its recorded checksum; reports on stderr.
void verify_model_weights(const std::string& path) {
  if (std::filesystem::path(path).extension() == ".onnx")
    fail("{}: --verify checks .sfm files (ONNX records no weight checksum)", path);
  const WeightsCheck check = verify_weights(path);
  if (!check.recorded)
    fail("{}: records no weight checksum (written before checksums existed); import or freeze it "
         "again to add one",
         path);
  if (!check.ok())
    fail("{}: weight data is corrupt: its {} bytes have CRC-32 {:08x}, the file records {:08x}",
         path, check.data_bytes, check.actual, *check.recorded);
  std::fprintf(stderr, "%s: weights verified (%llu bytes, CRC-32 %08x)\n", path.c_str(),
               static_cast<unsigned long long>(check.data_bytes), check.actual);
}

}  // namespace

Action add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show a model's nodes, shapes, parameters and bytes");
  auto path = std::make_shared<std::string>();
  auto json_output = std::make_shared<bool>(false);
  auto cpu = std::make_shared<bool>(false);
  auto* model_option = cmd->add_option("model", *path, "Model (.sfm or .onnx)");
  cmd->add_flag("--json", *json_output, "Print one JSON object");
  cmd->add_flag("--cpu", *cpu,
                "Show what this CPU offers and which kernel paths the engine takes on it")
      ->excludes(model_option);
  auto verify = std::make_shared<bool>(false);
  cmd->add_flag("--verify", *verify,
                "Check the weight data against the CRC-32 recorded when the model was written");
  return [path, json_output, cpu, verify]() {
    if (*cpu) return print_cpu_report(*json_output);
    if (path->empty()) fail("inspect: give a model file, or --cpu");
    if (*verify) verify_model_weights(*path);
    ModelFile model = open_model(*path);
    const Graph& g = model.graph;
    nlohmann::json nodes = nlohmann::json::array();
    int64_t parameters = 0, quantization_values = 0;
    size_t bytes = 0, stored_bytes = 0;
    const std::vector<bool> quantization = quantization_constants(g);
    for (const Node& n : g.nodes()) {
      nlohmann::json inputs = nlohmann::json::array();
      for (const Output& in : n.inputs) inputs.push_back(g.node(in.node).name);
      nlohmann::json j = {{"name", n.name},
                          {"op", n.op},
                          {"inputs", inputs},
                          {"dtype", dtype_name(n.outputs[0].dtype)},
                          {"shape", n.outputs[0].shape}};
      if (n.op == op_names::kConst) {
        const Tensor& t = n.attrs.get_tensor("value");
        // Scales, zero points and ranges describe the number format, not what the model learned.
        const bool quantization_constant = quantization[static_cast<size_t>(n.id)];
        if (quantization_constant)
          j["quantization_values"] = t.numel();
        else
          j["parameters"] = t.numel();
        j["bytes"] = t.bytes();  // as loaded (decoded)
        j["fp32_bytes"] = t.bytes();
        // i8 weights are symmetric: their zero is the float zero (pruned weights stay pruned).
        if (t.numel() > 0 && !quantization_constant &&
            (t.dtype() == DType::f32 || t.dtype() == DType::i8))
          j["sparsity"] = sparse::zero_fraction(t);
        auto stored = model.stored_weights.find(n.name);
        if (stored == model.stored_weights.end()) {
          j["encoding"] = "dense";
          j["bits"] = dtype_size(t.dtype()) * 8;
          j["per_channel"] = false;
          j["stored_bytes"] = t.bytes();
          j["storage"] = "dense";
          stored_bytes += t.bytes();
        } else {
          const quant::WeightEncoding& e = stored->second.encoding;
          j["encoding"] = quant::encoding_name(e.kind);
          j["bits"] = e.bits;
          j["per_channel"] = e.per_channel();
          if (e.per_channel()) j["axis"] = e.axis;
          if (e.kind == quant::Encoding::kmeans) j["codebook_size"] = e.codebook.size();
          if (e.kind == quant::Encoding::binary || e.kind == quant::Encoding::ternary)
            j["scales"] = e.scales;
          j["stored_bytes"] = stored->second.stored_bytes();
          j["storage"] = storage_text(e);
          stored_bytes += stored->second.stored_bytes();
        }
        (quantization_constant ? quantization_values : parameters) += t.numel();
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
                            {"quantization_values", quantization_values},
                            {"weight_bytes", bytes},
                            {"stored_weight_bytes", stored_bytes},
                            {"file_bytes", model.file_bytes}};
      std::printf("%s\n", out.dump().c_str());
      return 0;
    }
    std::printf("%s: %d nodes, inputs [%s], outputs [%s]\n", path->c_str(), g.num_nodes(),
                fmt::format("{}", fmt::join(model.inputs, ", ")).c_str(),
                fmt::format("{}", fmt::join(model.outputs, ", ")).c_str());
    for (const auto& [k, v] : model.metadata) std::printf("  %s: %s\n", k.c_str(), v.c_str());
    std::printf("\n%-28s %-16s %-20s %12s %9s %12s %-14s %12s\n", "node", "op", "output",
                "parameters", "sparsity", "bytes", "stored as", "stored bytes");
    for (const nlohmann::json& j : nodes) {
      std::string shape = fmt::format("{}{}", j["dtype"].get<std::string>(),
                                      shape_str(j["shape"].get<Shape>()));
      std::string params = j.contains("parameters") ? std::to_string(j["parameters"].get<int64_t>())
                           : j.contains("quantization_values")
                               ? fmt::format("({})", j["quantization_values"].get<int64_t>())
                               : "";
      std::string b = j.contains("bytes") ? std::to_string(j["bytes"].get<size_t>()) : "";
      std::string storage = j.contains("storage") ? j["storage"].get<std::string>() : "";
      std::string stored =
          j.contains("stored_bytes") ? std::to_string(j["stored_bytes"].get<size_t>()) : "";
      const std::string sparsity =
          j.contains("sparsity") ? fmt::format("{:.1f}%", 100.0 * j["sparsity"].get<double>()) : "";
      std::printf("%-28s %-16s %-20s %12s %9s %12s %-14s %12s\n", j["name"].get<std::string>().c_str(),
                  j["op"].get<std::string>().c_str(), shape.c_str(), params.c_str(),
                  sparsity.c_str(), b.c_str(), storage.c_str(), stored.c_str());
    }
    for (const nlohmann::json& j : nodes) {
      if (!j.contains("scales")) continue;
      const std::vector<float> scales = j["scales"].get<std::vector<float>>();
      const auto [lo, hi] = std::minmax_element(scales.begin(), scales.end());
      std::printf("%s %s: %zu channel scales in [%.4g, %.4g]\n", j["encoding"].get<std::string>().c_str(),
                  j["name"].get<std::string>().c_str(), scales.size(), scales.empty() ? 0.0 : *lo,
                  scales.empty() ? 0.0 : *hi);
    }
    const std::string besides =
        quantization_values > 0
            ? fmt::format(" (and {} quantization values: scales, zero points, ranges)",
                          quantization_values)
            : "";
    std::printf("\n%lld parameters%s, %.3f MB of weights (%.3f MB stored), %zu bytes on disk\n",
                static_cast<long long>(parameters), besides.c_str(),
                static_cast<double>(bytes) / 1e6, static_cast<double>(stored_bytes) / 1e6,
                model.file_bytes);
    return 0;
  };
}

}  // namespace sf::cli
