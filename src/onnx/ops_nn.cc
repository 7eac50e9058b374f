// Converters for the NHWC image ops (Conv, ConvTranspose, pooling, BatchNormalization,
// Resize) and the dense ones (Gemm, MatMul). Image ops take the NHWC form of their input and
// produce NHWC; ONNX's OIHW filters are permuted to HWIO once, at import. The filter and window
// attribute helpers are shared with the quantized converters (ops_quant.cc, qdq_fusion.cc).
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "core/limits.h"
#include "onnx/context.h"
#include "onnx/shape_args.h"
#include "ops/op_names.h"
#include "ops/ops.h"

namespace sf::onnx_import {

namespace {

Value& image_in(Context& c) {
  Value& x = c.in(0);
  const bool integer_max = c.op() == "MaxPool" && (x.dtype == DType::u8 || x.dtype == DType::i8);
  if (x.dtype != DType::f32 && !integer_max) c.unsupported("only float inputs are supported");
  if (x.shape.size() != 4)
    c.unsupported("only 2-D images (4-D NCHW input) are supported, got input {}",
                  shape_str(x.shape));
  return x;
}

std::vector<int64_t> pair_attr(Context& c, const char* name, int64_t def) {
  std::vector<int64_t> v = c.attr_ints(name, {def, def});
  if (v.size() != 2) c.fail("{} must have 2 entries, got [{}]", name, fmt::join(v, ","));
  return v;
}

// ONNX auto_pad/pads as our padding attributes for an input of spatial size hw.
void set_padding(Context& c, Attrs& a, const Shape& hw, const std::vector<int64_t>& k,
                 const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations) {
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads{0, 0, 0, 0};  // top, bottom, left, right
  std::string padding = "EXPLICIT";
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> p = c.attr_ints("pads", {0, 0, 0, 0});
    if (p.size() != 4) c.fail("pads must have 4 entries, got [{}]", fmt::join(p, ","));
    pads = {p[0], p[2], p[1], p[3]};
  } else if (auto_pad == "VALID") {
    padding = "VALID";
  } else if (auto_pad == "SAME_UPPER") {
    padding = "SAME";  // TensorFlow's SAME puts the odd unit at the end, as SAME_UPPER does
  } else if (auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < 2; ++i)
      if (strides[i] < 1 || dilations[i] < 1 || k[i] < 1 || hw[i] > limits::kMaxElements ||
          k[i] - 1 > limits::kMaxWindowExtent / dilations[i]) {
        // Out of range: SAME carries the values to the shape function, which names them.
        a.set("padding", std::string("SAME"));
        a.set("pads", std::vector<int64_t>{0, 0, 0, 0});
        return;
      }
    for (size_t i = 0; i < 2; ++i) {
      const int64_t out = (hw[i] + strides[i] - 1) / strides[i];
      const int64_t eff = (k[i] - 1) * dilations[i] + 1;
      const int64_t total = std::max<int64_t>((out - 1) * strides[i] + eff - hw[i], 0);
      pads[2 * i] = total - total / 2;
      pads[2 * i + 1] = total / 2;
    }
  } else {
    c.fail("unknown auto_pad '{}'", auto_pad);
  }
  if (padding == "EXPLICIT" && pads == std::vector<int64_t>{0, 0, 0, 0}) padding = "VALID";
  a.set("padding", padding);
  a.set("pads", padding == "EXPLICIT" ? pads : std::vector<int64_t>{0, 0, 0, 0});
}

// ceil_mode=1: extra bottom/right padding (ignored by max and by averages that exclude
// padding) makes floor rounding give the ceil-rounded size; as in ONNX and PyTorch, a last
// window that would start in the end padding is dropped.
void round_output_up(Context& c, Attrs& a, const Shape& hw, const std::vector<int64_t>& k,
                     const std::vector<int64_t>& strides) {
  if (a.get_string("padding") == "SAME") c.unsupported("ceil_mode=1 with auto_pad SAME");
  std::vector<int64_t> pads = a.get_ints("pads");  // top, bottom, left, right
  // Values out of range are left to the shape function, which names them; this arithmetic
  // must neither divide by zero nor overflow on them.
  if (pads.size() != 4 || k.size() != 2 || strides.size() != 2) return;
  for (size_t i = 0; i < 2; ++i)
    if (strides[i] < 1 || strides[i] > limits::kMaxElements || k[i] < 1 ||
        k[i] > limits::kMaxWindowExtent || hw[i] > limits::kMaxElements ||
        pads[2 * i] < 0 || pads[2 * i] > limits::kMaxWindowPadding || pads[2 * i + 1] < 0 ||
        pads[2 * i + 1] > limits::kMaxWindowPadding)
      return;
  for (size_t i = 0; i < 2; ++i) {
    const int64_t begin = pads[2 * i], span = hw[i] + begin + pads[2 * i + 1];
    if (span < k[i]) return;  // the shape function reports the error
    int64_t out = (span - k[i] + strides[i] - 1) / strides[i] + 1;
    if ((out - 1) * strides[i] >= hw[i] + begin) --out;
    pads[2 * i + 1] += std::max<int64_t>(0, (out - 1) * strides[i] + k[i] - span);
  }
  a.set("pads", pads);
  if (pads != std::vector<int64_t>{0, 0, 0, 0}) a.set("padding", std::string("EXPLICIT"));
}

}  // namespace

// OIHW -> HWIO for Conv ([kh,kw,in/groups,out]); IOHW -> [kh,kw,out/groups,in] for
// ConvTranspose: the same permutation.
Output conv_filter(Context& c, Value& w) {
  if (w.shape.size() != 4)
    c.unsupported("only 2-D filters are supported, got {}", shape_str(w.shape));
  const std::vector<int64_t> perm{2, 3, 1, 0};
  if (w.is_const()) return c.constant(permute(*w.constant, perm), "filter");
  return c.add(op_names::kTranspose, {c.plain(w)}, {{"perm", perm}}, "filter");
}

Attrs conv2d_attrs(Context& c, const Shape& x, const Shape& w) {
  if (w.size() != 4) c.unsupported("only 2-D filters are supported, got {}", shape_str(w));
  Attrs a;
  const std::vector<int64_t> strides = pair_attr(c, "strides", 1);
  const std::vector<int64_t> dilations = pair_attr(c, "dilations", 1);
  a.set("strides", strides);
  a.set("dilations", dilations);
  a.set("groups", c.attr_int("group", 1));
  set_padding(c, a, {x[2], x[3]}, {w[2], w[3]}, strides, dilations);
  return a;
}

Attrs pool2d_attrs(Context& c, const Shape& x, bool max) {
  const bool ceil_mode = c.attr_int("ceil_mode", 0) != 0;
  if (ceil_mode && !max && c.attr_int("count_include_pad", 0) != 0)
    c.unsupported("ceil_mode=1 with count_include_pad=1 is not supported");
  const std::vector<int64_t> k = c.attr_ints("kernel_shape");
  if (k.size() != 2)
    c.unsupported("only 2-D pooling is supported, kernel_shape [{}]", fmt::join(k, ","));
  const std::vector<int64_t> dilations = pair_attr(c, "dilations", 1);
  if (dilations != std::vector<int64_t>{1, 1})
    c.unsupported("dilations [{}] are not supported for pooling", fmt::join(dilations, ","));
  const std::vector<int64_t> strides = pair_attr(c, "strides", 1);
  Attrs a{{"ksize", k}, {"strides", strides}};
  set_padding(c, a, {x[2], x[3]}, k, strides, dilations);
  if (ceil_mode) round_output_up(c, a, {x[2], x[3]}, k, strides);
  if (!max) a.set("count_include_pad", c.attr_int("count_include_pad", 0) != 0);
  return a;
}

namespace {

Output add_bias(Context& c, Output y) {
  if (!c.has_input(2)) return y;
  return c.add(op_names::kBiasAdd, {y, c.plain(c.in(2))}, {}, "bias");
}

void conv(Context& c) {
  Value& x = image_in(c);
  Value& w = c.in(1);
  if (const onnx::AttributeProto* k = c.attr("kernel_shape"); k != nullptr && w.shape.size() == 4) {
    const std::vector<int64_t> declared(k->ints().begin(), k->ints().end());
    if (declared != std::vector<int64_t>{w.shape[2], w.shape[3]})
      c.fail("kernel_shape [{}] contradicts the weights {} (OIHW)", fmt::join(declared, ","),
             shape_str(w.shape));
  }
  Output f = conv_filter(c, w);
  Output y = c.add(op_names::kConv2D, {c.nhwc(x), f}, conv2d_attrs(c, x.shape, w.shape));
  c.set_out(0, add_bias(c, y), Layout::kNhwc);
}

void conv_transpose(Context& c) {
  Value& x = image_in(c);
  Value& w = c.in(1);
  Output f = conv_filter(c, w);
  const std::vector<int64_t> strides = pair_attr(c, "strides", 1);
  const std::vector<int64_t> dilations = pair_attr(c, "dilations", 1);
  std::vector<int64_t> out_pad = pair_attr(c, "output_padding", 0);
  std::vector<int64_t> p = c.attr_ints("pads", {0, 0, 0, 0});
  if (p.size() != 4) c.fail("pads must have 4 entries, got [{}]", fmt::join(p, ","));
  std::vector<int64_t> pads{p[0], p[2], p[1], p[3]};
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> out_shape = c.attr_ints("output_shape");
  if (out_shape.size() > 2) out_shape.erase(out_shape.begin(), out_shape.end() - 2);
  if (!out_shape.empty() && out_shape.size() != 2)
    c.fail("output_shape must have 2 spatial entries, got [{}]", fmt::join(out_shape, ","));
  if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    // The arithmetic below needs sane values; the shape function reports the rest by name.
    for (size_t i = 0; i < 2; ++i)
      if (strides[i] < 1 || strides[i] > limits::kMaxWindowPadding || dilations[i] < 1 ||
          dilations[i] > limits::kMaxWindowPadding || out_pad[i] < 0 ||
          out_pad[i] > limits::kMaxWindowPadding)
        c.fail("strides [{}], dilations [{}] and output_padding [{}] must be in [1, {}] ([0, {}] "
               "for output_padding) to compute output_shape or auto_pad",
               fmt::join(strides, ","), fmt::join(dilations, ","), fmt::join(out_pad, ","),
               limits::kMaxWindowPadding, limits::kMaxWindowPadding);
  }
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
    out_shape = {x.shape[2] * strides[0], x.shape[3] * strides[1]};
  if (!out_shape.empty()) {
    // Pads that give the requested size; a shortfall becomes output padding at the end.
    for (size_t i = 0; i < 2; ++i) {
      const int64_t natural =
          strides[i] * (x.shape[2 + i] - 1) + out_pad[i] + (w.shape[2 + i] - 1) * dilations[i] + 1;
      const int64_t total = natural - out_shape[i];
      if (total < 0) {
        out_pad[i] += -total;
        pads[2 * i] = pads[2 * i + 1] = 0;
      } else {
        const bool upper = auto_pad != "SAME_LOWER";
        pads[2 * i] = upper ? total / 2 : total - total / 2;
        pads[2 * i + 1] = total - pads[2 * i];
      }
    }
  } else if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    c.fail("unknown auto_pad '{}'", auto_pad);
  }
  Attrs a{{"strides", strides},
          {"pads", pads},
          {"dilations", dilations},
          {"output_padding", out_pad},
          {"groups", c.attr_int("group", 1)}};
  Output y = c.add(op_names::kConvTranspose2D, {c.nhwc(x), f}, a);
  c.set_out(0, add_bias(c, y), Layout::kNhwc);
}

// MaxPool with dilations: the maximum of the k_h * k_w strided slices of x (padded with the
// lowest float) that the window's taps read. Explicit pads only; dilated pools are rare enough
// that a kernel of their own does not pay.
void dilated_max_pool(Context& c, Value& x, const std::vector<int64_t>& dilations) {
  if (c.attr_string("auto_pad", "NOTSET") != "NOTSET" || c.attr_int("ceil_mode", 0) != 0)
    c.unsupported("dilations with auto_pad or ceil_mode are not supported");
  if (c.node->output_size() > 1 && !c.node->output(1).empty())
    c.unsupported("the Indices output of a dilated MaxPool is not supported");
  const std::vector<int64_t> k = c.attr_ints("kernel_shape");
  const std::vector<int64_t> strides = pair_attr(c, "strides", 1);
  const std::vector<int64_t> pads = c.attr_ints("pads", {0, 0, 0, 0});  // h, w begins; h, w ends
  if (k.size() != 2 || pads.size() != 4)
    c.fail("kernel_shape [{}] and pads [{}] must have 2 and 4 entries", fmt::join(k, ","),
           fmt::join(pads, ","));
  if (k[0] < 1 || k[1] < 1 || k[0] * k[1] > 64)
    c.unsupported("dilated windows of more than 64 taps are not supported, kernel_shape [{}]",
                  fmt::join(k, ","));
  Output padded = c.nhwc(x);
  if (pads != std::vector<int64_t>{0, 0, 0, 0})
    padded = c.add(op_names::kPad, {padded},
                   {{"pads", std::vector<int64_t>{0, pads[0], pads[1], 0, 0, pads[2], pads[3], 0}},
                    {"mode", std::string("constant")},
                    {"value", -3.4e38}},
                   "pad");
  const Shape& hw = c.g.type(padded).shape;  // [N, H, W, C]
  std::vector<int64_t> out(2);
  for (size_t i = 0; i < 2; ++i) {
    if (k[i] < 1 || strides[i] < 1 || dilations[i] < 1 || k[i] > limits::kMaxWindowExtent ||
        dilations[i] > limits::kMaxWindowExtent)
      c.fail("kernel_shape [{}], strides [{}] and dilations [{}] must be in [1, {}]",
             fmt::join(k, ","), fmt::join(strides, ","), fmt::join(dilations, ","),
             limits::kMaxWindowExtent);
    const int64_t extent = (k[i] - 1) * dilations[i] + 1;
    if (hw[i + 1] < extent)
      c.fail("the dilated window ({} wide) does not fit the padded input {}", extent,
             shape_str(hw));
    out[i] = (hw[i + 1] - extent) / strides[i] + 1;
  }
  Output y;
  for (int64_t a = 0; a < k[0]; ++a)
    for (int64_t b = 0; b < k[1]; ++b) {
      const std::vector<int64_t> starts{a * dilations[0], b * dilations[1]};
      Output tap = c.add(op_names::kStridedSlice, {padded},
                         {{"starts", starts},
                          {"ends", std::vector<int64_t>{starts[0] + (out[0] - 1) * strides[0] + 1,
                                                        starts[1] + (out[1] - 1) * strides[1] + 1}},
                          {"axes", std::vector<int64_t>{1, 2}},
                          {"steps", strides}},
                         "tap");
      y = y.valid() ? c.add(op_names::kMaximum, {y, tap}, {}, "max") : tap;
    }
  c.set_out(0, c.add(op_names::kIdentity, {y}), Layout::kNhwc);
}

void pool(Context& c, bool max) {
  Value& x = image_in(c);
  if (const std::vector<int64_t> d = pair_attr(c, "dilations", 1); max && d != std::vector<int64_t>{1, 1})
    return dilated_max_pool(c, x, d);
  Attrs a = pool2d_attrs(c, x.shape, max);
  if (max && c.node->output_size() > 1 && !c.node->output(1).empty()) {
    a.set("nchw_index", true);
    a.set("column_major", c.attr_int("storage_order", 0) != 0);
    const int id = c.g.add_node(op_names::kMaxPoolWithArgmax, {c.nhwc(x)}, a, c.fresh());
    c.set_out(0, Output{id, 0}, Layout::kNhwc);
    return c.set_out(1, Output{id, 1}, Layout::kNhwc);
  }
  c.set_out(0, c.add(max ? op_names::kMaxPool : op_names::kAvgPool, {c.nhwc(x)}, a), Layout::kNhwc);
}

// Converts a copy of the current node through `convert`: input i reads replaced[i] where given,
// and `rewrite` adjusts each ints attribute (key, values). Returns the copy's output 0; errors
// still name the original node.
// Inputs from `kept_inputs` on are dropped.
Value& convert_lifted(Context& c, Converter convert, std::map<int, Value> replaced,
                      const std::function<void(const std::string&, std::vector<int64_t>&)>& rewrite,
                      const std::string& prefix, int kept_inputs = 1 << 30) {
  const onnx::NodeProto& original = *c.node;
  onnx::NodeProto n = original;
  n.clear_input();
  n.clear_output();
  for (int i = 0; i < std::min(original.input_size(), kept_inputs); ++i) {
    auto it = replaced.find(i);
    if (it == replaced.end()) {
      n.add_input(original.input(i));
      continue;
    }
    const std::string name = prefix + "/in" + std::to_string(i);
    c.values[name] = std::move(it->second);
    n.add_input(name);
  }
  const std::string out = prefix + "/y";
  n.add_output(out);
  for (onnx::AttributeProto& a : *n.mutable_attribute()) {
    if (a.type() != onnx::AttributeProto::INTS) continue;
    std::vector<int64_t> v(a.ints().begin(), a.ints().end());
    rewrite(a.name(), v);
    a.clear_ints();
    for (int64_t d : v) a.add_ints(d);
  }
  // The converter reads the lifted node; errors must name the original, and `n` dies here.
  struct RestoreNode {
    Context& c;
    const onnx::NodeProto* original;
    ~RestoreNode() { c.node = original; }
  } restore{c, &original};
  c.node = &n;
  convert(c);
  c.node = &original;
  return c.values.at(out);
}

Value reshaped(Context& c, Value& v, const Shape& s, const std::string& suffix) {
  Value out;
  out.shape = s;
  out.dtype = v.dtype;
  if (v.is_const())
    out.constant = v.constant->clone().reshaped(s);
  else
    out.plain = c.add(op_names::kReshape, {c.plain(v)}, {{"shape", s}}, suffix);
  return out;
}

// A 1-D Conv/ConvTranspose/MaxPool/AveragePool ([N, C, L] input) runs as the 2-D op on
// [N, C, 1, L]: the node is converted as a copy whose window attributes get a unit first
// spatial dimension (kernel 1, stride 1, no padding), and the result is reshaped back.
void as_2d(Context& c, Converter convert) {
  if (c.in(0).shape.size() != 3) return convert(c);
  if (c.node->output_size() > 1 && !c.node->output(1).empty())
    c.unsupported("the Indices output is not supported");
  const bool has_filter = c.op() == "Conv" || c.op() == "ConvTranspose";
  std::map<int, Value> replaced;
  for (int i : {0, 1}) {
    if (i == 1 && (!has_filter || !c.has_input(1))) continue;
    Shape s = c.in(i).shape;
    if (s.size() != 3) c.fail("input {} has shape {}; a 1-D op takes rank 3", i, shape_str(s));
    s.insert(s.begin() + 2, 1);
    replaced[i] = reshaped(c, c.in(i), s, "unsqueeze" + std::to_string(i));
  }
  Value& y = convert_lifted(
      c, convert, std::move(replaced),
      [](const std::string& key, std::vector<int64_t>& v) {
        if (key == "kernel_shape" || key == "strides" || key == "dilations")
          v.insert(v.begin(), 1);
        else if (key == "output_padding" || key == "output_shape")
          v.insert(v.begin(), key == "output_shape" ? 1 : 0);
        else if (key == "pads" && v.size() == 2)
          v = {0, v[0], 0, v[1]};
      },
      c.fresh("as_2d"));
  Shape s = y.shape;
  s.erase(s.begin() + 2);
  c.set_out(0, c.add(op_names::kReshape, {c.plain(y)}, {{"shape", s}}, "squeeze"), Layout::kPlain);
}

// 3-D MaxPool/AveragePool ([N, C, D, H, W]) as two 2-D pools: over (H, W) with the depth as
// channels, then over D (with a unit second axis). The window is a box, so its maximum, its sum
// and its count of in-bounds elements (what averages divide by) all factor per axis.
void pool_3d(Context& c, Converter convert) {
  if (c.in(0).shape.size() != 5) return as_2d(c, convert);
  if (c.node->output_size() > 1 && !c.node->output(1).empty())
    c.unsupported("the Indices output of a 3-D MaxPool is not supported");
  const Shape x = c.in(0).shape;
  // Keeps entries `at` of a 3-D window attribute (pads: begins then ends), padding with `unit`.
  const auto pick = [](std::vector<int64_t>& v, const std::string& key, std::vector<size_t> at,
                       int64_t unit) {
    if (key == "pads") {
      if (v.size() != 6) return;
      std::vector<int64_t> p;
      for (size_t half : {size_t{0}, size_t{3}})
        for (size_t a : at) p.push_back(a < 3 ? v[half + a] : 0);
      v = p;
    } else if (key == "kernel_shape" || key == "strides" || key == "dilations") {
      if (v.size() != 3) return;
      std::vector<int64_t> p;
      for (size_t a : at) p.push_back(a < 3 ? v[a] : unit);
      v = p;
    }
  };
  std::map<int, Value> planes;
  planes[0] = reshaped(c, c.in(0), {x[0] * x[1], x[2], x[3], x[4]}, "planes");
  Value& hw = convert_lifted(
      c, convert, std::move(planes),
      [&](const std::string& key, std::vector<int64_t>& v) { pick(v, key, {1, 2}, 1); },
      c.fresh("pool_hw"));
  const Shape pooled = hw.shape;  // [N*C, D, H', W']
  std::map<int, Value> depth;
  depth[0] = reshaped(c, hw, {pooled[0], 1, pooled[1], pooled[2] * pooled[3]}, "depth");
  Value& d = convert_lifted(
      c, convert, std::move(depth),
      [&](const std::string& key, std::vector<int64_t>& v) { pick(v, key, {0, 3}, 1); },
      c.fresh("pool_d"));
  c.set_out(0,
            c.add(op_names::kReshape, {c.plain(d)},
                  {{"shape", Shape{x[0], x[1], d.shape[2], pooled[2], pooled[3]}}}),
            Layout::kPlain);
}

// --- 3-D Conv and ConvTranspose ([N, C, D, H, W]) as 2-D ones over (H, W) ---
// Each depth tap k of the filter is a 2-D node (a copy of this one with the depth entries of its
// window attributes dropped) that runs on all the depth slices it reads at once, the slices
// folded into the batch. No 3-D kernel is needed; the depth arithmetic is done here.

struct DepthWindow {
  int64_t kernel, stride, dilation, pad_begin, pad_end, output_padding;
};

std::vector<int64_t> triple_attr(Context& c, const char* name, int64_t def) {
  std::vector<int64_t> v = c.attr_ints(name, {def, def, def});
  if (v.size() != 3)
    c.fail("{} must have 3 entries for a 3-D op, got [{}]", name, fmt::join(v, ","));
  return v;
}

// The depth entries of the node's window attributes; pads are left to the caller.
DepthWindow depth_window(Context& c, const Shape& w) {
  DepthWindow d{w[2], triple_attr(c, "strides", 1)[0], triple_attr(c, "dilations", 1)[0], 0, 0, 0};
  if (c.op() == "ConvTranspose") d.output_padding = triple_attr(c, "output_padding", 0)[0];
  if (d.stride < 1 || d.stride > limits::kMaxWindowPadding || d.dilation < 1 ||
      d.dilation > limits::kMaxWindowPadding || d.output_padding < 0 ||
      d.output_padding > limits::kMaxWindowPadding || d.kernel < 1 ||
      d.kernel > limits::kMaxWindowExtent)
    c.fail(
        "the depth stride {}, dilation {}, output_padding {} and kernel {} must be in [1, {}] "
        "([0, {}] for output_padding, [1, {}] for the kernel)",
        d.stride, d.dilation, d.output_padding, d.kernel, limits::kMaxWindowPadding,
        limits::kMaxWindowPadding, limits::kMaxWindowExtent);
  const std::vector<int64_t> pads = c.attr_ints("pads", {0, 0, 0, 0, 0, 0});
  if (pads.size() != 6)
    c.fail("pads must have 6 entries for a 3-D op, got [{}]", fmt::join(pads, ","));
  if (pads[0] < 0 || pads[3] < 0 || pads[0] > limits::kMaxWindowPadding ||
      pads[3] > limits::kMaxWindowPadding)
    c.fail("the depth pads {} and {} must be in [0, {}]", pads[0], pads[3],
           limits::kMaxWindowPadding);
  d.pad_begin = pads[0];
  d.pad_end = pads[3];
  return d;
}

// Drops the depth entries of a 3-D window attribute, for the 2-D node of one depth tap.
void drop_depth(const std::string& key, std::vector<int64_t>& v) {
  if (key == "pads" && v.size() == 6)
    v = {v[1], v[2], v[4], v[5]};
  else if ((key == "kernel_shape" || key == "strides" || key == "dilations" ||
            key == "output_padding") &&
           v.size() == 3)
    v.erase(v.begin());
  else if (key == "output_shape" && v.size() >= 3)
    v.erase(v.end() - 3);
}

Output slice_axis(Context& c, Output x, int64_t axis, int64_t begin, int64_t count, int64_t step,
                  const std::string& suffix) {
  return c.add(op_names::kStridedSlice, {x},
               {{"starts", std::vector<int64_t>{begin}},
                {"ends", std::vector<int64_t>{begin + (count - 1) * step + 1}},
                {"axes", std::vector<int64_t>{axis}},
                {"steps", std::vector<int64_t>{step}}},
               suffix);
}

// Depth tap k of a 5-D filter ([O, I, KD, KH, KW] -> [O, I, KH, KW]); constant filters stay
// constant.
Value filter_tap(Context& c, Value& w, int64_t k) {
  Value tap;
  tap.shape = {w.shape[0], w.shape[1], w.shape[3], w.shape[4]};
  tap.dtype = w.dtype;
  const Attrs slice{{"starts", std::vector<int64_t>{k}},
                    {"ends", std::vector<int64_t>{k + 1}},
                    {"axes", std::vector<int64_t>{2}},
                    {"steps", std::vector<int64_t>{1}}};
  if (w.is_const())
    tap.constant =
        evaluate_reference(op_names::kStridedSlice, {*w.constant}, slice).reshaped(tap.shape);
  else
    tap.plain = c.add(op_names::kReshape,
                      {c.add(op_names::kStridedSlice, {c.plain(w)}, slice, "filter_tap")},
                      {{"shape", tap.shape}}, "filter_tap2d");
  return tap;
}

// The 2-D input of a tap: `out` holds [N * D, H, W, C], the NHWC form of the ONNX shape.
Value planes_value(Output out, const Shape& onnx_shape) {
  Value v;
  v.shape = onnx_shape;
  v.nhwc = out;
  return v;
}

// [N, C, D, H, W] -> [N, D, H, W, C]: a depth slice's NHWC planes are contiguous, so the slices
// a tap reads fold into the batch of the 2-D op without another transpose.
Output depth_major_nhwc(Context& c) {
  return c.add(op_names::kTranspose, {c.plain(c.in(0))},
               {{"perm", std::vector<int64_t>{0, 2, 3, 4, 1}}}, "ndhwc_in");
}

void check_3d_inputs(Context& c) {
  const Value& x = c.in(0);
  if (x.dtype != DType::f32) c.unsupported("only float inputs are supported");
  if (!c.has_input(1) || c.in(1).shape.size() != 5)
    c.fail("a 3-D {} needs a 5-D filter, got {}", c.op(),
           c.has_input(1) ? shape_str(c.in(1).shape) : std::string("none"));
  for (int64_t d : x.shape)
    if (d < 1)
      c.unsupported("3-D {} needs a static input shape, got {}", c.op(), shape_str(x.shape));
}

// [N*D, H, W, M] (the NHWC sum of the taps) plus the bias, as ONNX's [N, M, D, H, W].
void set_3d_out(Context& c, Output nhwc_sum, const Shape& planes_nhwc, int64_t n, int64_t depth) {
  Output y = c.add(op_names::kReshape, {nhwc_sum},
                   {{"shape", Shape{n * depth, planes_nhwc[1], planes_nhwc[2], planes_nhwc[3]}}},
                   "planes");
  y = add_bias(c, y);
  y = c.add(op_names::kReshape, {y},
            {{"shape", Shape{n, depth, planes_nhwc[1], planes_nhwc[2], planes_nhwc[3]}}}, "ndhwc");
  c.set_out(0, c.add(op_names::kTranspose, {y}, {{"perm", std::vector<int64_t>{0, 4, 1, 2, 3}}}),
            Layout::kPlain);
}

// Conv: output depth o reads padded input depths o * stride + k * dilation, so tap k is a 2-D
// conv over those Dout slices ([N * Dout, C, H, W]); the taps' results are summed.
void conv_3d(Context& c) {
  check_3d_inputs(c);
  const Shape x = c.in(0).shape, w = c.in(1).shape;
  if (const onnx::AttributeProto* k = c.attr("kernel_shape")) {
    const std::vector<int64_t> declared(k->ints().begin(), k->ints().end());
    if (declared != std::vector<int64_t>{w[2], w[3], w[4]})
      c.fail("kernel_shape [{}] contradicts the weights {} (OIDHW)", fmt::join(declared, ","),
             shape_str(w));
  }
  DepthWindow d = depth_window(c, w);
  const int64_t extent = (d.kernel - 1) * d.dilation + 1;
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "VALID") {
    d.pad_begin = d.pad_end = 0;
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const int64_t out = (x[2] + d.stride - 1) / d.stride;
    const int64_t total = std::max<int64_t>((out - 1) * d.stride + extent - x[2], 0);
    d.pad_begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    d.pad_end = total - d.pad_begin;
  } else if (auto_pad != "NOTSET") {
    c.fail("unknown auto_pad '{}'", auto_pad);
  }
  const int64_t padded = x[2] + d.pad_begin + d.pad_end;
  if (padded < extent)
    c.fail("the depth window ({} wide) does not fit the padded input depth {}", extent, padded);
  const int64_t depth = (padded - extent) / d.stride + 1;
  Output xt = depth_major_nhwc(c);
  if (d.pad_begin > 0 || d.pad_end > 0)
    xt = c.add(op_names::kPad, {xt},
               {{"pads", std::vector<int64_t>{0, d.pad_begin, 0, 0, 0, 0, d.pad_end, 0, 0, 0}},
                {"mode", std::string("constant")},
                {"value", 0.0}},
               "pad_depth");
  Output sum;
  Shape planes_nhwc;
  for (int64_t k = 0; k < d.kernel; ++k) {
    const std::string tap = "tap" + std::to_string(k);
    Output slices = slice_axis(c, xt, 1, k * d.dilation, depth, d.stride, tap);
    std::map<int, Value> replaced;
    replaced[0] =
        planes_value(c.add(op_names::kReshape, {slices},
                           {{"shape", Shape{x[0] * depth, x[3], x[4], x[1]}}}, tap + "_planes"),
                     {x[0] * depth, x[1], x[3], x[4]});
    replaced[1] = filter_tap(c, c.in(1), k);
    Value& y = convert_lifted(c, conv, std::move(replaced), drop_depth, c.fresh(tap), 2);
    Output y_nhwc = c.nhwc(y);
    planes_nhwc = c.g.type(y_nhwc).shape;
    sum = sum.valid() ? c.add(op_names::kAdd, {sum, y_nhwc}, {}, "sum") : y_nhwc;
  }
  set_3d_out(c, sum, planes_nhwc, x[0], depth);
}

// ConvTranspose: input depth i adds tap k's 2-D result to output depth
// i * stride + k * dilation - pad_begin. Tap k runs on all D slices at once; its result is
// spread by stride (zeros between slices), shifted by k * dilation, and the taps summed; the
// depth pads are then cropped.
void conv_transpose_3d(Context& c) {
  check_3d_inputs(c);
  const Shape x = c.in(0).shape, w = c.in(1).shape;
  DepthWindow d = depth_window(c, w);
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> out_shape = c.attr_ints("output_shape");
  if (!out_shape.empty() && out_shape.size() < 3)
    c.fail("output_shape must have 3 spatial entries, got [{}]", fmt::join(out_shape, ","));
  int64_t wanted = out_shape.empty() ? -1 : out_shape[out_shape.size() - 3];
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
    wanted = x[2] * d.stride;
  else if (auto_pad != "NOTSET" && auto_pad != "VALID")
    c.fail("unknown auto_pad '{}'", auto_pad);
  const auto natural = [&] {
    return d.stride * (x[2] - 1) + d.output_padding + (d.kernel - 1) * d.dilation + 1;
  };
  if (wanted >= 0) {
    // Pads that give the requested depth; a shortfall becomes output padding at the end.
    const int64_t total = natural() - wanted;
    if (total < 0) {
      d.output_padding += -total;
      d.pad_begin = d.pad_end = 0;
    } else {
      d.pad_begin = auto_pad != "SAME_LOWER" ? total / 2 : total - total / 2;
      d.pad_end = total - d.pad_begin;
    }
  }
  const int64_t full = natural();
  const int64_t depth = full - d.pad_begin - d.pad_end;
  if (depth < 1)
    c.fail("the depth pads {} and {} leave no output depth (of {})", d.pad_begin, d.pad_end, full);
  Output folded = c.add(op_names::kReshape, {depth_major_nhwc(c)},
                        {{"shape", Shape{x[0] * x[2], x[3], x[4], x[1]}}}, "planes");
  const int64_t spread = (x[2] - 1) * d.stride + 1;  // depths an input slice's result reaches
  Output sum;
  Shape planes_nhwc;
  for (int64_t k = 0; k < d.kernel; ++k) {
    const std::string tap = "tap" + std::to_string(k);
    std::map<int, Value> replaced;
    replaced[0] = planes_value(folded, {x[0] * x[2], x[1], x[3], x[4]});
    replaced[1] = filter_tap(c, c.in(1), k);
    Value& y = convert_lifted(c, conv_transpose, std::move(replaced), drop_depth, c.fresh(tap), 2);
    Output t = c.nhwc(y);  // [N * D, H', W', M]
    planes_nhwc = c.g.type(t).shape;
    const int64_t plane = planes_nhwc[1] * planes_nhwc[2] * planes_nhwc[3];
    if (d.stride > 1) {
      t = c.add(op_names::kReshape, {t}, {{"shape", Shape{x[0], x[2], 1, plane}}}, tap + "_slices");
      t = c.add(op_names::kPad, {t},
                {{"pads", std::vector<int64_t>{0, 0, 0, 0, 0, 0, d.stride - 1, 0}},
                 {"mode", std::string("constant")},
                 {"value", 0.0}},
                tap + "_zeros");
      t = c.add(op_names::kReshape, {t}, {{"shape", Shape{x[0], x[2] * d.stride, plane}}},
                tap + "_strided");
      t = slice_axis(c, t, 1, 0, spread, 1, tap + "_spread");
    } else {
      t = c.add(op_names::kReshape, {t}, {{"shape", Shape{x[0], x[2], plane}}}, tap + "_slices");
    }
    const int64_t before = k * d.dilation, after = full - spread - before;
    if (before > 0 || after > 0)
      t = c.add(op_names::kPad, {t},
                {{"pads", std::vector<int64_t>{0, before, 0, 0, after, 0}},
                 {"mode", std::string("constant")},
                 {"value", 0.0}},
                tap + "_shift");
    sum = sum.valid() ? c.add(op_names::kAdd, {sum, t}, {}, "sum") : t;
  }
  if (d.pad_begin > 0 || d.pad_end > 0) sum = slice_axis(c, sum, 1, d.pad_begin, depth, 1, "crop");
  set_3d_out(c, sum, planes_nhwc, x[0], depth);
}

void conv_any(Context& c) {
  if (c.in(0).shape.size() == 5) return conv_3d(c);
  as_2d(c, conv);
}

void conv_transpose_any(Context& c) {
  if (c.in(0).shape.size() == 5) return conv_transpose_3d(c);
  as_2d(c, conv_transpose);
}

void global_average_pool(Context& c) {
  Value& x = image_in(c);
  Output y = c.add(op_names::kGlobalAvgPool, {c.nhwc(x)});
  // [N,C] is the NHWC form of ONNX's [N,C,1,1] once reshaped to [N,1,1,C].
  y = c.add(op_names::kReshape, {y}, {{"shape", Shape{-1, 1, 1, x.shape[1]}}}, "nhwc");
  c.set_out(0, y, Layout::kNhwc);
}

// The statistics BatchNormalization (training) and LayerNormalization normalize with, over
// `axes` of x (kept as 1s): the mean, x - mean, the population variance and
// sqrt(variance + epsilon), epsilon being the node's attribute.
struct Moments {
  Output mean, centered, var, stddev;
};

Moments moments(Context& c, Output x, const std::vector<int64_t>& axes) {
  const Attrs reduce{{"axes", axes}, {"keep_dims", true}};
  Moments m;
  m.mean = c.add(op_names::kReduceMean, {x}, reduce, "mean");
  m.centered = c.add(op_names::kSub, {x, m.mean}, {}, "centered");
  m.var = c.add(op_names::kReduceMean,
                {c.add(op_names::kMul, {m.centered, m.centered}, {}, "squared")}, reduce, "var");
  Output eps = c.constant(Tensor::scalar_f32(c.attr_float("epsilon", 1e-5f)), "eps");
  m.stddev =
      c.add(op_names::kSqrt, {c.add(op_names::kAdd, {m.var, eps}, {}, "var_eps")}, {}, "stddev");
  return m;
}

// training_mode=1: normalizes with the batch's statistics (population variance) and outputs the
// running statistics updated by `momentum`, as ONNX's reference does; composed of plain ops.
void batch_norm_training(Context& c) {
  Value& x = c.in(0);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank < 2) c.fail("input {} must have rank 2 or more", shape_str(x.shape));
  std::vector<int64_t> axes{0};
  Shape per_channel(static_cast<size_t>(rank), 1);
  per_channel[1] = x.shape[1];
  for (int64_t a = 2; a < rank; ++a) axes.push_back(a);
  const auto scalar = [&](float v, const char* what) {
    return c.constant(Tensor::scalar_f32(v), what);
  };
  const auto channels = [&](int i, const char* what) {
    return c.add(op_names::kReshape, {c.plain(c.in(i))}, {{"shape", per_channel}}, what);
  };
  const Moments m = moments(c, c.plain(x), axes);
  Output y = c.add(op_names::kDiv, {m.centered, m.stddev}, {}, "normalized");
  y = c.add(op_names::kMul, {y, channels(1, "scale")}, {}, "scaled");
  c.set_out(0, c.add(op_names::kAdd, {y, channels(2, "bias")}), Layout::kPlain);
  const float momentum = c.attr_float("momentum", 0.9f);
  const auto running = [&](int input, Output batch, const char* what) {
    Output kept = c.add(op_names::kMul, {c.plain(c.in(input)), scalar(momentum, "momentum")}, {},
                        std::string(what) + "_kept");
    Output flat = c.add(op_names::kReshape, {batch}, {{"shape", Shape{x.shape[1]}}},
                        std::string(what) + "_batch");
    Output added = c.add(op_names::kMul, {flat, scalar(1.0f - momentum, "one_minus_momentum")}, {},
                         std::string(what) + "_added");
    return c.add(op_names::kAdd, {kept, added}, {}, what);
  };
  c.set_out(1, running(3, m.mean, "running_mean"), Layout::kPlain);
  c.set_out(2, running(4, m.var, "running_var"), Layout::kPlain);
}

void batch_norm(Context& c) {
  Value& x = c.in(0);
  if (x.dtype != DType::f32) c.unsupported("only float inputs are supported");
  if (c.attr_int("training_mode", 0) != 0) return batch_norm_training(c);
  for (int i = 1; i < c.node->output_size(); ++i)
    if (!c.node->output(i).empty()) c.unsupported("training outputs need training_mode=1");
  const size_t rank = x.shape.size();
  if (rank != 4 && rank != 2)
    c.unsupported("only [N,C] and [N,C,H,W] inputs are supported, got {}", shape_str(x.shape));
  const Layout l = rank == 4 ? Layout::kNhwc : Layout::kPlain;
  std::vector<Output> in{c.get(x, l)};
  for (int i = 1; i <= 4; ++i) in.push_back(c.plain(c.in(i)));
  const double eps = c.attr_float("epsilon", 1e-5f);
  c.set_out(0, c.add(op_names::kBatchNorm, in, {{"epsilon", eps}}), l);
}

// LayerNormalization over the axes from `axis` on, composed of plain ops (ReduceMean, Sub, Mul,
// Sqrt, Div): y = (x - mean) / sqrt(var + epsilon) * scale + bias; the optional outputs are the
// mean and 1 / sqrt(var + epsilon), with the normalized axes kept as 1s.
void layer_norm(Context& c) {
  Value& x = c.in(0);
  if (x.dtype != DType::f32) c.unsupported("only float inputs are supported");
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  int64_t axis = c.attr_int("axis", -1);
  if (axis < -rank || axis >= rank)
    c.fail("axis {} is out of range for input {}", axis, shape_str(x.shape));
  if (axis < 0) axis += rank;
  std::vector<int64_t> axes;
  for (int64_t a = axis; a < rank; ++a) axes.push_back(a);
  const Moments m = moments(c, c.plain(x), axes);
  Output inv_stddev = c.add(op_names::kDiv, {c.constant(Tensor::scalar_f32(1.0f), "one"), m.stddev},
                            {}, "inv_stddev");
  Output y = c.add(op_names::kMul, {m.centered, inv_stddev}, {}, "normalized");
  y = c.add(op_names::kMul, {y, c.plain(c.in(1))}, {}, c.has_input(2) ? "scaled" : "");
  if (c.has_input(2)) y = c.add(op_names::kAdd, {y, c.plain(c.in(2))});
  c.set_out(0, y, Layout::kPlain);
  c.set_out(1, m.mean, Layout::kPlain);
  c.set_out(2, inv_stddev, Layout::kPlain);
}

Tensor scaled(const Tensor& t, float s) {
  return s == 1.0f ? t : evaluate_reference(op_names::kMul, {t, Tensor::scalar_f32(s)});
}

void gemm(Context& c) {
  Value& a = c.in(0);
  Value& b = c.in(1);
  if (a.shape.size() != 2 || b.shape.size() != 2)
    c.fail("A {} and B {} must be 2-D", shape_str(a.shape), shape_str(b.shape));
  const float alpha = c.attr_float("alpha", 1.0f), beta = c.attr_float("beta", 1.0f);
  const bool ta = c.attr_int("transA", 0) != 0, tb = c.attr_int("transB", 0) != 0;
  // alpha folds into a constant B; otherwise it scales the product.
  Output ob = b.is_const() ? c.constant(scaled(*b.constant, alpha), "B") : c.plain(b);
  Output y = c.add(op_names::kMatMul, {c.plain(a), ob}, {{"transpose_a", ta}, {"transpose_b", tb}},
                   "matmul");
  if (!b.is_const() && alpha != 1.0f)
    y = c.add(op_names::kMul, {y, c.constant(Tensor::scalar_f32(alpha), "alpha")}, {}, "alpha_mul");
  if (c.has_input(2) && beta != 0.0f) {
    Value& bias = c.in(2);
    const int64_t n = c.g.type(y).shape[1];
    Output ob2;
    if (bias.is_const()) {
      ob2 = c.constant(scaled(*bias.constant, beta), "C");
    } else {
      ob2 = c.plain(bias);
      if (beta != 1.0f)
        ob2 = c.add(op_names::kMul, {ob2, c.constant(Tensor::scalar_f32(beta), "beta")}, {},
                    "beta_mul");
    }
    y = bias.shape == Shape{n} ? c.add(op_names::kBiasAdd, {y, ob2})
                               : c.add(op_names::kAdd, {y, ob2});
  } else {
    y = c.add(op_names::kIdentity, {y});
  }
  c.set_out(0, y, Layout::kPlain);
}

void matmul(Context& c) {
  Value& a = c.in(0);
  Value& b = c.in(1);
  if (a.shape.size() < 2 || b.shape.size() < 2)
    c.unsupported("rank-1 inputs are not supported, got {} and {}", shape_str(a.shape),
                  shape_str(b.shape));
  const bool batched = a.shape.size() > 2 || b.shape.size() > 2;
  c.set_out(0, c.add(batched ? op_names::kBatchMatMul : op_names::kMatMul, {c.plain(a), c.plain(b)}),
            Layout::kPlain);
}

void resize(Context& c) {
  Value& x = image_in(c);
  const std::string mode = c.attr_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    c.unsupported("mode '{}' is not supported", mode);
  // Opset 10 Resize is asymmetric with floor rounding; inputs are (X, scales).
  const bool v10 = c.opset < 11;
  std::string ctm =
      v10 ? "asymmetric" : c.attr_string("coordinate_transformation_mode", "half_pixel");
  std::string nearest = v10 ? "floor" : c.attr_string("nearest_mode", "round_prefer_floor");
  if (ctm != "half_pixel" && ctm != "asymmetric" && ctm != "align_corners" &&
      ctm != "pytorch_half_pixel" && ctm != "tf_half_pixel_for_nn" && ctm != "tf_crop_and_resize")
    c.unsupported("coordinate_transformation_mode '{}' is not supported", ctm);
  if (c.attr_int("antialias", 0) != 0) c.unsupported("antialias=1 is not supported");
  const std::string policy = c.attr_string("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch")
    c.unsupported("keep_aspect_ratio_policy '{}' is not supported (only 'stretch' is)", policy);
  const std::vector<int64_t> axes = c.attr_ints("axes");
  std::vector<double> roi;  // the spatial axes' [starts, ends]
  if (ctm == "tf_crop_and_resize") {
    std::vector<float> whole(2 * x.shape.size(), 0.0f);
    std::fill(whole.begin() + static_cast<std::ptrdiff_t>(x.shape.size()), whole.end(), 1.0f);
    const std::vector<float> full =
        on_all_axes(c, to_floats(c.const_in(1, "roi")), axes, whole, "roi");
    if (full.size() != 8) c.fail("roi must have 8 entries for a 4-D input, got {}", full.size());
    roi = {full[2], full[3], full[6], full[7]};
  }
  const int scales_at = v10 ? 1 : 2, sizes_at = 3;
  std::vector<int64_t> sizes;
  std::vector<double> spatial_scales;  // the model's, which the coordinates use (ONNX)
  if (!v10 && c.has_input(sizes_at)) {
    sizes = on_all_axes(c, to_ints(c.const_in(sizes_at, "sizes")), axes,
                        std::vector<int64_t>(x.shape.begin(), x.shape.end()), "sizes");
    if (sizes.size() != 4) c.fail("sizes must have 4 entries");
  } else {
    std::vector<float> scales = on_all_axes(c, to_floats(c.const_in(scales_at, "scales")), axes,
                                            std::vector<float>(x.shape.size(), 1.0f), "scales");
    if (scales.size() != 4) c.fail("scales must have 4 entries");
    for (size_t i = 0; i < 4; ++i) {
      const double exact = static_cast<double>(x.shape[i]) * scales[i];
      if (!std::isfinite(exact) || exact < 0 ||
          exact > static_cast<double>(limits::kMaxElements))
        c.fail("scales [{}] on input {} give an output dimension of {:g}, outside [0, {}]",
               fmt::join(scales, ","), shape_str(x.shape), exact, limits::kMaxElements);
      sizes.push_back(static_cast<int64_t>(std::floor(exact)));
    }
    spatial_scales = {scales[2], scales[3]};
  }
  if (sizes[0] != x.shape[0] || sizes[1] != x.shape[1])
    c.unsupported("resizing the batch or channel axis is not supported");
  Attrs a{{"sizes", std::vector<int64_t>{sizes[2], sizes[3]}},
          {"mode", mode},
          {"coordinate_transformation_mode", ctm},
          {"nearest_mode", nearest},
          {"scales", spatial_scales},
          {"cubic_coeff_a", static_cast<double>(c.attr_float("cubic_coeff_a", -0.75f))},
          {"exclude_outside", c.attr_int("exclude_outside", 0) != 0},
          {"roi", roi},
          {"extrapolation_value", static_cast<double>(c.attr_float("extrapolation_value", 0.0f))}};
  c.set_out(0, c.add(op_names::kResize, {c.nhwc(x)}, a), Layout::kNhwc);
}

}  // namespace

void add_nn_converters(ConverterMap& m) {
  m["Conv"] = conv_any;
  m["ConvTranspose"] = conv_transpose_any;
  m["MaxPool"] = [](Context& c) { pool_3d(c, [](Context& c2) { pool(c2, true); }); };
  m["AveragePool"] = [](Context& c) { pool_3d(c, [](Context& c2) { pool(c2, false); }); };
  m["GlobalAveragePool"] = global_average_pool;
  m["BatchNormalization"] = batch_norm;
  m["LayerNormalization"] = layer_norm;
  m["Gemm"] = gemm;
  m["MatMul"] = matmul;
  m["Resize"] = resize;
}

}  // namespace sf::onnx_import
