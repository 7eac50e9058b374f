#include "quantize/eightbit_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "codec/sparse_codec.h"
#include "core/error.h"
#include "io/image.h"
#include "ops/op_names.h"
#include "quantize/learned_ranges.h"
#include "runtime/model_to_run.h"
#include "runtime/precision.h"
#include "transforms/image_input.h"

namespace sf {

namespace {

int64_t const_bytes(const Graph& g) {
  int64_t bytes = 0;
  for (const Node& n : g.nodes()) {
    if (n.op != op_names::kConst) continue;
    const Tensor& t = n.attrs.get_tensor("value");
    bytes += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  }
  return bytes;
}

// Ops of the rewritten graph that still compute in float (besides the conversions).
std::map<std::string, int> float_ops(const Graph& g) {
  static const std::set<std::string> bookkeeping = {
      op_names::kPlaceholder, op_names::kConst,      op_names::kIdentity,
      op_names::kQuantize,    op_names::kDequantize, op_names::kChooseQParams};
  std::map<std::string, int> out;
  for (const Node& n : g.nodes()) {
    if (bookkeeping.count(n.op) || n.outputs.empty() || n.outputs[0].dtype != DType::f32) continue;
    if (n.op.rfind("Quantized", 0) == 0 || n.op == op_names::kRequantizationRange) continue;
    ++out[n.op];
  }
  return out;
}

// NHWC examples permuted to NCHW, for a graph that cannot skip its input move.
class NchwExamples : public CalibrationSource {
 public:
  explicit NchwExamples(CalibrationSource& nhwc) : nhwc_(nhwc) {}
  int64_t size() const override { return nhwc_.size(); }
  std::vector<Tensor> batch(int64_t begin, int64_t end) override {
    std::vector<Tensor> examples = nhwc_.batch(begin, end);
    examples[0] = nhwc_to_nchw(examples[0]);
    return examples;
  }

 private:
  CalibrationSource& nhwc_;
};

// The first examples of a source that fill whole batches of `batch`.
class WholeBatches : public CalibrationSource {
 public:
  WholeBatches(std::unique_ptr<CalibrationSource> all, int64_t batch)
      : all_(std::move(all)), size_(all_->size() / batch * batch) {}
  int64_t size() const override { return size_; }
  std::vector<Tensor> batch(int64_t begin, int64_t end) override { return all_->batch(begin, end); }

 private:
  std::unique_ptr<CalibrationSource> all_;
  int64_t size_;
};

// The model's graph prepared to take the calibration images (transforms/image_input.h).
struct FedGraph {
  Graph graph;
  std::vector<std::string> inputs;  // the model's, the first replaced by where images go
  std::string declared;             // the model's first input
  bool nchw = false;                // the images must be permuted to NCHW
};

FedGraph take_images(const ModelFile& model) {
  FedGraph fed{model.graph, model.inputs, model.inputs.at(0)};
  const ImageFeed feed =
      feed_nhwc_images(fed.graph, fed.declared, input_is_nchw(model), model.outputs);
  fed.inputs[0] = feed.placeholder;
  fed.nchw = feed.nchw;
  return fed;
}

bool skips_input_move(const FedGraph& fed) { return fed.inputs[0] != fed.declared; }

// The ranges of `wanted` (node names of the model's graph). When the images skip the input
// move, the declared input is not fed: its values are the fed ones reordered, so its range is
// theirs.
TensorRanges calibrate_fed(const FedGraph& fed, const std::vector<std::string>& wanted,
                           CalibrationSource& source, const CalibrationOptions& options) {
  std::vector<std::string> measured = wanted;
  std::replace(measured.begin(), measured.end(), fed.declared, fed.inputs[0]);
  TensorRanges ranges = calibrate(fed.graph, fed.inputs, measured, source, options);
  if (skips_input_move(fed)) {
    auto wants = [&](const std::string& name) {
      return std::find(wanted.begin(), wanted.end(), name) != wanted.end();
    };
    if (wants(fed.declared)) ranges[fed.declared] = ranges.at(fed.inputs[0]);
    if (!wants(fed.inputs[0])) ranges.erase(fed.inputs[0]);
  }
  return ranges;
}

// compare_layers with the images fed as calibration fed them: past the quantized graph's input
// move as well when it kept that move (node ids do not change, so q.layers still hold), and
// otherwise permuted to NCHW for both graphs as declared.
EightbitReport compare_fed(const FedGraph& fed, const ModelFile& model, const EightbitGraph& q,
                           CalibrationSource& source, const CalibrationOptions& options) {
  if (!skips_input_move(fed)) return compare_layers(fed.graph, q, fed.inputs, source, options);
  EightbitGraph fed_q = q;
  if (feed_nhwc_images(fed_q.graph, fed.declared, true, q.outputs).placeholder == fed.inputs[0])
    return compare_layers(fed.graph, fed_q, fed.inputs, source, options);
  NchwExamples nchw(source);
  return compare_layers(model.graph, q, model.inputs, nchw, options);
}

}  // namespace

namespace {

// A pruned model's int8 weights (and any float weights left) are stored sparse where that is
// smaller, as freeze stores pruned f32 weights; the sparse int8 kernels run from the nonzeros.
void store_pruned_weights_sparse(ModelFile& model) {
  constexpr int64_t kMinSparseElements = 256;  // smaller weights are not worth a sparse header
  for (const Node& n : model.graph.nodes()) {
    if (n.op != op_names::kConst || model.encoded_weights.count(n.name)) continue;
    const Tensor& value = n.attrs.get_tensor("value");
    if (value.numel() < kMinSparseElements) continue;
    if (auto sparse = sparse_if_smaller(value)) model.encoded_weights[n.name] = std::move(*sparse);
  }
}

}  // namespace

std::string float_nodes_summary(const std::vector<FloatNode>& nodes) {
  std::map<std::pair<std::string, std::string>, int> counts;
  for (const FloatNode& n : nodes) ++counts[{n.op, n.reason}];
  std::vector<std::pair<std::pair<std::string, std::string>, int>> sorted(counts.begin(),
                                                                          counts.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [key, n] : sorted)
    out += fmt::format("{}{} x{} ({})", out.empty() ? "" : ", ", key.first, n, key.second);
  return out.empty() ? "nothing" : out;
}

EightbitModel quantize_model_eightbit(const ModelFile& float_model, const std::string& name,
                                      const EightbitModelOptions& options) {
  if (options.report && options.calib_data.empty())
    fail("eightbit: the per-layer report needs calibration data (calib_data)");
  const Graph& graph = float_model.graph;
  EightbitOptions rewrite;
  rewrite.per_channel = options.per_channel;
  rewrite.outputs = float_model.outputs;
  rewrite.exclude = options.exclude;
  CalibrationOptions co;
  co.range.method = options.method;
  co.threads = options.threads;
  EightbitModel result;
  std::unique_ptr<CalibrationSource> source;
  std::optional<FedGraph> fed;
  if (!options.calib_data.empty()) {
    // First, so that a bad exclude list fails before any image is read.
    const std::vector<std::string> wanted = eightbit_range_tensors(graph, rewrite);
    const Shape& in = graph.node(graph.id_of(float_model.inputs.at(0))).outputs[0].shape;
    if (names_npy_examples(options.calib_data)) {
      fed = FedGraph{graph, float_model.inputs, float_model.inputs.at(0)};
      source = open_npy_source(options.calib_data, options.calib_count, graph, float_model.inputs);
    } else {
      const Shape hwc = image_input_hwc(float_model);
      if (hwc.empty())
        fail("{}: calibration on images needs an image input, the model's is {} (give example "
             "inputs as .npy instead: --calib-data FILE.npy)",
             name, shape_str(in));
      fed = take_images(float_model);
      ImageInputSpec spec{.height = hwc[0],
                          .width = hwc[1],
                          .channels = hwc[2],
                          .mean = options.input_mean,
                          .std = options.input_std,
                          .nchw = fed->nchw};
      source = open_image_source(options.calib_data, options.calib_count, spec);
    }
    // A graph built for one batch size (an ONNX Reshape to [1, N], a model specialized by
    // --input-shape) calibrates in batches of its own size, so only whole ones.
    if (in[0] >= 1) {
      co.batch_size = in[0];
      if (source->size() < in[0])
        fail("{}: the model takes batches of {} (its input is {}); the calibration data has {} "
             "example(s)",
             name, in[0], shape_str(in), source->size());
      source = std::make_unique<WholeBatches>(std::move(source), in[0]);
    }
    if (options.on_calibrating) options.on_calibrating(source->size());
    rewrite.ranges = calibrate_fed(*fed, wanted, *source, co);
    result.calibrated = true;
    result.calibration_images = source->size();
  }
  result.learned_ranges = has_fake_quant(graph);
  const EightbitGraph q = rewrite_eightbit(graph, rewrite);
  result.ranges = result.calibrated
                      ? (result.learned_ranges ? "learned and calibrated activation ranges"
                                               : "calibrated activation ranges")
                  : result.learned_ranges ? "activation ranges learned in training (--qat)"
                                          : "activation ranges at run time";
  ModelFile& out = result.model;
  out.graph = q.graph;
  out.inputs = float_model.inputs;
  out.outputs = q.outputs;
  out.metadata = float_model.metadata;
  // A bf16 model made integer runs as its new graph says (what stays float, in fp32).
  out.metadata.erase(kPrecisionMetadataKey);
  out.metadata.erase(kFp32LayersMetadataKey);
  out.metadata["quantization"] = fmt::format("eightbit, {}", result.ranges);
  // Binarized layers stay float (their binary kernels beat int8) and stay stored in 1-2 bits.
  for (const auto& [name, stored] : float_model.stored_weights) {
    const quant::Encoding kind = stored.encoding.kind;
    const int id = out.graph.find(name);
    if ((kind == quant::Encoding::binary || kind == quant::Encoding::ternary) && id >= 0 &&
        out.graph.node(id).op == op_names::kConst)
      out.encoded_weights[name] = quant::encode(out.graph.node(id).attrs.get_tensor("value"), kind, 0);
  }
  if (result.calibrated)
    out.metadata["calibration"] =
        fmt::format("{} {} from {}, {}", result.calibration_images,
                    names_npy_examples(options.calib_data) ? "examples" : "images",
                    options.calib_data, range_method_name(options.method));
  result.layers = q.layers;
  result.float_ops = float_ops(q.graph);
  result.float_nodes = q.float_nodes;
  result.fp32_weight_bytes = const_bytes(graph);
  result.weight_bytes = const_bytes(q.graph);
  store_pruned_weights_sparse(out);
  if (options.report) result.report = compare_fed(*fed, float_model, q, *source, co);
  return result;
}

}  // namespace sf
