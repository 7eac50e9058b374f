#include "quantize_eightbit.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "model_io.h"
#include "quantize/calibration.h"
#include "quantize/learned_ranges.h"
#include "quantize/eightbit_report.h"
#include "quantize/eightbit_rewrite.h"

namespace sf::cli {

namespace {

int64_t weight_bytes(const Graph& g) {
  int64_t bytes = 0;
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.op != "Const") continue;
    const Tensor& t = n.attrs.get_tensor("value");
    bytes += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  }
  return bytes;
}

// Ops of the rewritten graph that still compute in float (besides the conversions).
std::map<std::string, int> float_ops(const Graph& g) {
  static const std::set<std::string> bookkeeping = {"Placeholder", "Const", "Identity",
                                                    "Quantize", "Dequantize", "ChooseQParams"};
  std::map<std::string, int> out;
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (bookkeeping.count(n.op) || n.outputs.empty() || n.outputs[0].dtype != DType::f32) continue;
    if (n.op.rfind("Quantized", 0) == 0 || n.op == "RequantizationRange") continue;
    ++out[n.op];
  }
  return out;
}

}  // namespace

int run_eightbit(const EightbitArgs& a) {
  if (a.out.empty()) fail("quantize needs --out FILE (the .sfm to write)");
  if (a.report && a.calib_data.empty())
    fail("--report compares layers on calibration data: give --calib-data");
  if (a.calib_count < 1) fail("--calib-count must be at least 1, got {}", a.calib_count);
  if (!(a.input_std > 0.0f)) fail("--input-std must be positive, got {}", a.input_std);
  ModelFile model = open_model(a.model);
  EightbitOptions options;
  options.per_channel = a.per_channel;
  options.outputs = model.outputs;
  for (const std::string& name : a.exclude) {
    if (model.graph.find(name) < 0) fail("--exclude: the model has no node '{}'", name);
    options.exclude.insert(name);
  }
  CalibrationOptions co;
  co.range.method = parse_range_method(a.method);
  co.threads = a.threads;
  std::unique_ptr<CalibrationSource> source;
  if (!a.calib_data.empty()) {
    const Shape& in = model.graph.node(model.graph.id_of(model.inputs.at(0))).outputs[0].shape;
    if (in.size() != 4) fail("{}: calibration needs an image input, the model's is {}", a.model, shape_str(in));
    const bool nchw = input_is_nchw(model);
    ImageInputSpec spec{.height = nchw ? in[2] : in[1],
                        .width = nchw ? in[3] : in[2],
                        .channels = nchw ? in[1] : in[3],
                        .mean = a.input_mean,
                        .std = a.input_std,
                        .nchw = nchw};
    source = open_image_source(a.calib_data, a.calib_count, spec);
    // A graph built for one batch size (ONNX Reshape to [1, N]) calibrates one image at a time.
    if (in[0] == 1) co.batch_size = 1;
    if (!a.json) std::fprintf(stderr, "calibrating on %lld images from %s (%s) ...\n",
                              static_cast<long long>(source->size()), a.calib_data.c_str(), a.method.c_str());
    options.ranges = calibrate(model.graph, model.inputs,
                               eightbit_range_tensors(model.graph, options), *source, co);
  }
  const bool learned = has_fake_quant(model.graph);
  const EightbitGraph q = rewrite_eightbit(model.graph, options);
  const char* ranges_kind = options.ranges ? (learned ? "learned and calibrated activation ranges"
                                                      : "calibrated activation ranges")
                            : learned      ? "activation ranges learned in training (--qat)"
                                           : "activation ranges at run time";
  ModelFile out;
  out.graph = q.graph;
  out.inputs = model.inputs;
  out.outputs = q.outputs;
  out.metadata = model.metadata;
  out.metadata["quantization"] = fmt::format("eightbit, {}", ranges_kind);
  if (options.ranges) {
    out.metadata["calibration"] = fmt::format("{} images from {}, {}", source->size(),
                                              a.calib_data, a.method);
  }
  save_model(a.out, out);

  EightbitReport report;
  if (a.report) report = compare_layers(model.graph, q, model.inputs, *source, co);
  const auto still_float = float_ops(q.graph);
  const int64_t before = weight_bytes(model.graph), after = weight_bytes(q.graph);
  if (a.json) {
    nlohmann::json layers = nlohmann::json::array();
    for (const EightbitLayer& l : q.layers)
      layers.push_back({{"name", l.name}, {"op", l.op}, {"quantized_op", l.quantized_op}});
    nlohmann::json errors = nlohmann::json::array();
    for (const LayerError& e : report.layers)
      errors.push_back({{"name", e.name}, {"op", e.op}, {"quantized_op", e.quantized_op},
                        {"sqnr_db", e.sqnr_db}, {"max_abs_error", e.max_abs_error},
                        {"max_abs_value", e.max_abs_value}});
    nlohmann::json j = {{"out", a.out},
                        {"mode", "eightbit"},
                        {"calibrated", options.ranges.has_value()},
                        {"learned_ranges", learned},
                        {"method", a.method},
                        {"per_channel", a.per_channel},
                        {"layers", layers},
                        {"float_ops", still_float},
                        {"fp32_weight_bytes", before},
                        {"weight_bytes", after}};
    if (a.report) j["report"] = errors;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%zu layers rewritten to 8-bit integer ops (%s weights, %s)\n", q.layers.size(),
              a.per_channel ? "per-channel" : "per-tensor",
              ranges_kind);
  std::string rest;
  for (const auto& [op, n] : still_float) rest += fmt::format(" {} x{}", op, n);
  std::printf("still float:%s\n", rest.empty() ? " nothing" : rest.c_str());
  std::printf("weights %.1f KB -> %.1f KB; written to %s\n", static_cast<double>(before) / 1024,
              static_cast<double>(after) / 1024, a.out.c_str());
  if (a.report) {
    std::printf("\nper-layer error on %lld calibration images (worst first)\n",
                static_cast<long long>(source->size()));
    std::printf("%-40s %-28s %9s %13s %13s\n", "layer", "quantized op", "SQNR dB", "max |error|",
                "max |value|");
    for (const LayerError& e : report.layers)
      std::printf("%-40s %-28s %9.2f %13.5f %13.5f\n", e.name.c_str(), e.quantized_op.c_str(),
                  e.sqnr_db, e.max_abs_error, e.max_abs_value);
  }
  return 0;
}

}  // namespace sf::cli
