// SoftmaxCrossEntropy: the mean cross-entropy of softmax(logits) against class indices or
// probabilities, plus the softmax itself (output 1), which its gradient reuses.
#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

// Checks logits (input `li`) [N,C] and labels (input `li + 1`): i32/i64 [N] or f32 [N,C].
void check_logits_and_labels(const InferContext& ctx, int li, const char* logits_name) {
  ctx.expect_rank(li, 2, logits_name);
  ctx.expect_dtype(li, DType::f32, logits_name);
  const Shape& logits = ctx.shape(li);
  const Shape& labels = ctx.shape(li + 1);
  const DType dtype = ctx.dtype(li + 1);
  if (dtype == DType::i32 || dtype == DType::i64) {
    if (labels.size() != 1)
      ctx.fail("labels {} must be class indices [N] for {} {}", shape_str(labels), logits_name,
               shape_str(logits));
    if (labels[0] != logits[0])
      ctx.fail("labels {} vs {} {}: batch sizes differ", shape_str(labels), logits_name,
               shape_str(logits));
  } else if (dtype == DType::f32) {
    if (labels != logits)
      ctx.fail("labels {} vs {} {}: probability labels must have the same shape", shape_str(labels),
               logits_name, shape_str(logits));
  } else {
    ctx.fail("labels must be i32 or i64 class indices or f32 probabilities, got {}",
             type_str(ctx.input(li + 1)));
  }
}

}  // namespace

void register_loss_ops(OpRegistry& r) {
  r.add(OpDef{.name = op_names::kSoftmaxCrossEntropy,
              .inputs = {"logits", "labels"},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                check_logits_and_labels(ctx, 0, "logits");
                return {TensorType{DType::f32, {}}, ctx.input(0)};
              },
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                Graph& g = ctx.graph;
                Output dlogits;
                if (ctx.grad(0).valid())
                  dlogits =
                      g.add(op_names::kSoftmaxCrossEntropyGrad,
                            {ctx.grad(0), ctx.output(1), ctx.input(1)}, {}, ctx.name("dlogits"));
                if (ctx.grad(1).valid()) {
                  // Something downstream also uses the probabilities.
                  Output d = g.add(op_names::kSoftmaxGrad, {ctx.grad(1), ctx.output(1)}, {},
                                   ctx.name("dsoftmax"));
                  dlogits = dlogits.valid() ? ops::add(g, dlogits, d, ctx.name("sum")) : d;
                }
                // No gradient for the labels: indices are discrete, and probability labels
                // are data.
                return {dlogits, Output{}};
              }});
  // dlogits = (probs * sum(labels row) - labels) * dloss / N, labels one-hot for indices.
  r.add(OpDef{.name = op_names::kSoftmaxCrossEntropyGrad,
              .inputs = {"dloss", "probs", "labels"},
              .infer = [](const InferContext& ctx) -> std::vector<TensorType> {
                ctx.expect_rank(0, 0, "dloss");
                ctx.expect_dtype(0, DType::f32, "dloss");
                check_logits_and_labels(ctx, 1, "probs");
                return {ctx.input(1)};
              }});
}

namespace ops {

Output softmax_cross_entropy(Graph& g, Output logits, Output labels, const std::string& name) {
  return g.add(op_names::kSoftmaxCrossEntropy, {logits, labels}, {}, name);
}

}  // namespace ops
}  // namespace sf
