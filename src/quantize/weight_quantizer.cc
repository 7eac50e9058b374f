#include "quantize/weight_quantizer.h"

#include <cmath>
#include <set>

#include "graph/op_registry.h"
#include "ops/op_names.h"

namespace sf::quant {
namespace {

struct Candidate {
  int const_id;
  int layer_id;
  int axis;
};

// f32 Const nodes read as a layer's weights (the op's declared weight inputs), each once, with
// its first reader. Integer weights are already quantized.
std::vector<Candidate> find_candidates(const Graph& g) {
  std::vector<Candidate> out;
  std::set<int> seen;
  for (const WeightUse& use : weight_uses(g)) {
    const Node& source = g.node(use.weight.node);
    if (source.op != op_names::kConst || source.attrs.get_tensor("value").dtype() != DType::f32 ||
        !seen.insert(source.id).second)
      continue;
    out.push_back({source.id, use.layer, use.channel_axis});
  }
  return out;
}

void check_options(const Graph& g, const WeightQuantizeOptions& o,
                   const std::vector<Candidate>& candidates) {
  const bool halves = o.encoding == Encoding::f16 || o.encoding == Encoding::bf16;
  if (!halves && (o.bits < kMinBits || o.bits > kMaxBits))
    fail("bits {} is outside [{}, {}]", o.bits, kMinBits, kMaxBits);
  if (o.per_channel && o.encoding != Encoding::linear)
    fail("per-channel scales need the linear scheme, not {}", encoding_name(o.encoding));
  for (const std::string& name : o.exclude) {
    const int id = g.find(name);
    if (id < 0) fail("cannot keep '{}' in fp32: the model has no node of that name", name);
    bool has_weights = false;
    for (const Candidate& c : candidates)
      has_weights = has_weights || c.const_id == id || c.layer_id == id;
    if (!has_weights)
      fail("cannot keep '{}' in fp32: node '{}' ({}) has no conv or matmul weights", name, name,
           g.node(id).op);
  }
}

bool is_excluded(const Graph& g, const Candidate& c, const std::set<std::string>& exclude) {
  if (exclude.count(g.node(c.const_id).name)) return true;
  // Any layer reading the Const as its weight counts, not only the first.
  for (const WeightUse& use : weight_uses(g))
    if (use.weight.node == c.const_id && exclude.count(g.node(use.layer).name)) return true;
  return false;
}

// Every layer that reads an excluded weight, or is named in `exclude` itself.
std::set<std::string> layers_reading_excluded(const Graph& g, const std::set<std::string>& exclude) {
  std::set<std::string> layers;
  for (const WeightUse& use : weight_uses(g))
    if (exclude.count(g.node(use.layer).name) || exclude.count(g.node(use.weight.node).name))
      layers.insert(g.node(use.layer).name);
  return layers;
}

void measure_error(const Tensor& w, const EncodedTensor& encoded, WeightRow& row) {
  const Tensor back = decode(encoded);
  const float* a = w.data<float>();
  const float* b = back.data<float>();
  double squares = 0.0;
  const int64_t n = w.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::abs(static_cast<double>(a[i]) - b[i]);
    row.max_abs_error = std::max(row.max_abs_error, e);
    squares += e * e;
  }
  row.rms_error = w.numel() > 0 ? std::sqrt(squares / static_cast<double>(w.numel())) : 0.0;
}

}  // namespace

WeightQuantizeReport quantize_model_weights(ModelFile& model,
                                            const WeightQuantizeOptions& options) {
  const Graph& g = model.graph;
  const std::vector<Candidate> candidates = find_candidates(g);
  check_options(g, options, candidates);
  WeightQuantizeReport report;
  report.excluded_layers = layers_reading_excluded(g, options.exclude);
  report.fp32_bytes = weight_bytes(model);
  report.quantized_bytes = report.fp32_bytes;
  for (const Candidate& c : candidates) {
    const Node& node = g.node(c.const_id);
    const Tensor& w = node.attrs.get_tensor("value");
    WeightRow row{.node = node.name,
                  .layer = g.node(c.layer_id).name,
                  .layer_op = g.node(c.layer_id).op,
                  .shape = w.shape(),
                  .description = "dense",
                  .fp32_bytes = w.bytes(),
                  .stored_bytes = w.bytes()};
    const auto stored = model.stored_weights.find(node.name);
    const bool binarized = stored != model.stored_weights.end() &&
                           (stored->second.encoding.kind == Encoding::binary ||
                            stored->second.encoding.kind == Encoding::ternary);
    if (is_excluded(g, c, options.exclude)) {
      row.kept_reason = "excluded";
    } else if (binarized) {
      // Already 1-2 bits (`train --binarize`): kept as stored, never widened to `bits`.
      EncodedTensor encoded = encode(w, stored->second.encoding.kind, 0);
      row.kept_reason = encoded.encoding.describe();
      row.stored_bytes = encoded.stored_bytes();
      report.quantized_bytes -= row.fp32_bytes;
      report.quantized_bytes += row.stored_bytes;
      model.encoded_weights[node.name] = std::move(encoded);
    } else if (w.numel() < options.min_elements) {
      row.kept_reason = fmt::format("fewer than {} elements", options.min_elements);
    } else {
      EncodedTensor encoded;
      try {
        encoded = encode(w, options.encoding, options.bits, options.per_channel ? c.axis : kNoAxis);
      } catch (const Error& e) {
        fail("node '{}': {}", node.name, e.what());
      }
      measure_error(w, encoded, row);
      row.encoded = true;
      row.encoding = encoding_name(encoded.encoding.kind);
      row.description = encoded.encoding.describe();
      row.bits = encoded.encoding.bits;
      row.per_channel = encoded.encoding.per_channel();
      row.codebook_size = encoded.encoding.codebook.size();
      row.stored_bytes = encoded.stored_bytes();
      report.quantized_bytes -= row.fp32_bytes;
      report.quantized_bytes += row.stored_bytes;
      model.encoded_weights[node.name] = std::move(encoded);
    }
    report.rows.push_back(std::move(row));
  }
  return report;
}

}  // namespace sf::quant
