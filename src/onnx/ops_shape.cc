// Converters for ops that move or reinterpret elements: Constant, Identity, Dropout, Cast,
// Reshape, Flatten, Squeeze, Unsqueeze, Concat, Transpose, Gather, Slice, Pad, Tile. Constant
// inputs were already folded (fold.cc); these handle runtime values.
#include <cstring>

#include "core/limits.h"
#include "onnx/context.h"
#include "onnx/shape_args.h"
#include "ops/op_names.h"
#include "ops/ops.h"

namespace sf::onnx_import {

namespace {

Layout layout_of(const Value& v) { return v.is_nhwc() ? Layout::kNhwc : Layout::kPlain; }

// Position of NCHW axis `a` in the NHWC form.
int64_t nhwc_axis(int64_t a) { return std::vector<int64_t>{0, 3, 1, 2}[static_cast<size_t>(a)]; }

void constant(Context& c) {
  if (const onnx::AttributeProto* a = c.attr("value"))
    return c.set_const(0, tensor_from_proto(a->t(), c.path + ": Constant"));
  if (const onnx::AttributeProto* a = c.attr("value_float"))
    return c.set_const(0, Tensor::scalar_f32(a->f()));
  if (const onnx::AttributeProto* a = c.attr("value_int"))
    return c.set_const(0, Tensor::from_vector<int64_t>({}, {a->i()}));
  if (const onnx::AttributeProto* a = c.attr("value_floats")) {
    std::vector<float> v(a->floats().begin(), a->floats().end());
    return c.set_const(0, Tensor::from_vector<float>({static_cast<int64_t>(v.size())}, v));
  }
  if (const onnx::AttributeProto* a = c.attr("value_ints")) {
    std::vector<int64_t> v(a->ints().begin(), a->ints().end());
    return c.set_const(0, Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
  }
  c.unsupported("only tensor, float and int values are supported");
}

void identity(Context& c) { c.set_out(0, c.in(0)); }

// Dropout at inference: y = x and a mask of all true. Training mode is accepted only with ratio
// 0, where it is the same; any other ratio drops at random, which no stored output can match.
void dropout(Context& c) {
  const auto scalar = [&](int i, const char* what) {
    const Tensor& t = c.const_in(i, what);
    if (t.numel() != 1) c.fail("{} must be a scalar, got {}", what, shape_str(t.shape()));
    return to_floats(t)[0];
  };
  if (c.opset >= 12 && c.has_input(2) && scalar(2, "training_mode") != 0.0f) {
    const float ratio = c.has_input(1) ? scalar(1, "ratio") : 0.5f;
    if (ratio != 0.0f)
      c.unsupported("training_mode with ratio {} drops at random (inference only)", ratio);
  }
  Value& x = c.in(0);
  c.set_out(0, x);
  Tensor mask(DType::u8, x.shape);
  std::memset(mask.raw(), 1, mask.bytes());
  c.set_const(1, std::move(mask));
}

void cast(Context& c) {
  Value& x = c.in(0);
  const int to_type = static_cast<int>(c.attr_int("to", 1));
  const DType to = dtype_from_onnx(to_type, c.path + ": Cast");
  const Layout l = layout_of(x);
  if (to_type == onnx::TensorProto::BOOL) {
    // True where nonzero, not a numeric conversion (0.5 is true).
    Output is_zero = c.add(op_names::kEqual, {c.get(x, l), c.constant(Tensor(x.dtype, {}), "zero")},
                           {}, "is_zero");
    return c.set_out(0, c.add(op_names::kNot, {is_zero}), l);
  }
  c.set_out(0, ops::cast(c.g, c.get(x, l), to, c.fresh()), l);
}

void reshape_to(Context& c, const Shape& shape) {
  Value& x = c.in(0);
  c.set_out(0, c.add(op_names::kReshape, {c.plain(x)}, {{"shape", shape}}), Layout::kPlain);
}

void reshape(Context& c) {
  Shape shape = reshape_shape(c, c.in(0).shape);
  // Keep the batch dimension free when the model copies or infers it.
  std::vector<int64_t> spec = c.opset < 5 ? c.attr_ints("shape") : to_ints(*c.in(1).constant);
  if (!spec.empty() && (spec[0] == 0 || spec[0] == -1) && num_elements(shape) > 0) shape[0] = -1;
  reshape_to(c, shape);
}

void flatten(Context& c) {
  Value& x = c.in(0);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  int64_t axis = c.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  c.set_out(0, c.add(op_names::kFlatten, {c.plain(x)}, {{"axis", axis}}), Layout::kPlain);
}

void concat(Context& c) {
  if (c.num_inputs() == 0) c.fail("needs at least one input");
  std::vector<Value*> vs;
  for (int i = 0; i < c.num_inputs(); ++i) vs.push_back(&c.in(i));
  const int64_t rank = static_cast<int64_t>(vs[0]->shape.size());
  int64_t axis = normalize_axis(c, c.attr_int("axis", 0), rank);
  const Layout l = elementwise_layout(c, vs);
  std::vector<Output> xs;
  for (Value* v : vs) xs.push_back(c.get(*v, l));
  if (l == Layout::kNhwc) axis = nhwc_axis(axis);
  c.set_out(0, c.add(op_names::kConcat, xs, {{"axis", axis}}), l);
}

void transpose(Context& c) {
  Value& x = c.in(0);
  const std::vector<int64_t> perm = transpose_perm_of(c, x.shape.size());
  if (x.is_nhwc()) {
    // Transposing the NHWC form directly; the identity when the model itself asks for NHWC.
    std::vector<int64_t> q;
    for (int64_t p : perm) q.push_back(kToNchw[static_cast<size_t>(p)]);
    bool id = true;
    for (size_t i = 0; i < q.size(); ++i) id = id && q[i] == static_cast<int64_t>(i);
    if (id) return c.set_out(0, c.nhwc(x), Layout::kPlain);
    return c.set_out(0, c.add(op_names::kTranspose, {c.nhwc(x)}, {{"perm", q}}), Layout::kPlain);
  }
  // NHWC data transposed to NCHW: the graph already holds the result's NHWC form.
  if (perm == kToNchw) return c.set_out(0, c.plain(x), Layout::kNhwc);
  c.set_out(0, c.add(op_names::kTranspose, {c.plain(x)}, {{"perm", perm}}), Layout::kPlain);
}

void gather(Context& c) {
  Value& x = c.in(0);
  Value& indices = c.in(1);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t axis = normalize_axis(c, c.attr_int("axis", 0), rank);
  c.set_out(0, c.add(op_names::kGather, {c.plain(x), c.plain(indices)}, {{"axis", axis}}),
            Layout::kPlain);
}

// Split: one Slice per output; sizes from the attribute (opset < 13) or the input read at plan
// time, else equal parts (the last one smaller when the axis does not divide, as opset 18's
// num_outputs, which must then agree with the node's outputs).
void split(Context& c) {
  Value& x = c.in(0);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t axis = normalize_axis(c, c.attr_int("axis", 0), rank);
  const int64_t outputs = c.node->output_size();
  const int64_t total = x.shape[static_cast<size_t>(axis)];
  std::vector<int64_t> sizes;
  if (c.opset >= 13 && c.has_input(1))
    sizes = to_ints(c.const_in(1, "split"));
  else if (c.opset < 13)
    sizes = c.attr_ints("split");
  if (c.opset >= 18 && c.attr("num_outputs")) {
    if (!sizes.empty()) c.fail("has both the split input and num_outputs; ONNX allows one");
    const int64_t num_outputs = c.attr_int("num_outputs", 0);
    if (num_outputs != outputs)
      c.fail("num_outputs is {} but the node has {} outputs", num_outputs, outputs);
  }
  if (sizes.empty()) {
    const int64_t part = (total + outputs - 1) / outputs;
    for (int64_t i = 0; i < outputs; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(part, total - part * i)));
  }
  int64_t sum = 0;
  for (int64_t s : sizes) sum += s;
  if (static_cast<int64_t>(sizes.size()) != outputs || sum != total)
    c.fail("split [{}] does not divide axis {} of {} into {} outputs", fmt::join(sizes, ","), axis,
           shape_str(x.shape), outputs);
  int64_t begin = 0;
  for (int64_t i = 0; i < outputs; ++i) {
    const int64_t end = begin + sizes[static_cast<size_t>(i)];
    c.set_out(static_cast<int>(i),
              c.add(op_names::kSlice, {c.plain(x)}, {{"axis", axis}, {"begin", begin}, {"end", end}},
                    "part" + std::to_string(i)),
              Layout::kPlain);
    begin = end;
  }
}

void slice(Context& c) {
  Value& x = c.in(0);
  c.set_out(0, c.add(op_names::kStridedSlice, {c.plain(x)}, strided_slice_attrs(c)),
            Layout::kPlain);
}

void pad(Context& c) {
  Value& x = c.in(0);
  const std::string mode = c.attr_string("mode", "constant");
  std::vector<int64_t> pads;
  float value = 0.0f;
  if (c.opset < 11) {
    pads = c.attr_ints("pads");
    value = c.attr_float("value", 0.0f);
  } else {
    pads = to_ints(c.const_in(1, "pads"));
    if (c.has_input(2)) {
      const Tensor& v = c.const_in(2, "constant_value");
      if (v.numel() != 1) c.fail("constant_value must be a scalar, got {}", shape_str(v.shape()));
      value = to_floats(v)[0];
    }
  }
  const size_t rank = x.shape.size();
  // Opset 18: pads for the axes of the `axes` input only; the others get none.
  if (c.opset >= 18 && c.has_input(3))
    pads = on_all_axes(c, pads, to_ints(c.const_in(3, "axes")), std::vector<int64_t>(2 * rank, 0),
                       "pads");
  if (pads.size() != 2 * rank) c.fail("pads [{}] for rank {}", fmt::join(pads, ","), rank);
  const Layout l = layout_of(x);
  if (l == Layout::kNhwc) {
    std::vector<int64_t> p(8);
    for (size_t i = 0; i < 4; ++i) {
      p[i] = pads[static_cast<size_t>(kToNhwc[i])];
      p[i + 4] = pads[static_cast<size_t>(kToNhwc[i]) + 4];
    }
    pads = p;
  }
  Attrs a{{"pads", pads}, {"mode", mode}, {"value", static_cast<double>(value)}};
  c.set_out(0, c.add(op_names::kPad, {c.get(x, l)}, a), l);
}

// Tile: x [d0, d1, ...] viewed as [1, d0, 1, d1, ...], broadcast to [r0, d0, r1, d1, ...] and
// merged back pairwise, so no copy loop of its own is needed.
void tile(Context& c) {
  Value& x = c.in(0);
  if (x.dtype != DType::f32)
    c.unsupported("only float inputs are supported, got {}", dtype_name(x.dtype));
  const std::vector<int64_t> repeats = to_ints(c.const_in(1, "repeats"));
  if (repeats.size() != x.shape.size())
    c.fail("repeats [{}] must have one entry per dimension of input {}", fmt::join(repeats, ","),
           shape_str(x.shape));
  Shape spread, broadcast, tiled;
  for (size_t i = 0; i < repeats.size(); ++i) {
    if (repeats[i] < 0) c.fail("repeats [{}] must not be negative", fmt::join(repeats, ","));
    spread.insert(spread.end(), {1, x.shape[i]});
    broadcast.insert(broadcast.end(), {repeats[i], x.shape[i]});
    tiled.push_back(repeats[i] * x.shape[i]);
  }
  limits::checked_num_elements(tiled, fmt::format("{}: node '{}' (Tile)", c.path, c.node_name()));
  Output y = c.add(op_names::kReshape, {c.plain(x)}, {{"shape", spread}}, "spread");
  y = c.add(op_names::kBroadcastTo, {y}, {{"shape", broadcast}}, "repeat");
  c.set_out(0, c.add(op_names::kReshape, {y}, {{"shape", tiled}}), Layout::kPlain);
}

// Shape-computing ops that try_fold did not fold: their data is not known at import time.
void need_constant(Context& c) { c.unsupported("inputs must be constant (folded at import)"); }

}  // namespace

void add_shape_converters(ConverterMap& m) {
  m["Constant"] = constant;
  m["Identity"] = identity;
  m["Dropout"] = dropout;
  m["Cast"] = cast;
  m["Reshape"] = reshape;
  m["Flatten"] = flatten;
  m["Squeeze"] = [](Context& c) { reshape_to(c, squeeze_shape(c, c.in(0).shape)); };
  m["Unsqueeze"] = [](Context& c) { reshape_to(c, unsqueeze_shape(c, c.in(0).shape)); };
  m["Concat"] = concat;
  m["Transpose"] = transpose;
  m["Gather"] = gather;
  m["Slice"] = slice;
  m["Split"] = split;
  m["Pad"] = pad;
  m["Tile"] = tile;
  m["Shape"] = need_constant;
  m["Size"] = need_constant;
  m["ConstantOfShape"] = need_constant;
}

}  // namespace sf::onnx_import
