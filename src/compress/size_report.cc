#include "compress/size_report.h"

#include <map>

#include "core/error.h"
#include "graph/op_registry.h"
#include "ops/op_names.h"

namespace sf {

uint64_t SizeReport::fp32_bytes() const {
  uint64_t n = other_bytes;
  for (const auto& r : rows) n += r.fp32_bytes;
  return n;
}
uint64_t SizeReport::pruned_bytes() const {
  uint64_t n = other_bytes;
  for (const auto& r : rows) n += r.pruned_bytes;
  return n;
}
uint64_t SizeReport::quantized_bytes() const {
  uint64_t n = other_bytes;
  for (const auto& r : rows) n += r.quantized_bytes;
  return n;
}
uint64_t SizeReport::final_bytes() const {
  uint64_t n = other_bytes;
  for (const auto& r : rows) n += r.final_bytes;
  return n;
}
int64_t SizeReport::total_weights() const {
  int64_t n = 0;
  for (const auto& r : rows) n += r.total_weights;
  return n;
}
int64_t SizeReport::nonzero_weights() const {
  int64_t n = 0;
  for (const auto& r : rows) n += r.nonzero_weights;
  return n;
}

SizeReport size_report(const ModelFile& model, const SizeReportOptions& options,
                       const std::string& what) {
  if (options.bits != 0 && (options.bits < 2 || options.bits > 8))
    fail("--bits {} is outside [2, 8]", options.bits);
  if (options.scheme != "kmeans" && options.scheme != "linear")
    fail("--scheme must be kmeans or linear, got '{}'", options.scheme);
  const Graph& g = model.graph;
  std::map<int, std::string> reader_of;  // Const node id -> the last layer reading it as weights
  for (const WeightUse& use : weight_uses(g))
    if (g.node(use.weight.node).op == op_names::kConst)
      reader_of[use.weight.node] = g.node(use.layer).name;
  SizeReport report;
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.op != op_names::kConst) continue;
    const Tensor& t = n.attrs.get_tensor("value");
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
    auto reader = reader_of.find(id);
    if (reader == reader_of.end() || t.dtype() != DType::f32) {
      report.other_bytes += bytes;
      continue;
    }
    SizeReportRow row{n.name, reader->second, t.numel(), 0, bytes};
    const float* v = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) row.nonzero_weights += v[i] != 0.0f;
    const auto [pruned_bytes, pruned_options] = smallest_sparse(t, SparseOptions{});
    row.pruned_bytes = std::min(bytes, pruned_bytes);
    SparseOptions q{.value_bits = options.bits, .linear = options.scheme == "linear"};
    const auto [quantized_bytes, quantized_options] =
        options.bits ? smallest_sparse(t, q) : std::pair{pruned_bytes, pruned_options};
    row.quantized_bytes = options.bits ? quantized_bytes : row.pruned_bytes;
    q.huffman = true;
    const auto [coded_bytes, coded_options] = smallest_sparse(t, q);
    // Huffman tables can outweigh what they save on a tiny tensor; dense can beat sparse.
    row.final_bytes = std::min(coded_bytes, quantized_bytes);
    row.final_options = coded_bytes <= quantized_bytes ? coded_options : quantized_options;
    if (options.bits == 0 && row.final_bytes >= bytes) {
      row.final_bytes = bytes;
      row.final_dense = true;
    }
    report.rows.push_back(row);
  }
  if (report.rows.empty()) fail("{}: the model has no conv or matmul weights to report on", what);
  return report;
}

void write_compressed_model(const ModelFile& model, const SizeReport& report,
                            const std::string& path) {
  ModelFile out = model;
  const Graph& g = model.graph;
  for (const SizeReportRow& row : report.rows) {
    if (row.final_dense) continue;
    const Tensor& t = g.node(g.id_of(row.node)).attrs.get_tensor("value");
    out.encoded_weights[row.node] =
        quant::EncodedTensor{.shape = t.shape(),
                             .encoding = {.kind = quant::Encoding::sparse, .bits = 0},
                             .data = encode_sparse(t, row.final_options)};
  }
  out.metadata["compression"] = "sparse + codebook + Huffman (slimflow size-report)";
  save_model(path, out);
}

}  // namespace sf
