// Layout tracking: every ONNX value may be held as is and/or as the NHWC form of a 4-D NCHW
// value. Conversions are added on demand and cached on the value, and become a Reshape
// (no data movement) when the channel or spatial extent is 1.
#include <algorithm>

#include "onnx/context.h"
#include "ops/op_names.h"
#include "ops/ops.h"

namespace sf::onnx_import {

Tensor permute(const Tensor& t, const std::vector<int64_t>& perm) {
  return evaluate_reference(op_names::kTranspose, {t}, {{"perm", perm}});
}

Shape pad_rank(const Shape& shape, size_t rank) {
  Shape out(rank > shape.size() ? rank - shape.size() : 0, 1);
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

namespace {

// A Reshape whose batch dimension follows the input when the graph is re-inferred.
Output reshape_keep_batch(Context& c, Output x, Shape shape, const std::string& suffix) {
  if (!shape.empty() && num_elements(shape) > 0) shape[0] = -1;
  return c.add(op_names::kReshape, {x}, {{"shape", shape}}, suffix);
}

// True when moving the channel axis of a 4-D NCHW shape needs no data movement.
bool cheap_move(const Shape& nchw) {
  return nchw.size() == 4 && (nchw[1] == 1 || nchw[2] * nchw[3] == 1);
}

}  // namespace

Output Context::plain(Value& v) {
  if (v.plain.valid()) return v.plain;
  if (v.is_const()) {
    v.plain = constant(*v.constant);
  } else {
    SF_CHECK(v.nhwc.valid(), "value has no form");
    v.plain = cheap_move(v.shape)
                  ? reshape_keep_batch(*this, v.nhwc, v.shape, "to_nchw")
                  : add(op_names::kTranspose, {v.nhwc}, {{"perm", kToNchw}}, "to_nchw");
  }
  return v.plain;
}

Output Context::nhwc(Value& v) {
  if (v.nhwc.valid()) return v.nhwc;
  if (v.shape.size() != 4) fail("expected a 4-D (NCHW) input, got {}", shape_str(v.shape));
  if (v.is_const()) {
    v.nhwc = constant(permute(*v.constant, kToNhwc), "const_nhwc");
  } else {
    const Shape& s = v.shape;
    v.nhwc = cheap_move(s) ? reshape_keep_batch(*this, v.plain, {s[0], s[2], s[3], s[1]}, "to_nhwc")
                           : add(op_names::kTranspose, {v.plain}, {{"perm", kToNhwc}}, "to_nhwc");
  }
  return v.nhwc;
}

Layout elementwise_layout(Context& c, const std::vector<Value*>& vs) {
  (void)c;
  size_t rank = 0;
  bool any_nhwc = false;
  for (const Value* v : vs) {
    rank = std::max(rank, v->shape.size());
    any_nhwc = any_nhwc || v->is_nhwc();
  }
  if (rank != 4 || !any_nhwc) return Layout::kPlain;
  // Counts the transposes each choice needs; constants and cheap moves are free.
  int to_nhwc = 0, to_plain = 0;
  for (const Value* v : vs) {
    if (v->is_const()) continue;
    const Shape s = pad_rank(v->shape, 4);
    if (!v->is_nhwc() && !cheap_move(s)) ++to_nhwc;
    if (!v->plain.valid() && !cheap_move(s)) ++to_plain;
  }
  return to_nhwc <= to_plain ? Layout::kNhwc : Layout::kPlain;
}

Output elementwise_operand(Context& c, Value& v, Layout layout) {
  if (layout == Layout::kPlain || v.shape.size() == 4) return c.get(v, layout);
  const Shape s4 = pad_rank(v.shape, 4);
  if (v.is_const()) return c.constant(permute(v.constant->reshaped(s4), kToNhwc), "const_nhwc");
  Value padded;
  padded.shape = s4;
  padded.dtype = v.dtype;
  padded.plain = c.add(op_names::kReshape, {c.plain(v)}, {{"shape", s4}}, "rank4");
  return c.nhwc(padded);
}

}  // namespace sf::onnx_import
