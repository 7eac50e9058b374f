// slimflow size-report: Deep Compression's size table for a (pruned) model file.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "compress/size_report.h"
#include "model_io.h"

namespace sf::cli {

namespace {

struct SizeReportArgs {
  std::string model;
  SizeReportOptions options;
  std::string write;
  bool json = false;
};

double kb(uint64_t bytes) { return static_cast<double>(bytes) / 1024.0; }

// How the file stores a weight tensor now: its encoding (binary, ternary, sparse, ...; "dense")
// and bytes (data and parameters).
std::pair<std::string, uint64_t> stored_as(const ModelFile& model, const SizeReportRow& row) {
  auto it = model.stored_weights.find(row.node);
  if (it == model.stored_weights.end()) return {"dense", row.fp32_bytes};
  return {quant::encoding_name(it->second.encoding.kind), it->second.stored_bytes()};
}

int run_size_report(const SizeReportArgs& a) {
  const ModelFile model = open_model(a.model);
  const SizeReport r = size_report(model, a.options, a.model);
  if (!a.write.empty()) write_compressed_model(model, r, a.write);
  const double ratio = static_cast<double>(r.fp32_bytes()) / static_cast<double>(r.final_bytes());
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const SizeReportRow& row : r.rows)
      rows.push_back({{"layer", row.layer},
                      {"stored_encoding", stored_as(model, row).first},
                      {"stored_bytes", stored_as(model, row).second},
                      {"node", row.node},
                      {"total_weights", row.total_weights},
                      {"nonzero_weights", row.nonzero_weights},
                      {"fp32_bytes", row.fp32_bytes},
                      {"pruned_bytes", row.pruned_bytes},
                      {"quantized_bytes", row.quantized_bytes},
                      {"final_bytes", row.final_bytes},
                      {"index_bits", row.final_dense ? 0 : row.final_options.index_bits}});
    nlohmann::json out = {{"model", a.model},
                          {"bits", a.options.bits},
                          {"scheme", a.options.bits ? a.options.scheme : "none"},
                          {"layers", rows},
                          {"other_bytes", r.other_bytes},
                          {"fp32_bytes", r.fp32_bytes()},
                          {"pruned_bytes", r.pruned_bytes()},
                          {"quantized_bytes", r.quantized_bytes()},
                          {"final_bytes", r.final_bytes()},
                          {"compression_ratio", ratio},
                          {"nonzero_weights", r.nonzero_weights()},
                          {"total_weights", r.total_weights()}};
    if (!a.write.empty()) out["written"] = a.write;
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  const std::string quantized =
      a.options.bits ? fmt::format("+{}-bit {}", a.options.bits, a.options.scheme) : "(no quant)";
  std::printf("%-14s %9s %9s %6s %11s %11s %13s %11s %7s\n", "layer", "weights", "nonzero",
              "kept", "fp32 KB", "pruned KB", quantized.c_str(), "+Huffman KB", "ratio");
  for (const SizeReportRow& row : r.rows)
    std::printf("%-14s %9lld %9lld %5.1f%% %11.1f %11.1f %13.1f %11.1f %6.1fx\n",
                row.layer.c_str(), static_cast<long long>(row.total_weights),
                static_cast<long long>(row.nonzero_weights),
                100.0 * static_cast<double>(row.nonzero_weights) /
                    static_cast<double>(std::max<int64_t>(row.total_weights, 1)),
                kb(row.fp32_bytes), kb(row.pruned_bytes), kb(row.quantized_bytes),
                kb(row.final_bytes),
                static_cast<double>(row.fp32_bytes) / static_cast<double>(row.final_bytes));
  std::printf("%-14s %9s %9s %6s %11.1f %11.1f %13.1f %11.1f\n", "other (fp32)", "", "", "",
              kb(r.other_bytes), kb(r.other_bytes), kb(r.other_bytes), kb(r.other_bytes));
  std::printf("%-14s %9lld %9lld %5.1f%% %11.1f %11.1f %13.1f %11.1f %6.1fx\n", "total",
              static_cast<long long>(r.total_weights()), static_cast<long long>(r.nonzero_weights()),
              100.0 * static_cast<double>(r.nonzero_weights()) /
                  static_cast<double>(std::max<int64_t>(r.total_weights(), 1)),
              kb(r.fp32_bytes()), kb(r.pruned_bytes()), kb(r.quantized_bytes()),
              kb(r.final_bytes()), ratio);
  for (const SizeReportRow& row : r.rows)
    if (const auto [encoding, bytes] = stored_as(model, row); encoding != "dense")
      std::printf("%s: stored %s, %.1f KB (%.1fx smaller than fp32)\n", row.layer.c_str(),
                  encoding.c_str(), kb(bytes),
                  static_cast<double>(row.fp32_bytes) / static_cast<double>(std::max<uint64_t>(bytes, 1)));
  if (!a.write.empty()) std::printf("compressed model written to %s\n", a.write.c_str());
  return 0;
}

}  // namespace

Action add_size_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "size-report",
      "Model size per layer: fp32 -> pruned -> quantized -> Huffman (Deep Compression)");
  auto a = std::make_shared<SizeReportArgs>();
  cmd->add_option("model", a->model, "Model (.sfm or .onnx)")->required();
  cmd->add_option("--bits", a->options.bits, "Quantize nonzero weights to 2..8 bits (codebook)")
      ->check(CLI::Range(2, 8));
  cmd->add_option("--scheme", a->options.scheme, "kmeans | linear")->default_str("kmeans");
  cmd->add_option("--write", a->write, "Write the compressed model (.sfm) with these encodings");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  return [a]() { return run_size_report(*a); };
}

}  // namespace sf::cli
