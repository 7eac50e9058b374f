// Import-time constant folding for the small int64/float subgraphs that compute shapes
// (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, ...): every shape is static once the
// input shapes are fixed, so these never need kernels at run time. Ops that compute run here
// through their reference kernels, so a folded value is exactly what the graph would compute.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/saturating_cast.h"
#include "onnx/context.h"
#include "onnx/shape_args.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "runtime/session.h"

namespace sf::onnx_import {

namespace {

template <typename T>
std::vector<T> elements(const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype()) {
      case DType::f32:
        out[i] = saturating_cast<T>(static_cast<const float*>(t.raw())[i]);
        break;
      case DType::i32:
        out[i] = static_cast<T>(static_cast<const int32_t*>(t.raw())[i]);
        break;
      case DType::i64:
        out[i] = static_cast<T>(static_cast<const int64_t*>(t.raw())[i]);
        break;
      case DType::u8:
        out[i] = static_cast<T>(static_cast<const uint8_t*>(t.raw())[i]);
        break;
      case DType::i8:
        out[i] = static_cast<T>(static_cast<const int8_t*>(t.raw())[i]);
        break;
    }
  }
  return out;
}

// `value` (one element) repeated over `shape`.
Tensor filled(const Tensor& value, const Shape& shape) {
  Tensor r(value.dtype(), shape);
  const size_t e = dtype_size(value.dtype());
  for (int64_t i = 0; i < r.numel(); ++i)
    std::memcpy(static_cast<char*>(r.raw()) + static_cast<size_t>(i) * e, value.raw(), e);
  return r;
}

}  // namespace

std::vector<int64_t> to_ints(const Tensor& t) { return elements<int64_t>(t); }
std::vector<float> to_floats(const Tensor& t) { return elements<float>(t); }

Tensor evaluate_reference(const std::string& op, const std::vector<Tensor>& inputs, Attrs attrs) {
  Graph g;
  std::vector<Output> xs;
  for (const Tensor& t : inputs) xs.push_back(ops::constant(g, t));
  const Output y = g.add(op, xs, std::move(attrs));
  Session session(g, SessionOptions{.kernel_impl = "reference"});
  return session.run({}, {y})[0].clone();
}

Tensor cast_tensor(const Tensor& t, DType dtype) {
  return evaluate_reference(op_names::kCast, {t}, {{"dtype", std::string(dtype_name(dtype))}});
}

bool try_fold(Context& c) {
  const std::string& op = c.op();
  if (op == "Shape") {
    // Static once input shapes are fixed, so Shape folds even for runtime values.
    const Shape& s = c.in(0).shape;
    const int64_t rank = static_cast<int64_t>(s.size());
    int64_t start = c.attr_int("start", 0), end = c.attr_int("end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    std::vector<int64_t> dims(s.begin() + start, s.begin() + end);
    c.set_const(0, Tensor::from_vector<int64_t>({end - start}, dims));
    return true;
  }
  if (op == "Size") {
    c.set_const(0, Tensor::from_vector<int64_t>({}, {num_elements(c.in(0).shape)}));
    return true;
  }
  for (int i = 0; i < c.num_inputs(); ++i)
    if (c.has_input(i) && !c.in(i).is_const()) return false;
  if (op == "ConstantOfShape") {
    Tensor value = Tensor::scalar_f32(0.0f);
    if (const onnx::AttributeProto* a = c.attr("value"))
      value = tensor_from_proto(a->t(), c.path + ": ConstantOfShape value");
    c.set_const(0, filled(value, to_ints(c.const_in(0, "shape"))));
    return true;
  }
  if (c.num_inputs() == 0 || !c.has_input(0)) return false;
  const Tensor& x = *c.in(0).constant;
  if (op == "Identity" || op == "Dropout") {
    if (c.node->output_size() > 1) return false;  // Dropout's mask: its converter
    c.set_const(0, x);
  } else if (op == "Cast" && c.attr_int("to", 1) != onnx::TensorProto::BOOL) {
    c.set_const(0, cast_tensor(x, dtype_from_onnx(static_cast<int>(c.attr_int("to", 1)),
                                                  c.path + ": Cast")));
  } else if (op == "Gather") {
    c.set_const(0, evaluate_reference(op_names::kGather, {x, c.const_in(1, "indices")},
                                      {{"axis", c.attr_int("axis", 0)}}));
  } else if (op == "Slice") {
    c.set_const(0, evaluate_reference(op_names::kStridedSlice, {x}, strided_slice_attrs(c)));
  } else if (op == "Unsqueeze") {
    c.set_const(0, x.clone().reshaped(unsqueeze_shape(c, x.shape())));
  } else if (op == "Squeeze") {
    c.set_const(0, x.clone().reshaped(squeeze_shape(c, x.shape())));
  } else if (op == "Reshape") {
    c.set_const(0, x.clone().reshaped(reshape_shape(c, x.shape())));
  } else if (op == "Flatten") {
    c.set_const(0, x.clone().reshaped(flatten_shape(c, x.shape())));
  } else if (op == "Concat") {
    std::vector<Tensor> parts;
    for (int i = 0; i < c.num_inputs(); ++i) parts.push_back(*c.in(i).constant);
    c.set_const(0, evaluate_reference(op_names::kConcat, parts, {{"axis", c.attr_int("axis", 0)}}));
  } else if (op == "Transpose") {
    c.set_const(0, permute(x, transpose_perm_of(c, x.shape().size())));
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    c.set_const(0, evaluate_reference(op, {x, *c.in(1).constant}));
  } else if (op == "Neg") {
    c.set_const(0, evaluate_reference(op_names::kNeg, {x}));
  } else {
    return false;
  }
  return true;
}

}  // namespace sf::onnx_import
