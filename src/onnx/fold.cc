// Import-time constant folding for the small int64/float subgraphs that compute shapes
// (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, ...): every shape is static once the
// input shapes are fixed, so these never need kernels.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "onnx/context.h"
#include "onnx/shape_args.h"
#include "ops/broadcast.h"
#include "ops/layout_geometry.h"

namespace sf::onnx_import {

namespace {

template <typename T>
std::vector<T> elements(const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype()) {
      case DType::f32:
        out[i] = static_cast<T>(static_cast<const float*>(t.raw())[i]);
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

template <typename T>
Tensor from_values(DType dtype, const Shape& shape, const std::vector<T>& v) {
  Tensor t(dtype, shape);
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::f32:
        static_cast<float*>(t.raw())[i] = static_cast<float>(v[i]);
        break;
      case DType::i32:
        static_cast<int32_t*>(t.raw())[i] = static_cast<int32_t>(v[i]);
        break;
      case DType::i64:
        static_cast<int64_t*>(t.raw())[i] = static_cast<int64_t>(v[i]);
        break;
      case DType::u8:
        static_cast<uint8_t*>(t.raw())[i] = static_cast<uint8_t>(v[i]);
        break;
      case DType::i8:
        static_cast<int8_t*>(t.raw())[i] = static_cast<int8_t>(v[i]);
        break;
    }
  }
  return t;
}

// Copies element `from` of `src` to element `to` of `dst` (same dtype).
inline void copy_elem(const Tensor& src, int64_t from, Tensor& dst, int64_t to) {
  const size_t e = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw()) + static_cast<size_t>(to) * e,
              static_cast<const char*>(src.raw()) + static_cast<size_t>(from) * e, e);
}

Tensor gather(Context& c, const Tensor& data, const Tensor& indices_t, int64_t axis) {
  const Shape& d = data.shape();
  const int64_t rank = static_cast<int64_t>(d.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) c.fail("axis out of range for data {}", shape_str(d));
  const size_t a = static_cast<size_t>(axis);
  Shape out(d.begin(), d.begin() + axis);
  out.insert(out.end(), indices_t.shape().begin(), indices_t.shape().end());
  out.insert(out.end(), d.begin() + axis + 1, d.end());
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < a; ++i) outer *= d[i];
  for (size_t i = a + 1; i < d.size(); ++i) inner *= d[i];
  const std::vector<int64_t> indices = to_ints(indices_t);
  Tensor r(data.dtype(), out);
  int64_t o = 0;
  for (int64_t i = 0; i < outer; ++i)
    for (int64_t index : indices) {
      if (index < 0) index += d[a];
      if (index < 0 || index >= d[a]) c.fail("index out of range for data {}", shape_str(d));
      for (int64_t k = 0; k < inner; ++k) copy_elem(data, (i * d[a] + index) * inner + k, r, o++);
    }
  return r;
}

Tensor slice(Context& c, const Tensor& data, const std::vector<int64_t>& starts,
             const std::vector<int64_t>& ends, const std::vector<int64_t>& axes,
             const std::vector<int64_t>& steps) {
  std::vector<SliceAxis> ranges;
  std::string err = slice_ranges(data.shape(), starts, ends, axes, steps, &ranges);
  if (!err.empty()) c.fail("{}", err);
  Shape out;
  for (const SliceAxis& s : ranges) out.push_back(s.count);
  Tensor r(data.dtype(), out);
  const size_t rank = out.size();
  std::vector<int64_t> strides(rank, 1);
  for (size_t i = rank; i-- > 1;) strides[i - 1] = strides[i] * data.shape()[i];
  std::vector<int64_t> index(rank, 0);
  for (int64_t o = 0; o < r.numel(); ++o) {
    int64_t from = 0;
    for (size_t i = 0; i < rank; ++i)
      from += (ranges[i].start + index[i] * ranges[i].step) * strides[i];
    copy_elem(data, from, r, o);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < out[d]) break;
      index[d] = 0;
    }
  }
  return r;
}

Tensor concat(Context& c, const std::vector<const Tensor*>& ts, int64_t axis) {
  Shape out = ts[0]->shape();
  const int64_t rank = static_cast<int64_t>(out.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) c.fail("axis out of range for {}", shape_str(out));
  const size_t a = static_cast<size_t>(axis);
  out[a] = 0;
  for (const Tensor* t : ts) {
    if (t->dtype() != ts[0]->dtype() || t->shape().size() != out.size())
      c.fail("inputs differ in type or rank");
    out[a] += t->shape()[a];
  }
  int64_t outer = 1;
  for (size_t i = 0; i < a; ++i) outer *= out[i];
  Tensor r(ts[0]->dtype(), out);
  int64_t o = 0;
  for (int64_t i = 0; i < outer; ++i)
    for (const Tensor* t : ts) {
      const int64_t block = t->numel() / std::max<int64_t>(outer, 1);
      for (int64_t k = 0; k < block; ++k) copy_elem(*t, i * block + k, r, o++);
    }
  return r;
}

}  // namespace

std::vector<int64_t> to_ints(const Tensor& t) { return elements<int64_t>(t); }
std::vector<float> to_floats(const Tensor& t) { return elements<float>(t); }

Tensor cast_tensor(const Tensor& t, DType dtype) {
  if (dtype == DType::f32) return from_values(dtype, t.shape(), elements<double>(t));
  return from_values(dtype, t.shape(), elements<int64_t>(t));
}

Tensor fold_binary(const std::string& op, const Tensor& a, const Tensor& b) {
  std::optional<Shape> out = broadcast_shapes(a.shape(), b.shape());
  if (!out)
    fail("{}: shapes {} and {} do not broadcast", op, shape_str(a.shape()), shape_str(b.shape()));
  const bool is_float = a.dtype() == DType::f32;
  std::vector<double> r(static_cast<size_t>(num_elements(*out)));
  const std::vector<double> x = elements<double>(a), y = elements<double>(b);
  for_each_broadcast(*out, a.shape(), b.shape(), [&](int64_t o, int64_t i, int64_t j) {
    const double p = x[static_cast<size_t>(i)], q = y[static_cast<size_t>(j)];
    double v = 0;
    if (op == "Add")
      v = p + q;
    else if (op == "Sub")
      v = p - q;
    else if (op == "Mul")
      v = p * q;
    else if (op == "Div")
      v = is_float ? p / q : (q == 0 ? 0 : std::trunc(p / q));
    else if (op == "Pow")
      v = std::pow(p, q);
    r[static_cast<size_t>(o)] = v;
  });
  return from_values(a.dtype(), *out, r);
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
    Shape shape = to_ints(c.const_in(0, "shape"));
    Tensor value = Tensor::scalar_f32(0.0f);
    if (const onnx::AttributeProto* a = c.attr("value"))
      value = tensor_from_proto(a->t(), c.path + ": ConstantOfShape value");
    Tensor r(value.dtype(), shape);
    for (int64_t i = 0; i < r.numel(); ++i) copy_elem(value, 0, r, i);
    c.set_const(0, r);
    return true;
  }
  if (c.num_inputs() == 0 || !c.has_input(0)) return false;
  const Tensor& x = *c.in(0).constant;
  if (op == "Identity" || op == "Dropout") {
    if (c.node->output_size() > 1) return false;
    c.set_const(0, x);
  } else if (op == "Cast") {
    c.set_const(0, cast_tensor(x, dtype_from_onnx(static_cast<int>(c.attr_int("to", 1)),
                                                  c.path + ": Cast")));
  } else if (op == "Gather") {
    c.set_const(0, gather(c, x, c.const_in(1, "indices"), c.attr_int("axis", 0)));
  } else if (op == "Slice") {
    SliceArgs s = slice_args(c);
    c.set_const(0, slice(c, x, s.starts, s.ends, s.axes, s.steps));
  } else if (op == "Unsqueeze") {
    c.set_const(0, x.clone().reshaped(unsqueeze_shape(c, x.shape())));
  } else if (op == "Squeeze") {
    c.set_const(0, x.clone().reshaped(squeeze_shape(c, x.shape())));
  } else if (op == "Reshape") {
    c.set_const(0, x.clone().reshaped(reshape_shape(c, x.shape())));
  } else if (op == "Flatten") {
    c.set_const(0, x.clone().reshaped(flatten_shape(c, x.shape())));
  } else if (op == "Concat") {
    std::vector<const Tensor*> ts;
    for (int i = 0; i < c.num_inputs(); ++i) ts.push_back(&*c.in(i).constant);
    c.set_const(0, concat(c, ts, c.attr_int("axis", 0)));
  } else if (op == "Transpose") {
    c.set_const(0, permute(x, transpose_perm_of(c, x.shape().size())));
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    const Tensor& y = *c.in(1).constant;
    if (x.dtype() != y.dtype()) c.fail("input types differ");
    c.set_const(0, fold_binary(op, x, y));
  } else {
    return false;
  }
  return true;
}

}  // namespace sf::onnx_import
