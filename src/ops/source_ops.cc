// Placeholder, Variable and Const: nodes whose values come from outside the graph's kernels
// (feeds, the variable store, an attribute). The session binds them; they have no kernels.
#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

std::vector<TensorType> declared_type(const InferContext& ctx) {
  Shape shape = ctx.attrs().get_ints("shape");
  for (int64_t d : shape)
    if (d < 0) ctx.fail("shape {} has a negative dimension", shape_str(shape));
  return {TensorType{parse_dtype(ctx.attrs().get_string("dtype")), shape}};
}

}  // namespace

void register_source_ops(OpRegistry& r) {
  r.add(OpDef{.name = op_names::kPlaceholder,
              .attrs = {{"dtype", AttrKind::String, AttrValue{std::string("f32")}},
                        {"shape", AttrKind::Ints, std::nullopt}},
              .infer = declared_type});
  r.add(OpDef{.name = op_names::kVariable,
              .attrs = {{"dtype", AttrKind::String, AttrValue{std::string("f32")}},
                        {"shape", AttrKind::Ints, std::nullopt}},
              .infer = declared_type});
  r.add(OpDef{.name = op_names::kConst,
              .attrs = {{"value", AttrKind::Tensor, std::nullopt}},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                const Tensor& v = ctx.attrs().get_tensor("value");
                return {TensorType{v.dtype(), v.shape()}};
              }});
  // A tensor from another device: `edge` names the cross-device edge (its rendezvous key),
  // dtype and shape are the producer's, checked again when the tensor arrives.
  r.add(OpDef{.name = op_names::kRecv,
              .attrs = {{"edge", AttrKind::String, std::nullopt},
                        {"dtype", AttrKind::String, AttrValue{std::string("f32")}},
                        {"shape", AttrKind::Ints, std::nullopt}},
              .infer = declared_type});
}

namespace ops {

Output placeholder(Graph& g, DType dtype, Shape shape, const std::string& name) {
  return g.add(op_names::kPlaceholder, {},
               {{"dtype", std::string(dtype_name(dtype))}, {"shape", shape}}, name);
}

Output variable(Graph& g, DType dtype, Shape shape, const std::string& name) {
  return g.add(op_names::kVariable, {},
               {{"dtype", std::string(dtype_name(dtype))}, {"shape", shape}}, name);
}

Output constant(Graph& g, Tensor value, const std::string& name) {
  return g.add(op_names::kConst, {}, {{"value", std::move(value)}}, name);
}

Output scalar(Graph& g, float value, const std::string& name) {
  return constant(g, Tensor::scalar_f32(value), name);
}

}  // namespace ops
}  // namespace sf
