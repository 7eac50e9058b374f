#include "prune/structured.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace sf {

namespace {

const std::vector<std::string> kPassThrough = {"max_pool", "avg_pool", "global_avg_pool",
                                               "dropout",  "relu",     "relu6",
                                               "sigmoid",  "tanh",     "batch_norm"};

// Copies `t` keeping only `keep` indices along `axis`.
Tensor take_along(const Tensor& t, int axis, const std::vector<int64_t>& keep) {
  Shape shape = t.shape();
  const size_t a = static_cast<size_t>(axis);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < a; ++d) outer *= shape[d];
  for (size_t d = a + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t n = shape[a];
  shape[a] = static_cast<int64_t>(keep.size());
  Tensor out(DType::f32, shape);
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (size_t k = 0; k < keep.size(); ++k)
      std::copy_n(src + (o * n + keep[k]) * inner, inner,
                  dst + (o * static_cast<int64_t>(keep.size()) + static_cast<int64_t>(k)) * inner);
  return out;
}

// Norm of each slice along the last axis.
std::vector<double> channel_norms(const Tensor& w, const std::string& norm) {
  const int64_t channels = w.shape().back();
  std::vector<double> out(static_cast<size_t>(channels), 0.0);
  const float* v = w.data<float>();
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double x = v[i];
    out[static_cast<size_t>(i % channels)] += norm == "l1" ? std::abs(x) : x * x;
  }
  return out;
}

std::vector<int64_t> strongest(const std::vector<double>& norms, double fraction) {
  const int64_t n = static_cast<int64_t>(norms.size());
  const int64_t keep = std::clamp<int64_t>(std::llround((1.0 - fraction) * static_cast<double>(n)), 1, n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return norms[static_cast<size_t>(a)] > norms[static_cast<size_t>(b)];
  });
  order.resize(static_cast<size_t>(keep));
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<int64_t> all_of(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

StructuredPruning prune_structured(const ModelSpec& spec,
                                   const std::map<std::string, Tensor>& variables,
                                   double fraction, const std::string& norm) {
  if (!(fraction >= 0.0 && fraction < 1.0))
    fail("--target {} is outside [0, 1) (the fraction of filters to remove)", fraction);
  if (norm != "l1" && norm != "l2") fail("--norm must be l1 or l2, got '{}'", norm);
  YAML::Node root = YAML::Load(spec.text);
  YAML::Node layers = root["layers"];
  auto var = [&](const std::string& name) -> const Tensor& {
    auto it = variables.find(name);
    if (it == variables.end()) fail("{}: no variable '{}'", spec.origin, name);
    return it->second;
  };
  // The last conv/dense layer produces the logits: its outputs stay.
  size_t last_weighted = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string type = layers[i]["type"].as<std::string>();
    if (layers[i]["inputs"])
      fail("{}: structured pruning supports sequential models; layer '{}' names its inputs",
           spec.origin, layers[i]["name"].as<std::string>());
    if (type == "conv2d" || type == "dense") last_weighted = i;
  }

  const Model original = build_model(spec, 1);
  StructuredPruning result;
  std::map<std::string, Tensor>& out = result.variables;
  // Which of the original channels (or features, after flatten) the current tensor keeps, and
  // how many it had; the spatial size of images, for flatten.
  int64_t channels = spec.input.back();
  std::vector<int64_t> current = all_of(channels);
  for (size_t i = 0; i < layers.size(); ++i) {
    YAML::Node layer = layers[i];
    const std::string name = layer["name"].as<std::string>();
    const std::string type = layer["type"].as<std::string>();
    if (type == "conv2d" || type == "dense") {
      if (type == "conv2d" && layer["groups"] && layer["groups"].as<int64_t>() != 1)
        fail("{}: structured pruning does not handle grouped conv '{}'", spec.origin, name);
      const Tensor& w = var(name + "/weights");
      const int in_axis = type == "conv2d" ? 2 : 0;
      Tensor sliced = take_along(w, in_axis, current);
      const int64_t outs = w.shape().back();
      std::vector<int64_t> kept =
          i == last_weighted ? all_of(outs) : strongest(channel_norms(sliced, norm), fraction);
      out[name + "/weights"] = take_along(sliced, static_cast<int>(w.rank()) - 1, kept);
      if (variables.count(name + "/bias")) out[name + "/bias"] = take_along(var(name + "/bias"), 0, kept);
      if (i != last_weighted) {
        layer[type == "conv2d" ? "filters" : "units"] = static_cast<int64_t>(kept.size());
        result.layers.push_back(StructuredLayer{name, outs, kept});
      }
      channels = outs;
      current = kept;
    } else if (type == "flatten") {
      // NHWC flatten: feature (p * C + c) for spatial position p and channel c.
      const int64_t features = original.graph.type(Output{original.graph.id_of(name), 0}).shape[1];
      std::vector<int64_t> kept_features;
      for (int64_t p = 0; p < features / channels; ++p)
        for (int64_t c : current) kept_features.push_back(p * channels + c);
      channels = features;
      current = kept_features;
    } else if (std::find(kPassThrough.begin(), kPassThrough.end(), type) != kPassThrough.end()) {
      if (type == "batch_norm")
        for (const char* p : {"/gamma", "/beta", "/moving_mean", "/moving_variance"})
          out[name + p] = take_along(var(name + p), 0, current);
    } else {
      fail("{}: structured pruning does not handle layer '{}' of type {}", spec.origin, name, type);
    }
  }
  YAML::Emitter emitter;
  emitter << root;
  result.spec_text = std::string("# structured-pruned from ") + spec.origin + "\n" + emitter.c_str() + "\n";
  return result;
}

}  // namespace sf
