// `slimflow quantize`: smaller models.
//   --mode weights   stores the big conv/matmul weights encoded (linear or k-means indices of
//                    2..8 bits, or half precision) and decodes them at load: float compute,
//                    smaller file (quantize/weight_quantizer.h).
//   --mode eightbit  8-bit integer compute (quantize/eightbit_model.h).
//   --mode bf16      weights stored bf16 (half the file) and the model marked to compute in bf16
//                    with its fp32 interface (runtime/precision.h), --exclude layers in fp32.
// Every argument is checked here so that a mistake is one line, not CLI11's usage text.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "commands.h"
#include "model_io.h"
#include "modelfile/model_file.h"
#include "quantize/eightbit_model.h"
#include "quantize/weight_quantizer.h"
#include "runtime/precision.h"

namespace sf::cli {

namespace {

// The command line as given; empty strings are options not given.
struct QuantizeArgs {
  std::string model;
  std::vector<std::string> input_shapes;
  std::string mode;
  std::string bits;
  std::string scheme;
  bool per_channel = false;
  bool float16 = false;
  std::vector<std::string> exclude;
  std::string out;
  bool json = false;
  // --mode eightbit
  std::string calib_data;
  int64_t calib_count = 1000;
  std::string method = "minmax";
  bool report = false;
  float input_mean = 0.0f;
  float input_std = 255.0f;
  int threads = 0;
};

void print_eightbit(const QuantizeArgs& args, const EightbitModel& q, uintmax_t file_bytes) {
  size_t sparse_tensors = 0;
  for (const auto& [name, encoded] : q.model.encoded_weights)
    sparse_tensors += encoded.encoding.kind == quant::Encoding::sparse;
  if (args.json) {
    nlohmann::json layers = nlohmann::json::array();
    for (const EightbitLayer& l : q.layers)
      layers.push_back({{"name", l.name}, {"op", l.op}, {"quantized_op", l.quantized_op}});
    nlohmann::json float_nodes = nlohmann::json::array();
    for (const FloatNode& n : q.float_nodes)
      float_nodes.push_back({{"name", n.name}, {"op", n.op}, {"reason", n.reason}});
    nlohmann::json errors = nlohmann::json::array();
    for (const LayerError& e : q.report.layers)
      errors.push_back({{"name", e.name}, {"op", e.op}, {"quantized_op", e.quantized_op},
                        {"sqnr_db", e.sqnr_db}, {"max_abs_error", e.max_abs_error},
                        {"max_abs_value", e.max_abs_value}});
    nlohmann::json j = {{"out", args.out},
                        {"mode", "eightbit"},
                        {"calibrated", q.calibrated},
                        {"learned_ranges", q.learned_ranges},
                        {"method", args.method},
                        {"per_channel", args.per_channel},
                        {"layers", layers},
                        {"float_ops", q.float_ops},
                        {"float_nodes", float_nodes},
                        {"fp32_weight_bytes", q.fp32_weight_bytes},
                        {"weight_bytes", q.weight_bytes},
                        {"sparse_weights", sparse_tensors},
                        {"file_bytes", file_bytes}};
    if (args.report) j["report"] = errors;
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%zu layers rewritten to 8-bit integer ops (%s weights, %s)\n", q.layers.size(),
              args.per_channel ? "per-channel" : "per-tensor", q.ranges.c_str());
  std::printf("still float: %s\n", float_nodes_summary(q.float_nodes).c_str());
  const std::string sparse =
      sparse_tensors == 0 ? std::string()
                          : fmt::format(", {} pruned tensors stored sparse", sparse_tensors);
  std::printf("weights %.1f KB -> %.1f KB; written to %s (%.1f KB%s)\n",
              static_cast<double>(q.fp32_weight_bytes) / 1024,
              static_cast<double>(q.weight_bytes) / 1024, args.out.c_str(),
              static_cast<double>(file_bytes) / 1024, sparse.c_str());
  if (args.report) {
    std::printf("\nper-layer error on %lld calibration %s (worst first)\n",
                static_cast<long long>(q.calibration_images),
                names_npy_examples(args.calib_data) ? "examples" : "images");
    std::printf("%-40s %-28s %9s %13s %13s\n", "layer", "quantized op", "SQNR dB", "max |error|",
                "max |value|");
    for (const LayerError& e : q.report.layers)
      std::printf("%-40s %-28s %9.2f %13.5f %13.5f\n", e.name.c_str(), e.quantized_op.c_str(),
                  e.sqnr_db, e.max_abs_error, e.max_abs_value);
  }
}

// --mode eightbit: the integer graph, calibrated or with run-time ranges
// (quantize/eightbit_model.h).
int run_eightbit_quantization(const QuantizeArgs& args) {
  if (args.float16 || !args.scheme.empty() || !args.bits.empty())
    fail("--bits, --scheme and --float16 are for --mode weights; eightbit is 8-bit throughout");
  if (args.out.empty()) fail("quantize needs --out FILE (the .sfm to write)");
  if (args.report && args.calib_data.empty())
    fail("--report compares layers on calibration data: give --calib-data");
  if (args.calib_count < 1) fail("--calib-count must be at least 1, got {}", args.calib_count);
  if (!(args.input_std > 0.0f)) fail("--input-std must be positive, got {}", args.input_std);
  const ModelFile model = open_model(args.model, parse_input_shapes(args.input_shapes));
  EightbitModelOptions options{.per_channel = args.per_channel,
                               .exclude = {args.exclude.begin(), args.exclude.end()},
                               .calib_data = args.calib_data,
                               .calib_count = args.calib_count,
                               .method = parse_range_method(args.method),
                               .input_mean = args.input_mean,
                               .input_std = args.input_std,
                               .report = args.report,
                               .threads = args.threads};
  if (!args.json)
    options.on_calibrating = [&](int64_t images) {
      std::fprintf(stderr, "calibrating on %lld %s from %s (%s) ...\n",
                   static_cast<long long>(images),
                   names_npy_examples(args.calib_data) ? "examples" : "images",
                   args.calib_data.c_str(), args.method.c_str());
    };
  const EightbitModel q = quantize_model_eightbit(model, args.model, options);
  print_eightbit(args, q, save_model(args.out, q.model));
  return 0;
}

int parse_bits(const std::string& text) {
  if (text.empty()) return 8;
  int bits = 0;
  size_t used = 0;
  try {
    bits = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) fail("--bits '{}' is not a whole number", text);
  if (bits < quant::kMinBits || bits > quant::kMaxBits)
    fail("--bits {} is outside {}..{}", bits, quant::kMinBits, quant::kMaxBits);
  return bits;
}

std::set<std::string> excluded_nodes(const QuantizeArgs& args) {
  std::set<std::string> names;
  for (const std::string& name : args.exclude) {
    if (name.empty()) fail("--exclude has an empty node name");
    names.insert(name);
  }
  return names;
}

quant::WeightQuantizeOptions weight_options(const QuantizeArgs& args) {
  if (args.out.empty()) fail("quantize needs --out FILE (the .sfm to write)");
  quant::WeightQuantizeOptions o;
  if (args.float16) {
    if (!args.bits.empty() || !args.scheme.empty() || args.per_channel)
      fail(
          "--float16 stores half-precision weights; it takes no --bits, --scheme or "
          "--per-channel");
    o.encoding = quant::Encoding::f16;
  } else {
    const std::string scheme = args.scheme.empty() ? "linear" : args.scheme;
    if (scheme == "linear")
      o.encoding = quant::Encoding::linear;
    else if (scheme == "kmeans")
      o.encoding = quant::Encoding::kmeans;
    else
      fail("--scheme '{}' is not linear or kmeans", args.scheme);
    o.bits = parse_bits(args.bits);
    if (args.per_channel && o.encoding != quant::Encoding::linear)
      fail("--per-channel needs --scheme linear (k-means keeps one codebook per tensor)");
    o.per_channel = args.per_channel;
  }
  o.exclude = excluded_nodes(args);
  return o;
}

bool sixteen_bit(quant::Encoding encoding) {
  return encoding == quant::Encoding::f16 || encoding == quant::Encoding::bf16;
}

std::string scheme_text(const quant::WeightQuantizeOptions& o) {
  if (sixteen_bit(o.encoding)) return quant::encoding_name(o.encoding);
  return fmt::format("{} {}-bit{}", quant::encoding_name(o.encoding), o.bits,
                     o.per_channel ? " per-channel" : "");
}

nlohmann::json report_json(const QuantizeArgs& args, const quant::WeightQuantizeOptions& o,
                           const quant::WeightQuantizeReport& report, uint64_t file_bytes) {
  nlohmann::json rows = nlohmann::json::array();
  for (const quant::WeightRow& r : report.rows) {
    nlohmann::json row = {{"node", r.node},
                          {"layer", r.layer},
                          {"op", r.layer_op},
                          {"shape", r.shape},
                          {"encoding", r.encoding},
                          {"description", r.description},
                          {"bits", r.bits},
                          {"per_channel", r.per_channel},
                          {"codebook_size", r.codebook_size},
                          {"fp32_bytes", r.fp32_bytes},
                          {"quantized_bytes", r.stored_bytes},
                          {"max_abs_error", r.max_abs_error},
                          {"rms_error", r.rms_error}};
    if (!r.kept_reason.empty()) row["kept_dense"] = r.kept_reason;
    rows.push_back(std::move(row));
  }
  return {{"model", args.model},
          {"out", args.out},
          {"mode", args.mode},
          {"scheme", quant::encoding_name(o.encoding)},
          {"bits", sixteen_bit(o.encoding) ? quant::kHalfBits : o.bits},
          {"per_channel", o.per_channel},
          {"tensors", std::move(rows)},
          {"fp32_bytes", report.fp32_bytes},
          {"quantized_bytes", report.quantized_bytes},
          {"compression_ratio", report.compression_ratio()},
          {"file_bytes", file_bytes}};
}

void print_table(const QuantizeArgs& args, const quant::WeightQuantizeOptions& o,
                 const quant::WeightQuantizeReport& report, uint64_t file_bytes) {
  std::printf("%s -> %s: weights %s\n\n", args.model.c_str(), args.out.c_str(),
              scheme_text(o).c_str());
  std::printf("%-28s %-20s %-34s %12s %12s %10s\n", "weights", "shape", "stored as", "fp32 bytes",
              "bytes", "max error");
  for (const quant::WeightRow& r : report.rows) {
    const std::string how = r.encoded ? r.description : fmt::format("dense ({})", r.kept_reason);
    const std::string error = r.encoded ? fmt::format("{:.3g}", r.max_abs_error) : "";
    std::printf("%-28s %-20s %-34s %12llu %12llu %10s\n", r.node.c_str(),
                shape_str(r.shape).c_str(), how.c_str(),
                static_cast<unsigned long long>(r.fp32_bytes),
                static_cast<unsigned long long>(r.stored_bytes), error.c_str());
  }
  std::printf("\nall weights: %.3f MB fp32 -> %.3f MB (%.2fx smaller), %llu bytes on disk\n",
              static_cast<double>(report.fp32_bytes) / 1e6,
              static_cast<double>(report.quantized_bytes) / 1e6, report.compression_ratio(),
              static_cast<unsigned long long>(file_bytes));
}

// --mode weights, and --mode bf16 (`bf16` set), which also marks the model to compute in bf16,
// the excluded layers in fp32.
int run_weight_quantization(const QuantizeArgs& args, bool bf16) {
  const quant::WeightQuantizeOptions options =
      // Every weight, however small: the products read them as bf16 anyway.
      bf16 ? quant::WeightQuantizeOptions{.encoding = quant::Encoding::bf16,
                                          .exclude = excluded_nodes(args),
                                          .min_elements = 1}
           : weight_options(args);
  ModelFile model = open_model(args.model, parse_input_shapes(args.input_shapes));
  quant::WeightQuantizeReport report;
  try {
    report = quant::quantize_model_weights(model, options);
  } catch (const Error& e) {
    fail("{}: {}", args.model, e.what());
  }
  model.metadata["weight_quantization"] = scheme_text(options);
  // A bf16 model quantized again runs as its new weights say.
  model.metadata.erase(kPrecisionMetadataKey);
  model.metadata.erase(kFp32LayersMetadataKey);
  if (bf16) {
    model.metadata[kPrecisionMetadataKey] = "bf16";
    if (!report.excluded_layers.empty())
      model.metadata[kFp32LayersMetadataKey] = nlohmann::json(report.excluded_layers).dump();
  }
  const uint64_t file_bytes = save_model(args.out, model);
  if (args.json)
    std::printf("%s\n", report_json(args, options, report, file_bytes).dump().c_str());
  else
    print_table(args, options, report, file_bytes);
  return 0;
}

}  // namespace

Action add_quantize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "quantize",
      "Make a model smaller and faster: --mode weights (2..8-bit or half-precision weights, "
      "float compute), --mode eightbit (the integer graph, optionally calibrated) or --mode bf16 "
      "(bf16 weights and compute, fp32 interface)");
  auto args = std::make_shared<QuantizeArgs>();
  cmd->add_option("model", args->model, "Model (.sfm or .onnx)");
  cmd->add_option("--mode", args->mode,
                  "weights (weights-only, float compute), eightbit or bf16 (bf16 weights and "
                  "compute)");
  cmd->add_option("--bits", args->bits, "Bits per weight, 2..8 (default 8)");
  cmd->add_option("--scheme", args->scheme, "linear (default) or kmeans");
  cmd->add_flag("--per-channel", args->per_channel, "One scale per output channel (linear only)");
  cmd->add_flag("--float16", args->float16, "Store weights as IEEE half precision instead");
  cmd->add_option("--exclude", args->exclude,
                  "Nodes whose weights stay fp32 (bf16: and compute in fp32): NODE,...")
      ->delimiter(',');
  cmd->add_option("--out", args->out, "Model file to write (.sfm)");
  cmd->add_flag("--json", args->json, "Print one JSON object");
  cmd->add_option("--calib-data", args->calib_data,
                  "eightbit: calibrate activation ranges on mnist, fashion-mnist, IDX files, "
                  "a folder of images, or example inputs as .npy (FILE.npy, or "
                  "INPUT=FILE.npy,... for several inputs; examples along dimension 0, fed as "
                  "they are) (without it: ranges at run time)");
  cmd->add_option("--calib-count", args->calib_count,
                  "eightbit: calibration images or examples (1000)");
  cmd->add_option("--method", args->method, "eightbit: minmax | percentile | entropy")
      ->default_str("minmax");
  cmd->add_flag("--report", args->report,
                "eightbit: per-layer error (SQNR, max |error|) on the calibration data");
  cmd->add_option("--input-mean", args->input_mean,
                  "eightbit: calibration images are fed as (pixel - mean) / std (0)");
  cmd->add_option("--input-std", args->input_std, "eightbit: see --input-mean (255)");
  cmd->add_option("--threads", args->threads, "Threads (0: all cores)");
  cmd->add_option("--input-shape", args->input_shapes,
                  "Specialize a symbolic ONNX input (and calibrate at it), NAME=D1,D2,... "
                  "(repeatable)");
  return [args]() {
    if (args->model.empty()) fail("quantize needs a MODEL (.sfm or .onnx)");
    if (args->mode == "eightbit") return run_eightbit_quantization(*args);
    if (args->mode.empty()) fail("quantize needs --mode weights, eightbit or bf16");
    if (args->mode == "bf16") {
      if (args->float16 || !args->scheme.empty() || !args->bits.empty() || args->per_channel)
        fail("--bits, --scheme, --per-channel and --float16 are for --mode weights; bf16 stores "
             "every weight as a 16-bit bfloat16");
      if (!args->calib_data.empty() || args->report)
        fail("--calib-data and --report are for --mode eightbit; bf16 needs no calibration");
      if (args->out.empty()) fail("quantize needs --out FILE (the .sfm to write)");
      return run_weight_quantization(*args, true);
    }
    if (args->mode != "weights")
      fail("--mode '{}' is not weights, eightbit or bf16", args->mode);
    return run_weight_quantization(*args, false);
  };
}

}  // namespace sf::cli
