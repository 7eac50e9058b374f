// Context: inputs, outputs, attributes and node naming for the converter of one ONNX node.
#include "onnx/context.h"

#include "ops/ops.h"

namespace sf::onnx_import {

std::string Context::node_name() const {
  if (!node) return label;
  if (!node->name().empty()) return node->name();
  return node->output_size() > 0 ? node->output(0) : node->op_type();
}

Value& Context::in(int i) {
  if (!has_input(i)) fail("input {} is missing", i);
  auto it = values.find(node->input(i));
  if (it == values.end()) fail("input '{}' is not defined before this node", node->input(i));
  return it->second;
}

const Tensor& Context::const_in(int i, const char* what) {
  Value& v = in(i);
  if (!v.is_const()) unsupported("{} (input '{}') must be a constant", what, node->input(i));
  return *v.constant;
}

void Context::set_out(int i, Value v) {
  if (i >= node->output_size() || node->output(i).empty()) return;
  values[node->output(i)] = std::move(v);
}

void Context::set_out(int i, Output out, Layout layout) {
  Value v;
  v.dtype = g.type(out).dtype;
  v.shape = onnx_shape(out, layout);
  (layout == Layout::kNhwc ? v.nhwc : v.plain) = out;
  set_out(i, std::move(v));
}

void Context::set_const(int i, Tensor t) {
  Value v;
  v.dtype = t.dtype();
  v.shape = t.shape();
  v.constant = std::move(t);
  set_out(i, std::move(v));
}

Shape Context::onnx_shape(Output out, Layout layout) const {
  const Shape& s = g.type(out).shape;
  if (layout == Layout::kPlain) return s;
  SF_CHECK(s.size() == 4, "NHWC value of rank {}", s.size());
  return {s[0], s[3], s[1], s[2]};
}

const onnx::AttributeProto* Context::attr(const std::string& name) const {
  for (const onnx::AttributeProto& a : node->attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t Context::attr_int(const std::string& name, int64_t def) const {
  const onnx::AttributeProto* a = attr(name);
  return a ? a->i() : def;
}

float Context::attr_float(const std::string& name, float def) const {
  const onnx::AttributeProto* a = attr(name);
  return a ? a->f() : def;
}

std::string Context::attr_string(const std::string& name, const std::string& def) const {
  const onnx::AttributeProto* a = attr(name);
  return a ? a->s() : def;
}

std::vector<int64_t> Context::attr_ints(const std::string& name, std::vector<int64_t> def) const {
  const onnx::AttributeProto* a = attr(name);
  if (!a) return def;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::string Context::fresh(const std::string& suffix) {
  const std::string base = suffix.empty() ? node_name() : node_name() + "/" + suffix;
  std::string name = base;
  for (int i = 1; g.find(name) >= 0 || reserved_names.count(name); ++i)
    name = fmt::format("{}_{}", base, i);
  return name;
}

Output Context::add(const std::string& op_name, std::vector<Output> inputs, Attrs attrs,
                    const std::string& suffix) {
  return g.add(op_name, std::move(inputs), std::move(attrs), fresh(suffix));
}

Output Context::constant(Tensor t, const std::string& suffix) {
  return ops::constant(g, std::move(t), fresh(suffix));
}

}  // namespace sf::onnx_import
