// Fused inference ops made by the freeze passes: a conv or matmul, its bias and an optional
// activation as one node, so kernels can apply bias and activation while the output is hot.
// Their shape functions defer to Conv2D's and MatMul's, so the shape logic lives once.
// FusedConv2DAdd also adds a tensor of the output's shape before the activation: a residual
// connection, or the partial sum of a conv whose input channels were split (execution passes).
// FusedBatchMatMul (ops/execution_ops.h) is a BatchMatMul and its bias, and FusedAddN an AddN
// and its activation, made by the execution passes alone.
#include <algorithm>

#include "graph/op_registry.h"
#include "ops/conv_geometry.h"
#include "ops/execution_ops.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

std::vector<AttrSpec> with_activation(std::vector<AttrSpec> attrs) {
  attrs.push_back({"activation", AttrKind::String, AttrValue{activation_name(Activation::None)}});
  return attrs;
}

std::vector<AttrSpec> with_alpha(std::vector<AttrSpec> attrs) {
  attrs.push_back({"alpha", AttrKind::Float, AttrValue{1.0}});
  return attrs;
}

InferFn fused_infer(const std::string& base_op) {
  return [base_op](const InferContext& ctx) -> std::vector<TensorType> {
    activation_of(ctx.node());  // throws naming the node when the name is unknown
    const OpDef& base = OpRegistry::global().get(base_op, "node '" + ctx.node().name + "'");
    std::vector<TensorType> two_inputs = {ctx.input(0), ctx.input(1)};
    InferContext base_ctx(ctx.node(), two_inputs);
    std::vector<TensorType> out = base.infer(base_ctx);
    const Shape& bias = ctx.shape(2);
    if (bias.size() != 1 || bias[0] != out[0].shape.back())
      ctx.fail("bias {} must be [{}] (the output's last dimension)", shape_str(bias),
               out[0].shape.back());
    if (ctx.num_inputs() == 4 && (ctx.shape(3) != out[0].shape || ctx.input(3).dtype != DType::f32))
      ctx.fail("addend {} must be f32 of the output's shape {}", shape_str(ctx.shape(3)),
               shape_str(out[0].shape));
    return out;
  };
}

// The pooled shape of a conv's output y by the node's pool_ attributes: the windows must tile y
// (each activation in one window) and have at most kNoWindowArgmax positions.
Shape pooled_conv_output(const InferContext& ctx, const Shape& y) {
  Window2D g;
  const std::string err = prefixed_pool_window(ctx.attrs(), y, &g);
  if (!err.empty()) ctx.fail("pooling the conv's output {}: {}", shape_str(y), err);
  if (!windows_tile(g.h) || !windows_tile(g.w) || g.h.k * g.w.k > kNoWindowArgmax)
    ctx.fail(
        "the {}x{} pool of the conv's output {} must tile it, in at most {} positions a "
        "window",
        g.h.k, g.w.k, shape_str(y), int{kNoWindowArgmax});
  return {y[0], g.h.out, g.w.out, y[3]};
}

// FusedConv2D's output, then pooled, and the pool's argmaxes.
std::vector<TensorType> infer_conv_max_pool(const InferContext& ctx) {
  const Shape pooled = pooled_conv_output(ctx, fused_infer(op_names::kConv2D)(ctx)[0].shape);
  return {TensorType{DType::f32, pooled}, TensorType{DType::u8, pooled}};
}

// The filter and bias gradients of FusedConv2DMaxPool from x, the gradient of its pooled output
// and its argmaxes: [filter_shape] and [filter_shape[3]].
std::vector<TensorType> infer_conv_max_pool_grad(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  ctx.expect_dtype(1, DType::f32, "dy");
  ctx.expect_dtype(2, DType::u8, "argmax");
  ctx.expect_rank(0, 4, "x");
  const Shape w = ctx.attrs().get_ints("filter_shape");
  if (w.size() != 4 || std::any_of(w.begin(), w.end(), [](int64_t d) { return d < 0; }))
    ctx.fail("filter_shape {} must be 4 dimensions, none negative", shape_str(w));
  const OpDef& conv = OpRegistry::global().get(op_names::kConv2D, "node '" + ctx.node().name + "'");
  const std::vector<TensorType> x_and_w = {ctx.input(0), TensorType{DType::f32, w}};
  const Shape pooled =
      pooled_conv_output(ctx, conv.infer(InferContext(ctx.node(), x_and_w))[0].shape);
  if (ctx.shape(1) != pooled)
    ctx.fail("dy {} does not match the pooled conv output {}", shape_str(ctx.shape(1)),
             shape_str(pooled));
  if (ctx.shape(2) != pooled)
    ctx.fail("argmax {} does not match dy {}", shape_str(ctx.shape(2)), shape_str(pooled));
  return {TensorType{DType::f32, w}, TensorType{DType::f32, {w[3]}}};
}

// The pool_ attributes of an op that pools its own output (ops/conv_geometry.h).
std::vector<AttrSpec> with_pool_window(std::vector<AttrSpec> attrs) {
  attrs.push_back({prefixed_pool_attr("ksize"), AttrKind::Ints, std::nullopt});
  attrs.push_back({prefixed_pool_attr("strides"), AttrKind::Ints, std::nullopt});
  attrs.push_back({prefixed_pool_attr("padding"), AttrKind::String, std::nullopt});
  attrs.push_back({prefixed_pool_attr("pads"), AttrKind::Ints, std::nullopt});
  return attrs;
}

}  // namespace

void register_fused_ops(OpRegistry& r) {
  // Copies: adding to the registry may move its entries. The fused ops read their weights as the
  // base op does and count the base op's FLOPs (bias and activation are not counted).
  const OpDef conv = r.get(op_names::kConv2D, "fused ops");
  const OpDef matmul = r.get(op_names::kMatMul, "fused ops");
  const OpDef batch_matmul = r.get(op_names::kBatchMatMul, "fused ops");
  const OpDef add_n = r.get(op_names::kAddN, "fused ops");
  r.add(OpDef{.name = op_names::kFusedConv2D,
              .inputs = {"x", "filter", "bias"},
              .attrs = with_activation(conv.attrs),
              .infer = fused_infer(op_names::kConv2D),
              .weights = conv.weights,
              .flops = conv.flops});
  r.add(OpDef{.name = op_names::kFusedConv2DAdd,
              .inputs = {"x", "filter", "bias", "addend"},
              .attrs = with_activation(conv.attrs),
              .infer = fused_infer(op_names::kConv2D),
              .weights = conv.weights,
              .flops = conv.flops});
  // A training graph's single-channel first conv and the MaxPoolWindowArgmax of its output
  // (transforms/training_passes.h), after their gradients (so it has none of its own).
  std::vector<AttrSpec> conv_pool = with_pool_window(with_activation(conv.attrs));
  conv_pool.push_back({"relu", AttrKind::Bool, AttrValue{false}});
  r.add(OpDef{.name = op_names::kFusedConv2DMaxPool,
              .inputs = {"x", "filter", "bias"},
              .attrs = std::move(conv_pool),
              .infer = infer_conv_max_pool,
              .weights = conv.weights});
  // Its filter and bias gradients, with the MaxPoolGradWindowArgmax before them, in one pass
  // per image (transforms/training_passes.h; no gradient of its own).
  std::vector<AttrSpec> conv_pool_grad = conv.attrs;
  conv_pool_grad.push_back({"filter_shape", AttrKind::Ints, std::nullopt});
  conv_pool_grad = with_pool_window(std::move(conv_pool_grad));
  r.add(OpDef{.name = op_names::kFusedConv2DMaxPoolGrad,
              .inputs = {"x", "dy", "argmax"},
              .attrs = std::move(conv_pool_grad),
              .infer = infer_conv_max_pool_grad});
  r.add(OpDef{.name = op_names::kFusedMatMul,
              .inputs = {"a", "b", "bias"},
              .attrs = with_activation(matmul.attrs),
              .infer = fused_infer(op_names::kMatMul),
              .weights = matmul.weights,
              .flops = matmul.flops});
  r.add(OpDef{.name = op_names::kFusedBatchMatMul,
              .inputs = {"a", "b", "bias"},
              .attrs = with_alpha(with_activation(batch_matmul.attrs)),
              .infer = fused_infer(op_names::kBatchMatMul),
              .grad = inference_only_gradient,
              .flops = batch_matmul.flops});
  r.add(OpDef{.name = op_names::kFusedAddN,
              .inputs = add_n.inputs,
              .variadic = true,
              .attrs = with_activation({}),
              .infer =
                  [infer = add_n.infer](const InferContext& ctx) {
                    activation_of(ctx.node());  // throws naming the node when the name is unknown
                    return infer(ctx);
                  },
              .grad = inference_only_gradient});
}

namespace ops {

Output fused_batch_matmul(Graph& g, Output a, Output b, Output bias, bool transpose_a,
                          bool transpose_b, const std::string& name) {
  return g.add(op_names::kFusedBatchMatMul, {a, b, bias},
               {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}}, name);
}

}  // namespace ops

}  // namespace sf
