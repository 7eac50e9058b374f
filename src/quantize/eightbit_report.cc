#include "quantize/eightbit_report.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "ops/op_names.h"
#include "ops/quantized_ops.h"
#include "runtime/session.h"

namespace sf {

namespace {

struct ErrorSums {
  double signal = 0.0;
  double noise = 0.0;
  double max_error = 0.0;
  double max_value = 0.0;
  int64_t elements = 0;
};

std::vector<Output> placeholders(const Graph& graph, const std::vector<std::string>& names,
                                 const char* which) {
  std::vector<Output> out;
  for (const std::string& name : names) {
    const int id = graph.find(name);
    if (id < 0 || graph.node(id).op != op_names::kPlaceholder)
      fail("eightbit report: the {} graph has no input (Placeholder) named '{}'", which, name);
    out.push_back({id, 0});
  }
  return out;
}

}  // namespace

EightbitReport compare_layers(const Graph& float_graph, const EightbitGraph& quantized,
                              const std::vector<std::string>& inputs, CalibrationSource& source,
                              const CalibrationOptions& options) {
  if (options.batch_size <= 0)
    fail("eightbit report: batch size {} must be positive", options.batch_size);
  EightbitReport report;
  if (quantized.layers.empty() || source.size() <= 0) return report;

  // The quantized graph plus a Dequantize of every layer's result, to fetch.
  Graph probed = quantized.graph;
  std::vector<Output> quantized_fetches, float_fetches;
  for (const EightbitLayer& layer : quantized.layers) {
    std::string name = layer.name + "/report_dequantize";
    for (int k = 1; probed.find(name) >= 0; ++k)
      name = layer.name + "/report_dequantize_" + std::to_string(k);
    quantized_fetches.push_back(ops::dequantize(probed, layer.data, layer.params, name));
    const int id = float_graph.find(layer.tensor);
    if (id < 0) fail("eightbit report: the float graph has no node named '{}'", layer.tensor);
    float_fetches.push_back({id, 0});
  }
  const std::vector<Output> float_feeds = placeholders(float_graph, inputs, "float");
  const std::vector<Output> quantized_feeds = placeholders(probed, inputs, "quantized");

  SessionOptions session_options{.threads = options.threads};
  Session float_session(float_graph, session_options);
  Session quantized_session(probed, session_options);
  std::vector<ErrorSums> sums(quantized.layers.size());
  for (int64_t begin = 0; begin < source.size(); begin += options.batch_size) {
    const int64_t end = std::min(source.size(), begin + options.batch_size);
    std::vector<Tensor> batch = source.batch(begin, end);
    if (batch.size() != inputs.size())
      fail("eightbit report: the examples have {} tensors, the graph {} inputs", batch.size(),
           inputs.size());
    Feeds float_fed, quantized_fed;
    for (size_t i = 0; i < inputs.size(); ++i) {
      float_fed.push_back({float_feeds[i], batch[i]});
      quantized_fed.push_back({quantized_feeds[i], batch[i]});
    }
    std::vector<Tensor> want = float_session.run(float_fed, float_fetches);
    std::vector<Tensor> got = quantized_session.run(quantized_fed, quantized_fetches);
    for (size_t l = 0; l < sums.size(); ++l) {
      SF_CHECK(want[l].numel() == got[l].numel(), "layer '{}': {} vs {} elements",
               quantized.layers[l].name, want[l].numel(), got[l].numel());
      const float* x = want[l].data<float>();
      const float* y = got[l].data<float>();
      ErrorSums& s = sums[l];
      for (int64_t i = 0; i < want[l].numel(); ++i) {
        const double e = static_cast<double>(x[i]) - static_cast<double>(y[i]);
        s.signal += static_cast<double>(x[i]) * x[i];
        s.noise += e * e;
        s.max_error = std::max(s.max_error, std::fabs(e));
        s.max_value = std::max(s.max_value, std::fabs(static_cast<double>(x[i])));
      }
      s.elements += want[l].numel();
    }
  }
  for (size_t l = 0; l < sums.size(); ++l) {
    const EightbitLayer& layer = quantized.layers[l];
    const ErrorSums& s = sums[l];
    LayerError e{layer.name, layer.op, layer.tensor, layer.quantized_op};
    e.sqnr_db = s.noise == 0.0 ? std::numeric_limits<double>::infinity()
                               : 10.0 * std::log10(s.signal / s.noise);
    e.max_abs_error = s.max_error;
    e.max_abs_value = s.max_value;
    e.elements = s.elements;
    report.layers.push_back(e);
  }
  std::stable_sort(report.layers.begin(), report.layers.end(),
                   [](const LayerError& a, const LayerError& b) { return a.sqnr_db < b.sqnr_db; });
  return report;
}

}  // namespace sf
