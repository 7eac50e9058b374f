// Converters for elementwise math, activations, comparisons and mask logic (bool tensors are u8
// 0/1), Where, Softmax and the reductions ReduceMean, ReduceMax and ReduceMin. Elementwise ops keep
// their input's layout, so chains such as Conv -> Add -> Relu stay NHWC.
#include <cmath>
#include <limits>

#include "onnx/context.h"
#include "onnx/shape_args.h"
#include "ops/broadcast.h"
#include "ops/op_names.h"

namespace sf::onnx_import {

namespace {

Value& float_in(Context& c, int i) {
  Value& v = c.in(i);
  if (v.dtype != DType::f32)
    c.unsupported("input {} is {}; only float tensors are supported", i, dtype_name(v.dtype));
  return v;
}

Layout layout_of(const Value& v) { return v.is_nhwc() ? Layout::kNhwc : Layout::kPlain; }

void unary(Context& c, const std::string& op, Attrs attrs = {}) {
  Value& x = float_in(c, 0);
  const Layout l = layout_of(x);
  c.set_out(0, c.add(op, {c.get(x, l)}, std::move(attrs)), l);
}

// An f32 operand for a float op: integer constants (Pow exponents, ...) are converted.
Value& float_operand(Context& c, int i) {
  Value& v = c.in(i);
  if (v.dtype != DType::f32 && v.is_const()) {
    v.constant = cast_tensor(*v.constant, DType::f32);
    v.dtype = DType::f32;
    v.plain = v.nhwc = Output{};
  }
  // A runtime integer exponent is cast; integer bases stay unsupported.
  if (v.dtype != DType::f32 && c.op() == "Pow" && i == 1 && c.in(0).dtype == DType::f32) {
    const Layout l = layout_of(v);
    Output cast =
        c.add(op_names::kCast, {c.get(v, l)}, {{"dtype", std::string("f32")}}, "exponent");
    Value f = v;
    f.dtype = DType::f32;
    (l == Layout::kNhwc ? f.nhwc : f.plain) = cast;
    (l == Layout::kNhwc ? f.plain : f.nhwc) = Output{};
    v = f;
  }
  return float_in(c, i);
}

// Integer operands of one dtype stay integer (ONNX's wrap-around arithmetic); anything else
// computes in float.
void binary(Context& c, const std::string& op) {
  // Pow keeps an i32/i64 base integer whatever its exponent's type (the result is the base's).
  const bool integer =
      op == op_names::kPow
          ? c.in(0).dtype == DType::i32 || c.in(0).dtype == DType::i64
          : c.in(0).dtype != DType::f32 && c.in(0).dtype == c.in(1).dtype;
  Value& a = integer ? c.in(0) : float_operand(c, 0);
  Value& b = integer ? c.in(1) : float_operand(c, 1);
  const Layout l = elementwise_layout(c, {&a, &b});
  Output oa = elementwise_operand(c, a, l);
  Output ob = elementwise_operand(c, b, l);
  c.set_out(0, c.add(op, {oa, ob}), l);
}

// Max / Min of one or more inputs with NumPy broadcasting, folded pairwise into the engine's
// binary Maximum / Minimum.
void variadic_extremum(Context& c, const std::string& op) {
  if (c.num_inputs() == 0) c.fail("needs at least one input");
  std::vector<Value*> vs;
  for (int i = 0; i < c.num_inputs(); ++i) {
    Value& v = c.in(i);

    if (v.dtype != c.in(0).dtype)
      c.fail("input {} is {} but input 0 is {}: all inputs must have the same type", i,
             dtype_name(v.dtype), dtype_name(c.in(0).dtype));
    vs.push_back(&v);
  }
  if (vs.size() == 1) return c.set_out(0, *vs.front());
  const Layout l = elementwise_layout(c, vs);
  Output y = elementwise_operand(c, *vs.front(), l);
  for (size_t i = 1; i < vs.size(); ++i)
    y = c.add(op, {y, elementwise_operand(c, *vs[i], l)}, {}, i + 1 < vs.size() ? "partial" : "");
  c.set_out(0, y, l);
}

// Clip's bound from attribute (opset < 11) or constant input `index`.
float clip_bound(Context& c, const char* name, int index, float def) {
  if (c.opset < 11) return c.attr_float(name, def);
  if (!c.has_input(index)) return def;
  const Tensor& t = c.const_in(index, name);
  if (t.numel() != 1) c.fail("{} must be a scalar, got {}", name, shape_str(t.shape()));
  return to_floats(t)[0];
}

void clip(Context& c) {
  const float lo = clip_bound(c, "min", 1, -std::numeric_limits<float>::infinity());
  const float hi = clip_bound(c, "max", 2, std::numeric_limits<float>::infinity());
  if (c.in(0).dtype != DType::f32) {  // an integer tensor stays integer
    Value& x = c.in(0);
    if (std::isinf(lo) && std::isinf(hi)) return c.set_out(0, x);
    const Layout l = layout_of(x);
    const double min = std::isinf(lo) ? -3.4e38 : lo, max = std::isinf(hi) ? 3.4e38 : hi;
    return c.set_out(0, c.add(op_names::kClip, {c.get(x, l)}, {{"min", min}, {"max", max}}), l);
  }
  Value& x = float_in(c, 0);
  if (std::isinf(lo) && std::isinf(hi)) return c.set_out(0, x);
  if (lo == 0.0f && hi == 6.0f) return unary(c, op_names::kRelu6);
  if (lo == 0.0f && std::isinf(hi)) return unary(c, op_names::kRelu);
  // The Clip op's defaults (+-3.4e38) stand for "unbounded" on that side.
  const double min = std::isinf(lo) ? -3.4e38 : lo, max = std::isinf(hi) ? 3.4e38 : hi;
  unary(c, op_names::kClip, {{"min", min}, {"max", max}});
}

// Softmax over `axis` of a plain value: transposed to the last axis and back when needed.
Output softmax_axis(Context& c, Output x, int64_t axis, int64_t rank) {
  if (axis == rank - 1) return c.add(op_names::kSoftmax, {x});
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) perm[static_cast<size_t>(i)] = i;
  std::swap(perm[static_cast<size_t>(axis)], perm.back());
  Output t = c.add(op_names::kTranspose, {x}, {{"perm", perm}}, "to_last");
  Output s = c.add(op_names::kSoftmax, {t}, {}, "softmax");
  return c.add(op_names::kTranspose, {s}, {{"perm", perm}});
}

void softmax(Context& c) {
  Value& x = float_in(c, 0);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0) c.fail("input must have rank 1 or more");
  const int64_t axis = normalize_axis(c, c.attr_int("axis", c.opset < 13 ? 1 : -1), rank);
  if (c.opset >= 13) {
    // The channel axis of an NHWC-held value is its last axis.
    if (x.is_nhwc() && axis == 1)
      return c.set_out(0, c.add(op_names::kSoftmax, {c.nhwc(x)}), Layout::kNhwc);
    return c.set_out(0, softmax_axis(c, c.plain(x), axis, rank), Layout::kPlain);
  }
  // Before opset 13, Softmax normalises the input flattened to 2-D at `axis`.
  if (axis == rank - 1)
    return c.set_out(0, c.add(op_names::kSoftmax, {c.plain(x)}), Layout::kPlain);
  Output flat = c.add(op_names::kFlatten, {c.plain(x)}, {{"axis", axis}}, "flatten");
  Output s = c.add(op_names::kSoftmax, {flat}, {}, "softmax");
  c.set_out(0, c.add(op_names::kReshape, {s}, {{"shape", x.shape}}), Layout::kPlain);
}

// ReduceMean, ReduceMax, ReduceMin or ReduceSum (`op`, the engine's op of the same name): axes
// from the attribute, or from opset `axes_input_from` (18; ReduceSum 13) from an input read at
// plan time; none means all unless noop_with_empty_axes.
void reduce(Context& c, const std::string& op, int axes_input_from = 18) {
  Value& x = float_in(c, 0);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> axes = axes_arg(c, 1, axes_input_from);
  if (axes.empty() && c.attr_int("noop_with_empty_axes", 0) != 0) return c.set_out(0, x);
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  for (int64_t& a : axes) a = normalize_axis(c, a, rank);
  const bool keep = c.attr_int("keepdims", 1) != 0;
  if (x.is_nhwc()) {
    // The NHWC form works when the kept axes come out in the same order either way.
    const bool c_reduced = std::count(axes.begin(), axes.end(), 1) > 0;
    const bool hw_reduced =
        std::count(axes.begin(), axes.end(), 2) > 0 && std::count(axes.begin(), axes.end(), 3) > 0;
    if (keep || c_reduced || hw_reduced) {
      std::vector<int64_t> mapped;
      for (int64_t a : axes) mapped.push_back(kToNchw[static_cast<size_t>(a)]);
      std::sort(mapped.begin(), mapped.end());
      Output y = c.add(op, {c.nhwc(x)}, {{"axes", mapped}, {"keep_dims", keep}});
      return c.set_out(0, y, keep ? Layout::kNhwc : Layout::kPlain);
    }
  }
  c.set_out(0, c.add(op, {c.plain(x)}, {{"axes", axes}, {"keep_dims", keep}}), Layout::kPlain);
}

// Expand: x broadcast with the shape input (read at plan time) in both directions, as NumPy.
void expand(Context& c) {
  Value& x = float_in(c, 0);
  const std::vector<int64_t> dims = to_ints(c.const_in(1, "shape"));
  const std::optional<Shape> target = broadcast_shapes(x.shape, Shape(dims.begin(), dims.end()));
  if (!target)
    c.fail("shape [{}] does not broadcast with input {}", fmt::join(dims, ","), shape_str(x.shape));
  const Shape padded = pad_rank(x.shape, target->size());
  Output px = c.plain(x);
  if (padded != x.shape) px = c.add(op_names::kReshape, {px}, {{"shape", padded}}, "rank");
  c.set_out(0, c.add(op_names::kBroadcastTo, {px}, {{"shape", *target}}), Layout::kPlain);
}

// 1 / x, as exported LayerNormalization decompositions write it.
void reciprocal(Context& c) {
  Value& x = float_in(c, 0);
  const Layout l = layout_of(x);
  Output one = c.constant(Tensor::scalar_f32(1.0f), "one");
  c.set_out(0, c.add(op_names::kDiv, {one, c.get(x, l)}), l);
}

// Equal, Less, ...: integer operands of one dtype compare as integers, anything else in float
// (as binary); the result is a u8 0/1 mask, ONNX's bool.
void comparison(Context& c, const std::string& op) {
  const bool integer = c.in(0).dtype != DType::f32 && c.in(0).dtype == c.in(1).dtype;
  Value& a = integer ? c.in(0) : float_operand(c, 0);
  Value& b = integer ? c.in(1) : float_operand(c, 1);
  const Layout l = elementwise_layout(c, {&a, &b});
  c.set_out(0, c.add(op, {elementwise_operand(c, a, l), elementwise_operand(c, b, l)}), l);
}

Value& mask_in(Context& c, int i) {
  Value& v = c.in(i);
  if (v.dtype != DType::u8)
    c.fail("input {} is {}; expected a bool tensor", i, dtype_name(v.dtype));
  return v;
}

// And, Or, Xor on bool tensors.
void logic(Context& c, const std::string& op) {
  Value& a = mask_in(c, 0);
  Value& b = mask_in(c, 1);
  const Layout l = elementwise_layout(c, {&a, &b});
  c.set_out(0, c.add(op, {elementwise_operand(c, a, l), elementwise_operand(c, b, l)}), l);
}

void logical_not(Context& c) {
  Value& x = mask_in(c, 0);
  const Layout l = layout_of(x);
  c.set_out(0, c.add(op_names::kNot, {c.get(x, l)}), l);
}

void where(Context& c) {
  Value& condition = mask_in(c, 0);
  Value& x = c.in(1);
  Value& y = c.in(2);
  if (x.dtype != y.dtype)
    c.fail("X is {} but Y is {}; they must have one type", dtype_name(x.dtype),
           dtype_name(y.dtype));
  const Layout l = elementwise_layout(c, {&condition, &x, &y});
  c.set_out(0,
            c.add(op_names::kWhere, {elementwise_operand(c, condition, l),
                                     elementwise_operand(c, x, l), elementwise_operand(c, y, l)}),
            l);
}

void prelu(Context& c) {
  Value& x = float_in(c, 0);
  Value& slope = float_operand(c, 1);
  const Layout l = elementwise_layout(c, {&x, &slope});
  Output ox = elementwise_operand(c, x, l);
  Output os = elementwise_operand(c, slope, l);
  c.set_out(0, c.add(op_names::kPRelu, {ox, os}), l);
}

}  // namespace

void add_math_converters(ConverterMap& m) {
  m["Add"] = [](Context& c) { binary(c, op_names::kAdd); };
  m["Sub"] = [](Context& c) { binary(c, op_names::kSub); };
  m["Mul"] = [](Context& c) { binary(c, op_names::kMul); };
  m["Div"] = [](Context& c) { binary(c, op_names::kDiv); };
  m["Pow"] = [](Context& c) { binary(c, op_names::kPow); };
  m["Sqrt"] = [](Context& c) { unary(c, op_names::kSqrt); };
  m["Exp"] = [](Context& c) { unary(c, op_names::kExp); };
  m["Neg"] = [](Context& c) {  // integers wrap around (-INT_MIN is INT_MIN), as ONNX's do
    Value& x = c.in(0);
    const Layout l = layout_of(x);
    c.set_out(0, c.add(op_names::kNeg, {c.get(x, l)}), l);
  };
  m["Round"] = [](Context& c) { unary(c, op_names::kRound); };
  m["Max"] = [](Context& c) { variadic_extremum(c, op_names::kMaximum); };
  m["Min"] = [](Context& c) { variadic_extremum(c, op_names::kMinimum); };
  m["Relu"] = [](Context& c) { unary(c, op_names::kRelu); };
  m["Sigmoid"] = [](Context& c) { unary(c, op_names::kSigmoid); };
  m["Tanh"] = [](Context& c) { unary(c, op_names::kTanh); };
  m["HardSwish"] = [](Context& c) { unary(c, op_names::kHardSwish); };
  m["LeakyRelu"] = [](Context& c) {
    unary(c, op_names::kLeakyRelu, {{"alpha", static_cast<double>(c.attr_float("alpha", 0.01f))}});
  };
  m["HardSigmoid"] = [](Context& c) {
    unary(c, op_names::kHardSigmoid,
          {{"alpha", static_cast<double>(c.attr_float("alpha", 0.2f))},
           {"beta", static_cast<double>(c.attr_float("beta", 0.5f))}});
  };
  m["PRelu"] = prelu;
  m["Erf"] = [](Context& c) { unary(c, op_names::kErf); };
  m["Reciprocal"] = reciprocal;
  m["Equal"] = [](Context& c) { comparison(c, op_names::kEqual); };
  m["Less"] = [](Context& c) { comparison(c, op_names::kLess); };
  m["Greater"] = [](Context& c) { comparison(c, op_names::kGreater); };
  m["LessOrEqual"] = [](Context& c) { comparison(c, op_names::kLessOrEqual); };
  m["GreaterOrEqual"] = [](Context& c) { comparison(c, op_names::kGreaterOrEqual); };
  m["And"] = [](Context& c) { logic(c, op_names::kAnd); };
  m["Or"] = [](Context& c) { logic(c, op_names::kOr); };
  m["Xor"] = [](Context& c) { logic(c, op_names::kXor); };
  m["Not"] = logical_not;
  m["Where"] = where;
  m["Clip"] = clip;
  m["Softmax"] = softmax;
  m["ReduceMean"] = [](Context& c) { reduce(c, op_names::kReduceMean); };
  m["ReduceSum"] = [](Context& c) { reduce(c, op_names::kReduceSum, 13); };
  m["Expand"] = expand;
  m["ReduceMax"] = [](Context& c) { reduce(c, op_names::kReduceMax); };
  m["ReduceMin"] = [](Context& c) { reduce(c, op_names::kReduceMin); };
}

}  // namespace sf::onnx_import
