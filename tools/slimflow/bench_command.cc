// `slimflow bench`: latency and throughput of a model, peak memory, and a per-node profile.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include "commands.h"
#include "core/limits.h"
#include "cpu/thread_wait_policy.h"
#include "graph/op_registry.h"
#include "model_io.h"
#include "runtime/process_stats.h"

namespace sf::cli {

namespace {

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

Action add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure latency, throughput and memory of a model");
  struct Args {
    std::string model;
    int64_t batch = 1;
    int threads = 0;
    int runs = 100;
    int warmup = 10;
    bool profile = false, json = false;
    std::vector<std::string> input_shapes;
    std::string precision;
  };
  auto a = std::make_shared<Args>();
  auto placement = std::make_shared<PlacementFlags>();
  cmd->add_option("--model", a->model, "Model (.sfm or .onnx)")->required();
  cmd->add_option("--batch", a->batch, "Batch size")->default_val(1);
  cmd->add_option("--threads", a->threads, "Threads (0: all cores)");
  cmd->add_option("--runs", a->runs, "Timed runs")->default_val(100);
  cmd->add_option("--warmup", a->warmup, "Untimed runs first")->default_val(10);
  cmd->add_flag("--profile", a->profile, "Add a per-node time table");
  add_precision_option(cmd, a->precision);
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->add_option("--input-shape", a->input_shapes,
                  "Shape to time for an input with symbolic dimensions, NAME=D1,D2,... "
                  "(repeatable; --batch still sets a symbolic dimension 0)");
  add_placement_flags(cmd, *placement);
  return [a, placement]() {
    if (a->batch <= 0 || a->runs <= 0) fail("--batch and --runs must be positive");
    const std::map<std::string, Shape> given = parse_input_shapes(a->input_shapes);
    ModelRunner runner(a->model, {}, SessionOptions{.threads = a->threads}, a->precision,
                       placement.get(), a->json);
    const PrecisionChoice& precision = runner.precision();
    std::vector<Tensor> values;
    nlohmann::json timed_shapes = nlohmann::json::object();
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    for (const DeclaredInput& in : runner.inputs()) {
      if (in.dtype != DType::f32)
        fail("bench: input '{}' is {}, only f32 inputs are generated", in.name, dtype_name(in.dtype));
      Shape shape = in.dims;
      auto it = given.find(in.name);
      if (it != given.end()) {
        shape = it->second;
      } else {
        if (!shape.empty()) shape[0] = a->batch;  // any batch size re-plans
        for (size_t d = 0; d < shape.size(); ++d)
          if (shape[d] < 0)
            fail("bench: input '{}' {} has symbolic dimension {}; give the shape to time with "
                 "--input-shape {}=D1,D2,...", in.name, in.dims_str(), d, in.name);
      }
      limits::checked_num_elements(shape, fmt::format("{}: input '{}'", a->model, in.name));
      Tensor value(DType::f32, shape);
      for (int64_t k = 0; k < value.numel(); ++k) value.data<float>()[k] = uniform(rng);
      timed_shapes[in.name] = shape;
      values.push_back(value);
    }
    for (const auto& [name, shape] : given)
      if (runner.input_index(name) == runner.inputs().size())
        fail("--input-shape {}: the model has no input '{}'", name, name);
    runner.check_inputs(values);
    const int64_t batch = values.empty() || values[0].rank() == 0 ? 1 : values[0].dim(0);
    const ModelToRun& run = runner.model_for(values);
    Session& session = runner.session_for(values);
    for (int i = 0; i < a->warmup; ++i) runner.run(values);
    session.set_profiling(a->profile);
    std::vector<double> ms;
    for (int i = 0; i < a->runs; ++i) {
      auto start = std::chrono::steady_clock::now();
      runner.run(values);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    const double median = percentile(ms, 0.5);
    nlohmann::json result = {{"model", a->model},
                             {"batch", batch},
                             {"input_shapes", timed_shapes},
                             {"threads", a->threads},
                             {"one_thread_plan", session.ran_on_one_thread()},
                             {"omp_wait_policy", thread_wait_policy()},
                             {"precision", precision_name(precision.precision)},
                             {"precision_reason", precision.reason},
                             {"runs", a->runs},
                             {"latency_ms_min", *std::min_element(ms.begin(), ms.end())},
                             {"latency_ms_median", median},
                             {"latency_ms_p90", percentile(ms, 0.9)},
                             {"throughput_per_sec", static_cast<double>(batch) * 1000.0 / median},
                             {"peak_rss_mb", peak_rss_mb()},
                             {"model_bytes", std::filesystem::file_size(a->model)}};
    const SpecializerStats plans = runner.plan_stats();
    result["plan_cache"] = {{"plans", plans.plans},
                            {"max_plans", plans.max_plans},
                            {"plans_made", plans.plans_made},
                            {"last_plan_ms", plans.last_plan_ms},
                            {"bytes", plans.cache_bytes}};
    std::vector<NodeProfile> profile = session.profile();
    std::sort(profile.begin(), profile.end(),
              [](const NodeProfile& x, const NodeProfile& y) { return x.seconds > y.seconds; });
    double total = 0.0;
    for (const NodeProfile& p : profile) total += p.seconds;
    if (a->profile) {
      nlohmann::json rows = nlohmann::json::array();
      for (const NodeProfile& p : profile) {
        double per_call_ms = p.calls ? 1000.0 * p.seconds / static_cast<double>(p.calls) : 0.0;
        // A fixed graph is declared at one batch size; the session re-planned for `batch`.
        const Shape& declared = run.input_ports.empty() ? Shape{} : run.input_type(0).shape;
        // A Recv (a partitioned graph's wait for another device) is no node of the model.
        const int id = session.graph().find(p.name);
        double flops = (id < 0 ? 0.0 : node_flops(session.graph(), id)) *
                       static_cast<double>(batch) /
                       std::max<double>(1.0, static_cast<double>(declared.empty() ? 1 : declared[0]));
        rows.push_back({{"node", p.name},
                        {"op", p.op},
                        {"impl", p.impl},
                        {"output_shape", p.output_shape},
                        {"ms", per_call_ms},
                        {"share", total > 0 ? p.seconds / total : 0.0},
                        {"gflops", per_call_ms > 0 ? flops / (per_call_ms * 1e6) : 0.0},
                        {"device", p.device}});
      }
      result["profile"] = rows;
      if (session.partitioned()) {
        // Per device: kernel time per run, and the part of it spent waiting in Recv nodes.
        std::map<std::string, std::pair<double, double>> devices;
        for (const NodeProfile& p : profile) {
          const double ms = p.calls ? 1000.0 * p.seconds / static_cast<double>(p.calls) : 0.0;
          devices[p.device].first += ms;
          if (p.op == "Recv") devices[p.device].second += ms;
        }
        nlohmann::json per_device = nlohmann::json::array();
        for (const auto& [device, ms] : devices)
          per_device.push_back({{"device", device}, {"ms", ms.first}, {"recv_ms", ms.second}});
        result["devices"] = per_device;
      }
    }
    if (a->json) {
      std::printf("%s\n", result.dump().c_str());
      return 0;
    }
    std::printf("%s  batch %lld  threads %d%s  %d runs  precision %s (%s)\n", a->model.c_str(),
                static_cast<long long>(batch), a->threads,
                session.ran_on_one_thread() ? " (a small plan: runs on one)" : "", a->runs,
                precision_name(precision.precision), precision.reason.c_str());
    for (const auto& [name, shape] : timed_shapes.items())
      std::printf("input %s %s\n", name.c_str(), shape_str(shape.get<Shape>()).c_str());
    std::printf("latency ms: min %.3f  median %.3f  p90 %.3f\n", result["latency_ms_min"].get<double>(),
                median, result["latency_ms_p90"].get<double>());
    std::printf("throughput %.0f/s  peak RSS %.1f MB  model %zu bytes\n",
                result["throughput_per_sec"].get<double>(), result["peak_rss_mb"].get<double>(),
                result["model_bytes"].get<size_t>());
    if (a->profile) {
      int name_width = 4, impl_width = 4;
      for (const nlohmann::json& r : result["profile"]) {
        name_width = std::max(name_width, static_cast<int>(r["node"].get<std::string>().size()));
        impl_width = std::max(impl_width, static_cast<int>(r["impl"].get<std::string>().size()));
      }
      std::printf("\n%-*s %-14s %-*s %-18s %9s %7s %8s\n", name_width, "node", "op", impl_width,
                  "impl", "output", "ms", "share", "GFLOP/s");
      for (const nlohmann::json& r : result["profile"])
        std::printf("%-*s %-14s %-*s %-18s %9.4f %6.1f%% %8.1f\n", name_width,
                    r["node"].get<std::string>().c_str(), r["op"].get<std::string>().c_str(),
                    impl_width, r["impl"].get<std::string>().c_str(),
                    shape_str(r["output_shape"].get<Shape>()).c_str(), r["ms"].get<double>(),
                    100.0 * r["share"].get<double>(), r["gflops"].get<double>());
      if (result.contains("devices")) {
        std::printf("\n%-24s %9s %9s\n", "device", "ms", "recv ms");
        for (const nlohmann::json& d : result["devices"])
          std::printf("%-24s %9.4f %9.4f\n", d["device"].get<std::string>().c_str(),
                      d["ms"].get<double>(), d["recv_ms"].get<double>());
      }
    }
    return 0;
  };
}

}  // namespace sf::cli
