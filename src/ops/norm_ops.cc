// BatchNorm (over the last axis), FusedBatchNorm (with its activation), their gradients and
// Dropout: the ops that behave differently in training; LayerNorm (over the last axis), which
// exists only in inference graphs.
#include "core/activation.h"
#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

// x [..., C] with rank >= 2 and the per-channel inputs from `first` on all f32 [C].
void check_channels(const InferContext& ctx, int first, const std::vector<const char*>& names) {
  const Shape& x = ctx.shape(first - 1);
  if (x.size() < 2)
    ctx.fail("x must have rank 2 or more ([N,C] or [N,H,W,C]), got {}", shape_str(x));
  ctx.expect_dtype(first - 1, DType::f32, "x");
  const Shape channels{x.back()};
  for (size_t i = 0; i < names.size(); ++i) {
    const int k = first + static_cast<int>(i);
    ctx.expect_dtype(k, DType::f32, names[i]);
    if (ctx.shape(k) != channels)
      ctx.fail("{} {} vs x {}: must be [{}] (the last axis)", names[i], shape_str(ctx.shape(k)),
               shape_str(x), x.back());
  }
}

std::vector<TensorType> infer_batch_norm(const InferContext& ctx) {
  check_channels(ctx, 1, {"gamma", "beta", "moving_mean", "moving_var"});
  if (ctx.attrs().get_float("epsilon") < 0)
    ctx.fail("epsilon must not be negative, got {}", ctx.attrs().get_float("epsilon"));
  TensorType c = ctx.input(1);
  return {ctx.input(0), c, c};
}

std::vector<TensorType> infer_batch_norm_grad(const InferContext& ctx) {
  check_channels(ctx, 2, {"gamma", "mean", "var"});
  if (ctx.input(0) != ctx.input(1))
    ctx.fail("dy {} vs x {}: types differ", type_str(ctx.input(0)), type_str(ctx.input(1)));
  TensorType c = ctx.input(2);
  return {ctx.input(1), c, c};
}

}  // namespace

// The fused ops of imported inference graphs (LayerNorm, Gelu) have no gradient: only the
// execution passes make them, just before a model runs, and never in a graph that trains.
std::vector<Output> inference_only_gradient(GradContext& ctx) {
  fail("node '{}' ({}): the op exists only in imported inference graphs (fused by the execution "
       "passes); train the unfused form of the model",
       ctx.node.name, ctx.node.op);
}

void register_norm_ops(OpRegistry& r) {
  r.add(OpDef{.name = op_names::kBatchNorm,
              .inputs = {"x", "gamma", "beta", "moving_mean", "moving_var"},
              .attrs = {{"epsilon", AttrKind::Float, AttrValue{1e-3}}},
              .infer = infer_batch_norm,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                std::vector<Output> grads(5);
                if (!ctx.grad(0).valid()) return grads;
                // Uses the mean and variance the forward pass used (outputs 1 and 2).
                int id = ctx.graph.add_node(
                    op_names::kBatchNormGrad,
                    {ctx.grad(0), ctx.input(0), ctx.input(1), ctx.output(1), ctx.output(2)},
                    {{"epsilon", ctx.attrs().get_float("epsilon")}}, ctx.name("bn"));
                for (int i = 0; i < 3; ++i) grads[static_cast<size_t>(i)] = Output{id, i};
                return grads;
              }});
  r.add(OpDef{
      .name = op_names::kFusedBatchNorm,
      .inputs = {"x", "gamma", "beta", "moving_mean", "moving_var"},
      .attrs = {{"epsilon", AttrKind::Float, AttrValue{1e-3}},
                {"activation", AttrKind::String, AttrValue{activation_name(Activation::None)}}},
      .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
        activation_of(ctx.node());
        return infer_batch_norm(ctx);
      }});
  // Outputs dx, dgamma, dbeta. The kernel treats mean and var as batch statistics when
  // training (so dx includes their dependence on x) and as constants otherwise.
  r.add(OpDef{.name = op_names::kBatchNormGrad,
              .inputs = {"dy", "x", "gamma", "mean", "var"},
              .attrs = {{"epsilon", AttrKind::Float, AttrValue{1e-3}}},
              .infer = infer_batch_norm_grad});
  // BatchNormGrad whose dy is ReluGrad or Relu6Grad(dz, activated): the same inputs in the same
  // places, dz in place of dy and the activation gradient's x last.
  r.add(OpDef{
      .name = op_names::kFusedBatchNormGrad,
      .inputs = {"dz", "x", "gamma", "mean", "var", "activated"},
      .attrs = {{"epsilon", AttrKind::Float, AttrValue{1e-3}},
                {"activation", AttrKind::String, AttrValue{activation_name(Activation::None)}}},
      .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
        activation_of(ctx.node());
        if (ctx.input(5) != ctx.input(0))
          ctx.fail("activated {} vs dz {}: types differ", type_str(ctx.input(5)),
                   type_str(ctx.input(0)));
        return infer_batch_norm_grad(ctx);
      }});
  r.add(OpDef{.name = op_names::kLayerNorm,
              .inputs = {"x", "gamma", "beta"},
              .attrs = {{"epsilon", AttrKind::Float, AttrValue{1e-5}}},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                const Shape& x = ctx.shape(0);
                if (x.empty()) ctx.fail("x must have rank 1 or more, got a scalar");
                ctx.expect_dtype(0, DType::f32, "x");
                for (int k : {1, 2}) {
                  const char* name = k == 1 ? "gamma" : "beta";
                  ctx.expect_dtype(k, DType::f32, name);
                  if (ctx.shape(k) != Shape{x.back()})
                    ctx.fail("{} {} vs x {}: must be [{}] (the last axis)", name,
                             shape_str(ctx.shape(k)), shape_str(x), x.back());
                }
                if (!(ctx.attrs().get_float("epsilon") >= 0))
                  ctx.fail("epsilon must not be negative, got {}",
                           ctx.attrs().get_float("epsilon"));
                return {ctx.input(0)};
              },
              .grad = inference_only_gradient});
  r.add(OpDef{.name = op_names::kDropout,
              .inputs = {"x"},
              .attrs = {{"rate", AttrKind::Float, AttrValue{0.5}}},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                ctx.expect_dtype(0, DType::f32, "x");
                double rate = ctx.attrs().get_float("rate");
                if (!(rate >= 0.0 && rate < 1.0)) ctx.fail("rate must be in [0, 1), got {}", rate);
                return {ctx.input(0), ctx.input(0)};
              },
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                return {ops::mul(ctx.graph, ctx.grad(0), ctx.output(1), ctx.name("dx"))};
              }});
}

namespace ops {

Output batch_norm(Graph& g, Output x, Output gamma, Output beta, Output moving_mean,
                  Output moving_var, double epsilon, const std::string& name) {
  return g.add(op_names::kBatchNorm, {x, gamma, beta, moving_mean, moving_var},
               {{"epsilon", epsilon}}, name);
}

Output layer_norm(Graph& g, Output x, Output gamma, Output beta, double epsilon,
                  const std::string& name) {
  return g.add(op_names::kLayerNorm, {x, gamma, beta}, {{"epsilon", epsilon}}, name);
}

Output dropout(Graph& g, Output x, double rate, const std::string& name) {
  return g.add(op_names::kDropout, {x}, {{"rate", rate}}, name);
}

}  // namespace ops
}  // namespace sf
