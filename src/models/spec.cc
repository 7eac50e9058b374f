#include "models/spec.h"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>
#include <cmath>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/limits.h"
#include "ops/binary_ops.h"
#include "ops/fake_quant_ops.h"
#include "ops/ops.h"
#include "placement/device_name.h"

namespace sf {

namespace {

// A spec is a short hand-written file; these keep a hostile one from costing gigabytes.
constexpr size_t kMaxSpecBytes = size_t{1} << 20;
constexpr size_t kMaxSpecLayers = 2000;  // a ResNet-152 spec has about 500

std::string where(const std::string& origin, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return origin;
  return fmt::format("{}:{}", origin, mark.line + 1);
}

// One layer being built: its YAML, its resolved inputs, and helpers that read keys with a
// message that names the file, line and layer.
struct LayerContext {
  const std::string& origin;
  const YAML::Node& yaml;
  std::string name;
  std::string type;
  std::vector<Output> inputs;
  Model& model;
  int64_t qat_bits = 0;  // quantization-aware training: weights go through FakeQuantWeights
  std::string binary;    // binarized training: "", "weights", "xnor" or "ternary"

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: layer '{}' ({}): {}", where(origin, yaml), name, type,
         fmt::format(format, std::forward<Args>(args)...));
  }
  // The element count of a parameter of this shape (positive dimensions), or an error naming
  // the layer when it exceeds limits::kMaxElements, so that sizes derived from it cannot overflow.
  int64_t elements(const Shape& shape, const char* what) const {
    int64_t n = 1;
    for (int64_t d : shape) {
      if (d > limits::kMaxElements / n)
        error("{} {} have more than {} elements", what, shape_str(shape), limits::kMaxElements);
      n *= d;
    }
    return n;
  }
  bool has(const char* key) const { return static_cast<bool>(yaml[key]); }
  template <typename T>
  T get(const char* key, T fallback) const {
    if (!yaml[key]) return fallback;
    try {
      return yaml[key].as<T>();
    } catch (const YAML::Exception&) {
      error("'{}' has the wrong type", key);
    }
  }
  template <typename T>
  T required(const char* key) const {
    if (!yaml[key]) error("missing required key '{}'", key);
    return get<T>(key, T{});
  }
  // An int or a [a, b] pair.
  std::vector<int64_t> pair(const char* key, int64_t fallback) const {
    if (!yaml[key]) return {fallback, fallback};
    const YAML::Node& v = yaml[key];
    try {
      if (v.IsScalar()) {
        int64_t x = v.as<int64_t>();
        return {x, x};
      }
      auto list = v.as<std::vector<int64_t>>();
      if (list.size() == 2) return list;
    } catch (const YAML::Exception&) {
    }
    error("'{}' must be an integer or a list of two integers", key);
  }
  Graph& graph() const { return model.graph; }
  Output input() const {
    if (inputs.size() != 1) error("expects one input, got {}", inputs.size());
    return inputs[0];
  }
  const Shape& input_shape() const { return graph().type(input()).shape; }
  Output parameter(const std::string& suffix, Shape shape, const Initializer& init, int64_t fan_in,
                   int64_t fan_out, bool decay, bool clip_to_unit = false) const {
    std::string var_name = name + "/" + suffix;
    Output v = ops::variable(graph(), DType::f32, std::move(shape), var_name);
    model.parameters.push_back(Parameter{var_name, v, init, fan_in, fan_out, decay, clip_to_unit});
    return v;
  }
  // What the layer's conv or matmul reads: binary (+1/-1) in an xnor layer.
  Output layer_input() const {
    if (binary != "xnor") return input();
    return ops::binarize_activation(graph(), input(), name + "/binarize_input");
  }
  // The layer's weights as its op reads them: binarized or ternarized under binarized training,
  // fake-quantized under quantization-aware training.
  Output weights(Shape shape, const Initializer& init, int64_t fan_in, int64_t fan_out) const {
    const bool binarized = !binary.empty();
    Output w = parameter("weights", std::move(shape), init, fan_in, fan_out, !binarized, binarized);
    if (binarized)
      return ops::binarize_weights(graph(), w, binary == "ternary", name + "/weights_binarized");
    if (qat_bits == 0) return w;
    return ops::fake_quant_weights(graph(), w, qat_bits, name + "/weights_fake_quant");
  }
};

// Under quantization-aware training, the tensors the eightbit graph holds in u8 (the input and
// the results of these layers) are fake-quantized with a learned range.
const std::set<std::string> kFakeQuantizedLayers = {"conv2d", "depthwise_conv2d", "dense", "add",
                                                    "concat"};

Output fake_quant_activation(Model& model, Output x, const std::string& name) {
  const std::string range = name + "/activation_range";
  Output r = ops::variable(model.graph, DType::f32, {2}, range);
  // NaN: nothing learned yet; the first batch's range is taken as is.
  model.state.emplace_back(range, Initializer{Initializer::Kind::Constant, std::nan("")});
  Output y = ops::fake_quant_activation(model.graph, x, r, name + "/fake_quant");
  model.moving_averages.push_back({range, Output{y.node, 1}, 0.99});
  return y;
}

Output apply_activation(const LayerContext& ctx, Output x, const std::string& activation) {
  Graph& g = ctx.graph();
  if (activation.empty() || activation == "linear") return x;
  if (const std::optional<Activation> act = parse_activation(activation)) {
    if (*act == Activation::None) return x;
    if (*act == Activation::Relu) return ops::relu(g, x, ctx.name + "/relu");
    return ops::relu6(g, x, ctx.name + "/relu6");
  }
  if (activation == "sigmoid") return ops::sigmoid(g, x, ctx.name + "/sigmoid");
  if (activation == "tanh") return ops::tanh(g, x, ctx.name + "/tanh");
  ctx.error("unknown activation '{}' (expected none, relu, relu6, sigmoid, tanh)", activation);
}

Initializer weight_init(const LayerContext& ctx, const std::string& activation) {
  const std::optional<Activation> act = parse_activation(activation);
  std::string fallback = act && *act != Activation::None ? "he" : "glorot";
  try {
    return parse_initializer(ctx.get<std::string>("init", fallback));
  } catch (const Error& e) {
    ctx.error("{}", e.what());
  }
}

Initializer bias_init(const LayerContext& ctx) {
  try {
    return parse_initializer(ctx.get<std::string>("bias_init", "zeros"));
  } catch (const Error& e) {
    ctx.error("{}", e.what());
  }
}

ops::Conv2DOptions conv_options(const LayerContext& ctx) {
  ops::Conv2DOptions o;
  o.strides = ctx.pair("strides", 1);
  o.dilations = ctx.pair("dilation", 1);
  const YAML::Node& padding = ctx.yaml["padding"];
  if (!padding) return o;
  if (padding.IsScalar()) {
    std::string p = padding.as<std::string>();
    if (p == "same" || p == "SAME") {
      o.padding = "SAME";
      return o;
    }
    if (p == "valid" || p == "VALID") return o;
    int64_t amount = 0;
    try {
      amount = padding.as<int64_t>();
    } catch (const YAML::Exception&) {
      ctx.error("padding '{}' must be same, valid, an integer or [top, bottom, left, right]", p);
    }
    o.padding = "EXPLICIT";
    o.pads = {amount, amount, amount, amount};
    return o;
  }
  auto pads = padding.as<std::vector<int64_t>>();
  if (pads.size() != 4) ctx.error("padding list must be [top, bottom, left, right]");
  o.padding = "EXPLICIT";
  o.pads = pads;
  return o;
}

Output build_conv(LayerContext& ctx, bool depthwise) {
  Output x = ctx.layer_input();
  const Shape& in = ctx.input_shape();
  if (in.size() != 4) ctx.error("input is {}, expected an image batch [N,H,W,C]", shape_str(in));
  const int64_t in_channels = in[3];
  if (in_channels <= 0) ctx.error("input {} has no channels", shape_str(in));
  std::vector<int64_t> kernel = ctx.pair("kernel", 0);
  if (!ctx.has("kernel")) ctx.error("missing required key 'kernel'");
  ops::Conv2DOptions options = conv_options(ctx);
  int64_t out_channels, groups;
  if (depthwise) {
    groups = in_channels;
    const int64_t multiplier = ctx.get<int64_t>("multiplier", 1);
    if (multiplier <= 0 || multiplier > limits::kMaxElements / std::max<int64_t>(in_channels, 1))
      ctx.error("multiplier must be 1..{} for {} input channels, got {}",
                limits::kMaxElements / std::max<int64_t>(in_channels, 1), in_channels, multiplier);
    out_channels = in_channels * multiplier;
  } else {
    out_channels = ctx.required<int64_t>("filters");
    groups = ctx.get<int64_t>("groups", 1);
  }
  if (out_channels <= 0 || groups <= 0 || kernel[0] <= 0 || kernel[1] <= 0)
    ctx.error("filters, groups and kernel must be positive");
  if (in_channels % groups != 0 || out_channels % groups != 0)
    ctx.error("groups {} must divide input channels {} and filters {}", groups, in_channels,
              out_channels);
  options.groups = groups;
  std::string activation = ctx.get<std::string>("activation", "none");
  const int64_t per_group_in = in_channels / groups;
  const Shape w_shape = {kernel[0], kernel[1], per_group_in, out_channels};
  const int64_t w_elements = ctx.elements(w_shape, "weights");
  Output w = ctx.weights(w_shape, weight_init(ctx, activation), w_elements / out_channels,
                         w_elements / per_group_in / groups);
  Output y = ops::conv2d(ctx.graph(), x, w, options, ctx.name);
  if (ctx.get<bool>("use_bias", true)) {
    Output b = ctx.parameter("bias", {out_channels}, bias_init(ctx), 1, 1, false);
    y = ops::bias_add(ctx.graph(), y, b, ctx.name + "/bias_add");
  }
  return apply_activation(ctx, y, activation);
}

Output build_dense(LayerContext& ctx) {
  const Shape& in = ctx.input_shape();
  if (in.size() != 2)
    ctx.error("input is {}, expected [batch, features] (add a flatten layer before it)",
              shape_str(in));
  const int64_t units = ctx.required<int64_t>("units");
  if (units <= 0) ctx.error("units must be positive, got {}", units);
  std::string activation = ctx.get<std::string>("activation", "none");
  Output w = ctx.weights({in[1], units}, weight_init(ctx, activation), in[1], units);
  Output y = ops::matmul(ctx.graph(), ctx.layer_input(), w, false, false, ctx.name);
  if (ctx.get<bool>("use_bias", true)) {
    Output b = ctx.parameter("bias", {units}, bias_init(ctx), 1, 1, false);
    y = ops::bias_add(ctx.graph(), y, b, ctx.name + "/bias_add");
  }
  return apply_activation(ctx, y, activation);
}

Output build_pool(LayerContext& ctx, bool max) {
  ops::PoolOptions o;
  o.ksize = ctx.pair("size", 2);
  o.strides = ctx.has("strides") ? ctx.pair("strides", 1) : o.ksize;
  std::string padding = ctx.get<std::string>("padding", "valid");
  if (padding == "same" || padding == "SAME") {
    o.padding = "SAME";
  } else if (padding != "valid" && padding != "VALID") {
    ctx.error("padding '{}' must be same or valid", padding);
  }
  if (ctx.input_shape().size() != 4)
    ctx.error("input is {}, expected an image batch [N,H,W,C]", shape_str(ctx.input_shape()));
  return max ? ops::max_pool(ctx.graph(), ctx.input(), o, ctx.name)
             : ops::avg_pool(ctx.graph(), ctx.input(), o, ctx.name);
}

Output build_batch_norm(LayerContext& ctx) {
  const Shape& in = ctx.input_shape();
  const int64_t channels = in.back();
  Graph& g = ctx.graph();
  Output gamma = ctx.parameter("gamma", {channels}, {Initializer::Kind::Constant, 1.0}, 1, 1, false);
  Output beta = ctx.parameter("beta", {channels}, {Initializer::Kind::Zeros, 0.0}, 1, 1, false);
  Output mean = ops::variable(g, DType::f32, {channels}, ctx.name + "/moving_mean");
  Output var = ops::variable(g, DType::f32, {channels}, ctx.name + "/moving_variance");
  ctx.model.state.emplace_back(ctx.name + "/moving_mean", Initializer{Initializer::Kind::Zeros, 0});
  ctx.model.state.emplace_back(ctx.name + "/moving_variance",
                               Initializer{Initializer::Kind::Constant, 1.0});
  Output y = ops::batch_norm(g, ctx.input(), gamma, beta, mean, var,
                             ctx.get<double>("epsilon", 1e-3), ctx.name);
  double momentum = ctx.get<double>("momentum", 0.99);
  ctx.model.moving_averages.push_back({ctx.name + "/moving_mean", Output{y.node, 1}, momentum});
  ctx.model.moving_averages.push_back({ctx.name + "/moving_variance", Output{y.node, 2}, momentum});
  return y;
}

struct LayerType {
  std::string name;
  std::vector<std::string> keys;  // besides name, type, inputs
  std::function<Output(LayerContext&)> build;
};

const std::vector<LayerType>& layer_table() {
  static const std::vector<LayerType> table = {
      {"conv2d",
       {"filters", "kernel", "strides", "padding", "dilation", "groups", "activation", "use_bias",
        "init", "bias_init", "binary"},
       [](LayerContext& c) { return build_conv(c, false); }},
      {"depthwise_conv2d",
       {"multiplier", "kernel", "strides", "padding", "dilation", "activation", "use_bias", "init",
        "bias_init"},
       [](LayerContext& c) { return build_conv(c, true); }},
      {"dense", {"units", "activation", "use_bias", "init", "bias_init", "binary"}, build_dense},
      {"max_pool", {"size", "strides", "padding"}, [](LayerContext& c) { return build_pool(c, true); }},
      {"avg_pool", {"size", "strides", "padding"}, [](LayerContext& c) { return build_pool(c, false); }},
      {"global_avg_pool", {},
       [](LayerContext& c) { return ops::global_avg_pool(c.graph(), c.input(), c.name); }},
      {"flatten", {}, [](LayerContext& c) { return ops::flatten(c.graph(), c.input(), 1, c.name); }},
      {"dropout", {"rate"},
       [](LayerContext& c) {
         double rate = c.get<double>("rate", 0.5);
         if (rate < 0.0 || rate >= 1.0) c.error("rate must be in [0, 1), got {}", rate);
         return ops::dropout(c.graph(), c.input(), rate, c.name);
       }},
      {"batch_norm", {"epsilon", "momentum"}, build_batch_norm},
      {"relu", {}, [](LayerContext& c) { return ops::relu(c.graph(), c.input(), c.name); }},
      {"relu6", {}, [](LayerContext& c) { return ops::relu6(c.graph(), c.input(), c.name); }},
      {"sigmoid", {}, [](LayerContext& c) { return ops::sigmoid(c.graph(), c.input(), c.name); }},
      {"tanh", {}, [](LayerContext& c) { return ops::tanh(c.graph(), c.input(), c.name); }},
      {"add", {},
       [](LayerContext& c) {
         if (c.inputs.size() < 2) c.error("needs at least two inputs");
         return ops::add_n(c.graph(), c.inputs, c.name);
       }},
      {"concat", {"axis"},
       [](LayerContext& c) {
         if (c.inputs.size() < 2) c.error("needs at least two inputs");
         return ops::concat(c.graph(), c.inputs, c.get<int64_t>("axis", -1), c.name);
       }},
  };
  return table;
}

const std::set<std::string> kTrainKeys = {"optimizer", "lr",           "lr_schedule", "batch",
                                          "epochs",    "weight_decay", "momentum",    "seed"};

}  // namespace

std::vector<std::string> layer_types() {
  std::vector<std::string> out;
  for (const LayerType& t : layer_table()) {
    std::string line = t.name + ":";
    for (const std::string& k : t.keys) line += " " + k;
    out.push_back(line);
  }
  return out;
}

ModelSpec load_model_spec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open model spec", path);
  // Read up to one byte past the limit rather than trusting a seek: pipes and /dev/stdin have
  // no size to seek to.
  std::string text(kMaxSpecBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) fail("{}: cannot read model spec", path);
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxSpecBytes)
    fail("{}: a model spec of more than {} bytes is larger than the limit", path, kMaxSpecBytes);
  return parse_model_spec(text, path);
}

namespace {

// The line (1-based) of the first byte that is not valid UTF-8, or 0 when all is valid. The
// spec's text is stored in run metadata (JSON), which accepts only UTF-8.
int invalid_utf8_line(const std::string& text) {
  int line = 1;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : 9;
    if (extra == 9 || (extra > 0 && i + extra >= text.size())) return line;
    for (size_t k = 1; k <= extra; ++k)
      if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) return line;
    if (c == '\n') ++line;
    i += extra + 1;
  }
  return 0;
}

// yaml-cpp keeps both entries of a duplicated key and answers lookups with the first; a user
// who wrote the key twice meant one of them, so say so.
void reject_duplicate_keys(const YAML::Node& node, const std::string& origin, int depth = 0) {
  if (depth > limits::kMaxJsonDepth) fail("{}: nested deeper than {} levels", origin, limits::kMaxJsonDepth);
  if (node.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : node) {
      if (kv.first.IsScalar() && !seen.insert(kv.first.Scalar()).second)
        fail("{}: duplicate key '{}'", where(origin, kv.first), kv.first.Scalar());
      reject_duplicate_keys(kv.second, origin, depth + 1);
    }
  } else if (node.IsSequence()) {
    for (const YAML::Node& item : node) reject_duplicate_keys(item, origin, depth + 1);
  }
}

YAML::Node parse_yaml(const std::string& text, const std::string& origin) {
  if (text.size() > kMaxSpecBytes)
    fail("{}: a model spec of {} bytes is larger than the {}-byte limit", origin, text.size(),
         kMaxSpecBytes);
  if (int line = invalid_utf8_line(text)) fail("{}:{}: not valid UTF-8", origin, line);
  try {
    YAML::Node root = YAML::Load(text);
    reject_duplicate_keys(root, origin);
    return root;
  } catch (const YAML::Exception& e) {
    fail("{}:{}: invalid YAML: {}", origin, e.mark.line + 1, e.msg);
  }
}

}  // namespace

namespace {
ModelSpec parse_model_spec_unguarded(const std::string& text, const std::string& origin);
}  // namespace

ModelSpec parse_model_spec(const std::string& text, const std::string& origin) {
  try {
    return parse_model_spec_unguarded(text, origin);
  } catch (const YAML::Exception& e) {
    fail("{}:{}: {}", origin, e.mark.line + 1, e.msg);
  }
}

namespace {
ModelSpec parse_model_spec_unguarded(const std::string& text, const std::string& origin) {
  YAML::Node root = parse_yaml(text, origin);
  if (!root.IsMap()) fail("{}: a model spec must be a mapping with name, input, classes, layers", origin);
  static const std::set<std::string> kTopKeys = {"name",  "input", "classes", "layers",
                                                  "train", "qat",   "binarize"};
  for (const auto& kv : root) {
    std::string key = kv.first.as<std::string>();
    if (!kTopKeys.count(key))
      fail("{}: unknown key '{}' (known: name, input, classes, layers, train, qat, binarize)",
           where(origin, kv.first), key);
  }
  ModelSpec spec;
  spec.origin = origin;
  spec.text = text;
  try {
    spec.name = root["name"] ? root["name"].as<std::string>() : "model";
    if (!root["input"]) fail("{}: missing 'input: [H, W, C]'", origin);
    spec.input = root["input"].as<std::vector<int64_t>>();
    if (!root["classes"]) fail("{}: missing 'classes'", origin);
    spec.classes = root["classes"].as<int64_t>();
  } catch (const YAML::Exception& e) {
    fail("{}:{}: {}", origin, e.mark.line + 1, e.msg);
  }
  if (spec.input.size() != 3 || spec.input[0] <= 0 || spec.input[1] <= 0 || spec.input[2] <= 0)
    fail("{}: input must be [H, W, C] with positive sizes", origin);
  if (spec.classes < 2) fail("{}: classes must be at least 2", origin);
  if (!root["layers"] || !root["layers"].IsSequence() || root["layers"].size() == 0)
    fail("{}: 'layers' must be a non-empty list", origin);
  if (root["layers"].size() > kMaxSpecLayers)
    fail("{}: {} layers, more than the limit of {}", origin, root["layers"].size(),
         kMaxSpecLayers);
  if (const YAML::Node& train = root["train"]) {
    if (!train.IsMap()) fail("{}: 'train' must be a mapping", where(origin, train));
    for (const auto& kv : train) {
      std::string key = kv.first.as<std::string>();
      if (!kTrainKeys.count(key))
        fail("{}: unknown train key '{}' (known: optimizer, lr, lr_schedule, batch, epochs, "
             "weight_decay, momentum, seed)",
             where(origin, kv.first), key);
      spec.train_defaults[key] = kv.second.as<std::string>();
    }
  }
  if (const YAML::Node& qat = root["qat"]) {
    if (!qat.IsMap() || qat.size() != 1 || !qat["bits"])
      fail("{}: 'qat' must be a mapping with only 'bits' (2..8), e.g. qat: {{bits: 4}}",
           where(origin, qat));
    try {
      spec.qat_bits = qat["bits"].as<int64_t>();
    } catch (const YAML::Exception&) {
      fail("{}: qat bits must be an integer in 2..8", where(origin, qat["bits"]));
    }
    if (spec.qat_bits < 2 || spec.qat_bits > 8)
      fail("{}: qat bits {} is outside 2..8", where(origin, qat["bits"]), spec.qat_bits);
  }
  if (const YAML::Node& binarize = root["binarize"]) {
    const char* expected =
        "'binarize' must be a mapping with 'mode' (weights, xnor, ternary) and optionally 'all' "
        "(true: the first conv and the last dense too), e.g. binarize: {mode: xnor}";
    if (!binarize.IsMap() || !binarize["mode"]) fail("{}: {}", where(origin, binarize), expected);
    for (const auto& kv : binarize) {
      const std::string key = kv.first.as<std::string>();
      if (key != "mode" && key != "all")
        fail("{}: unknown binarize key '{}'; {}", where(origin, kv.first), key, expected);
    }
    try {
      spec.binarize = binarize["mode"].as<std::string>();
      spec.binarize_all = binarize["all"] ? binarize["all"].as<bool>() : false;
    } catch (const YAML::Exception&) {
      fail("{}: {}", where(origin, binarize), expected);
    }
    if (!is_binarize_mode(spec.binarize))
      fail("{}: binarize mode '{}' must be weights, xnor or ternary", where(origin, binarize),
           spec.binarize);
  }
  // Building once validates layer types, keys and shapes now rather than at training time.
  const Model model = build_model(spec, 1);
  for (const Node& n : model.graph.nodes())
    if (n.requested_device.starts_with("/job:")) {
      spec.job = DeviceName::parse(n.requested_device, origin).job;
      break;
    }
  return spec;
}
}  // namespace

namespace {
Model build_model_unguarded(const ModelSpec& spec, int64_t batch);
}  // namespace

// Conversions outside a layer's own checks (a layer's type or name not a string, say) come
// out of yaml-cpp without the file; name it and the line here.
Model build_model(const ModelSpec& spec, int64_t batch) {
  try {
    return build_model_unguarded(spec, batch);
  } catch (const YAML::Exception& e) {
    fail("{}:{}: {}", spec.origin, e.mark.line + 1, e.msg);
  }
}

namespace {
Model build_model_unguarded(const ModelSpec& spec, int64_t batch) {
  YAML::Node root = parse_yaml(spec.text, spec.origin);
  Model model;
  Graph& g = model.graph;
  Shape input_shape = {batch, spec.input[0], spec.input[1], spec.input[2]};
  model.input = ops::placeholder(g, DType::f32, input_shape, "input");
  std::map<std::string, Output> layer_outputs;
  const Output input = spec.qat_bits > 0 ? fake_quant_activation(model, model.input, "input")
                                         : model.input;
  Output previous = input;
  // Under `binarize:`, the papers' practice: the first conv and the last dense stay float.
  std::string first_conv, last_dense;
  for (const YAML::Node& layer : root["layers"]) {
    if (!layer.IsMap() || !layer["type"] || !layer["name"]) continue;
    const std::string type = layer["type"].as<std::string>();
    if (type == "conv2d" && first_conv.empty()) first_conv = layer["name"].as<std::string>();
    if (type == "dense") last_dense = layer["name"].as<std::string>();
  }
  for (const YAML::Node& layer : root["layers"]) {
    if (!layer.IsMap()) fail("{}: each layer must be a mapping", where(spec.origin, layer));
    if (!layer["type"]) fail("{}: layer without 'type'", where(spec.origin, layer));
    std::string type = layer["type"].as<std::string>();
    std::string name = layer["name"] ? layer["name"].as<std::string>()
                                     : g.unique_name(type);
    if (name.empty()) fail("{}: layer of type '{}' has an empty name", where(spec.origin, layer), type);
    const LayerType* layer_type = nullptr;
    for (const LayerType& t : layer_table())
      if (t.name == type) layer_type = &t;
    if (layer_type == nullptr) {
      std::string known;
      for (const LayerType& t : layer_table()) known += (known.empty() ? "" : ", ") + t.name;
      fail("{}: layer '{}': unknown type '{}' (known: {})", where(spec.origin, layer), name, type,
           known);
    }
    LayerContext ctx{spec.origin, layer, name, type, {}, model, spec.qat_bits, ""};
    if (layer["binary"]) {
      ctx.binary = ctx.get<std::string>("binary", "");
      if (!is_binarize_mode(ctx.binary))
        ctx.error("binary '{}' must be weights, xnor or ternary", ctx.binary);
    } else if (!spec.binarize.empty() && (type == "conv2d" || type == "dense") &&
               (spec.binarize_all || (name != first_conv && name != last_dense))) {
      ctx.binary = spec.binarize;
    }
    for (const auto& kv : layer) {
      std::string key = kv.first.as<std::string>();
      if (key == "name" || key == "type" || key == "inputs" || key == "device" ||
          key == "colocate_with")
        continue;
      bool known = false;
      for (const std::string& k : layer_type->keys) known = known || k == key;
      if (!known) {
        std::string list;
        for (const std::string& k : layer_type->keys) list += (list.empty() ? "" : ", ") + k;
        ctx.error("unknown key '{}' (known: {})", key, list.empty() ? "none" : list);
      }
    }
    if (layer_outputs.count(name) || name == "input") ctx.error("duplicate layer name");
    if (const YAML::Node& inputs = layer["inputs"]) {
      for (const YAML::Node& in : inputs) {
        std::string in_name = in.as<std::string>();
        if (in_name == "input") {
          ctx.inputs.push_back(input);
          continue;
        }
        auto it = layer_outputs.find(in_name);
        if (it == layer_outputs.end()) ctx.error("input '{}' is not an earlier layer", in_name);
        ctx.inputs.push_back(it->second);
      }
    } else {
      ctx.inputs.push_back(previous);
    }
    // Placement: every node of the layer asks for its device, or shares an earlier layer's.
    const std::string device = layer["device"] ? ctx.get<std::string>("device", "") : "";
    if (!device.empty()) DeviceName::parse(device, fmt::format("{}: layer '{}'", spec.origin, name));
    std::string colocate_with;
    if (layer["colocate_with"]) {
      const std::string with = ctx.get<std::string>("colocate_with", "");
      auto it = layer_outputs.find(with);
      if (it == layer_outputs.end()) ctx.error("colocate_with '{}' is not an earlier layer", with);
      colocate_with = g.node(it->second.node).name;
    }
    const int first_node = g.num_nodes();
    Output out;
    try {
      out = layer_type->build(ctx);
    } catch (const YAML::Exception& e) {
      ctx.error("{}", e.msg);
    } catch (const Error& e) {
      std::string message = e.what();
      if (message.rfind(spec.origin, 0) == 0) throw;  // already names the file
      fail("{}: {}", where(spec.origin, layer), message);
    }
    if (spec.qat_bits > 0 && kFakeQuantizedLayers.count(type) && ctx.binary.empty())
      out = fake_quant_activation(model, out, name);
    for (int id = first_node; id < g.num_nodes(); ++id) {
      g.mutable_node(id).requested_device = device;
      g.mutable_node(id).colocate_with = colocate_with;
    }
    layer_outputs[name] = out;
    previous = out;
  }
  const TensorType& logits = g.type(previous);
  if (logits.shape != Shape{batch, spec.classes})
    fail("{}: the last layer outputs {}, expected [batch, classes] = [{},{}]", spec.origin,
         shape_str(logits.shape), batch, spec.classes);
  model.logits = previous;
  return model;
}
}  // namespace

ModelSpec with_qat(const ModelSpec& spec, int64_t bits) {
  if (spec.qat_bits == bits) return spec;
  if (spec.qat_bits != 0)
    fail("{}: the spec already trains with qat bits {}; cannot change it to {}", spec.origin,
         spec.qat_bits, bits);
  return parse_model_spec(spec.text + fmt::format("\n# added by slimflow train --qat\nqat: {{bits: {}}}\n", bits),
                          spec.origin);
}

bool is_binarize_mode(const std::string& mode) {
  return mode == "weights" || mode == "xnor" || mode == "ternary";
}

ModelSpec with_binarize(const ModelSpec& spec, const std::string& mode, bool all) {
  if (!is_binarize_mode(mode))
    fail("--binarize '{}' must be weights, xnor or ternary", mode);
  if (spec.binarize == mode && spec.binarize_all == all) return spec;
  if (!spec.binarize.empty())
    fail("{}: the spec already binarizes with mode {}{}; cannot change it to {}{}", spec.origin,
         spec.binarize, spec.binarize_all ? " (all layers)" : "", mode, all ? " (all layers)" : "");
  return parse_model_spec(
      spec.text + fmt::format("\n# added by slimflow train --binarize\nbinarize: {{mode: {}, all: {}}}\n",
                              mode, all ? "true" : "false"),
      spec.origin);
}

}  // namespace sf
