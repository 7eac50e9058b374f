// Ops of binarized training (declared in ops/binary_ops.h).
#include "ops/binary_ops.h"

#include "core/activation.h"
#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/register.h"

namespace sf {

namespace {

std::vector<TensorType> infer_binarize_weights(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "w");
  if (ctx.shape(0).empty()) ctx.fail("w must have rank 1 or more (channels last), got a scalar");
  const std::string mode = ctx.attrs().get_string("mode");
  if (mode != "binary" && mode != "ternary")
    ctx.fail("mode '{}' must be binary or ternary", mode);
  return {ctx.input(0)};
}

std::vector<TensorType> infer_binarize_activation(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  return {ctx.input(0)};
}

std::vector<TensorType> infer_straight_through_grad(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "dy");
  if (ctx.input(0) != ctx.input(1))
    ctx.fail("dy {} vs x {}: types differ", type_str(ctx.input(0)), type_str(ctx.input(1)));
  return {ctx.input(0)};
}

// The straight-through gradient of both ops: dy where |x| <= 1.
std::vector<Output> straight_through(GradContext& ctx) {
  if (!ctx.grad().valid()) return {Output{}};
  return {ctx.graph.add(op_names::kStraightThroughGrad, {ctx.grad(), ctx.input(0)}, {},
                        ctx.name("dx"))};
}

TensorType sign_bits_of(const Shape& values) {
  Shape bits = values;
  bits.back() = sign_bit_elements(bits.back());
  return TensorType{DType::i32, bits};
}

std::vector<TensorType> infer_sign_bits(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  if (ctx.shape(0).empty()) ctx.fail("x must have rank 1 or more (channels last), got a scalar");
  return {sign_bits_of(ctx.shape(0))};
}

std::vector<TensorType> infer_max_pool_sign_bits(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  const OpDef& pool = OpRegistry::global().get(op_names::kMaxPool, "node '" + ctx.node().name + "'");
  return {sign_bits_of(pool.infer(ctx)[0].shape)};
}

// That bits [.., E] (E = `elements`) stand for `values` channels.
void check_bits(const InferContext& ctx, int64_t elements, int64_t values) {
  activation_of(ctx.node());  // throws naming the node when the name is unknown
  ctx.expect_dtype(0, DType::i32, "bits");
  if (elements != sign_bit_elements(values))
    ctx.fail("bits {} hold {} elements per row, {} channels need {}", shape_str(ctx.shape(0)),
             elements, values, sign_bit_elements(values));
}

// The bias of an output `out`.
void check_bias(const InferContext& ctx, const Shape& out) {
  const Shape& bias = ctx.shape(2);
  if (bias.size() != 1 || bias[0] != out.back())
    ctx.fail("bias {} must be [{}] (the output's last dimension)", shape_str(bias), out.back());
}

std::vector<TensorType> infer_xnor_conv2d(const InferContext& ctx) {
  ctx.expect_rank(0, 4, "x");
  ctx.expect_rank(1, 4, "filter");
  Shape x = ctx.shape(0);
  check_bits(ctx, x[3], ctx.shape(1)[2]);
  x[3] = ctx.shape(1)[2];
  const std::vector<TensorType> values = {TensorType{DType::f32, x}, ctx.input(1)};
  const InferContext conv_ctx(ctx.node(), values);
  std::vector<TensorType> out =
      OpRegistry::global().get(op_names::kConv2D, "node '" + ctx.node().name + "'").infer(conv_ctx);
  check_bias(ctx, out[0].shape);
  return out;
}

std::vector<TensorType> infer_xnor_matmul(const InferContext& ctx) {
  const Shape& a = ctx.shape(0);
  if (a.size() < 2) ctx.fail("a must have rank 2 or more (rows first), got {}", shape_str(a));
  ctx.expect_rank(1, 2, "b");
  ctx.expect_dtype(1, DType::f32, "b");
  const Shape out = {a[0], ctx.shape(1)[1]};
  check_bits(ctx, a[0] == 0 ? 0 : num_elements(a) / a[0], ctx.shape(1)[0]);
  check_bias(ctx, out);
  return {TensorType{DType::f32, out}};
}

}  // namespace

void register_binary_ops(OpRegistry& r) {
  // Copies: adding to the registry may move its entries.
  const OpDef conv = r.get(op_names::kConv2D, "binary ops");
  std::vector<AttrSpec> conv_attrs = conv.attrs;
  conv_attrs.push_back({"activation", AttrKind::String, AttrValue{activation_name(Activation::None)}});
  r.add(OpDef{.name = op_names::kSignBits,
              .inputs = {"x"},
              .infer = infer_sign_bits,
              .grad = inference_only_gradient});
  r.add(OpDef{.name = op_names::kMaxPoolSignBits,
              .inputs = {"x"},
              .attrs = r.get(op_names::kMaxPool, "binary ops").attrs,
              .infer = infer_max_pool_sign_bits,
              .grad = inference_only_gradient});
  r.add(OpDef{.name = op_names::kXnorConv2D,
              .inputs = {"x", "filter", "bias"},
              .attrs = conv_attrs,
              .infer = infer_xnor_conv2d,
              .grad = inference_only_gradient,
              .weights = conv.weights,
              .flops = conv.flops});
  r.add(OpDef{.name = op_names::kXnorMatMul,
              .inputs = {"a", "b", "bias"},
              .attrs = {{"activation", AttrKind::String, AttrValue{activation_name(Activation::None)}}},
              .infer = infer_xnor_matmul,
              .grad = inference_only_gradient,
              .weights = {{.input = 1, .channel_axis = -1}},
              .flops = [](const Node& node, const std::vector<Shape>& inputs) {
                return 2.0 * static_cast<double>(num_elements(node.outputs[0].shape)) *
                       static_cast<double>(inputs[1][0]);
              }});
  r.add(OpDef{.name = op_names::kBinarizeWeights,
              .inputs = {"w"},
              .attrs = {{"mode", AttrKind::String, AttrValue{std::string("binary")}}},
              .infer = infer_binarize_weights,
              .grad = straight_through});
  r.add(OpDef{.name = op_names::kBinarizeActivation,
              .inputs = {"x"},
              .infer = infer_binarize_activation,
              .grad = straight_through});
  r.add(OpDef{.name = op_names::kStraightThroughGrad,
              .inputs = {"dy", "x"},
              .infer = infer_straight_through_grad});
}

namespace ops {

Output binarize_weights(Graph& g, Output w, bool ternary, const std::string& name) {
  return g.add(op_names::kBinarizeWeights, {w},
               {{"mode", std::string(ternary ? "ternary" : "binary")}}, name);
}

Output binarize_activation(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kBinarizeActivation, {x}, {}, name);
}

}  // namespace ops

}  // namespace sf
