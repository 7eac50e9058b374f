// Gru and Lstm: whole recurrent layers over a time-major sequence, with ONNX's weight layouts
// and gate orders (GRU z, r, h; LSTM i, o, f, c), so imported models keep their weights as they
// are.
//
// Their gradients are ops of their own, GruGrad and LstmGrad: one node takes the forward inputs
// and the gradients of every output (zeros for an output nothing downstream reads) and gives the
// gradients of every input by backpropagation through time.
#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

// The number of directions `direction` names; fails on anything else.
int64_t direction_count(const InferContext& ctx) {
  const std::string& direction = ctx.attrs().get_string("direction");
  if (direction == "forward" || direction == "reverse") return 1;
  if (direction == "bidirectional") return 2;
  ctx.fail("direction must be forward, reverse or bidirectional, got '{}'", direction);
}

// Checks x [T, N, I], w [D, G*H, I], r [D, G*H, H], b [D, 2*G*H] and the states [D, N, H]
// (inputs from 4 on, `states` of them), all f32; returns {Y [T, D, N, H], Y_h [D, N, H], ...}
// with one [D, N, H] output per state.
std::vector<TensorType> infer_recurrent(const InferContext& ctx, int64_t gates, int states) {
  for (int i = 0; i < ctx.num_inputs(); ++i)
    ctx.expect_dtype(i, DType::f32, "every input (x, weights, biases and states)");
  ctx.expect_rank(0, 3, "x [time, batch, input]");
  ctx.expect_rank(1, 3, "w [directions, gates * hidden, input]");
  const Shape& x = ctx.shape(0);
  const Shape& w = ctx.shape(1);
  const int64_t dirs = direction_count(ctx);
  const int64_t steps = x[0], batch = x[1], in = x[2];
  if (w[0] != dirs || w[1] % gates != 0 || w[1] == 0 || w[2] != in)
    ctx.fail("w {} vs x {}: must be [{}, {} * hidden, {}]", shape_str(w), shape_str(x), dirs, gates,
             in);
  const int64_t hidden = w[1] / gates;
  const auto expect = [&](int i, const Shape& want, const char* what) {
    if (ctx.shape(i) != want)
      ctx.fail("{} {}: must be {} (x {}, hidden {})", what, shape_str(ctx.shape(i)),
               shape_str(want), shape_str(x), hidden);
  };
  expect(2, {dirs, gates * hidden, hidden}, "r");
  expect(3, {dirs, 2 * gates * hidden}, "b");
  const Shape state{dirs, batch, hidden};
  for (int s = 0; s < states; ++s) expect(4 + s, state, s == 0 ? "h0" : "c0");
  std::vector<TensorType> out{TensorType{DType::f32, {steps, dirs, batch, hidden}}};
  for (int s = 0; s < states; ++s) out.push_back(TensorType{DType::f32, state});
  return out;
}

std::vector<TensorType> infer_lstm(const InferContext& ctx) {
  std::vector<TensorType> out = infer_recurrent(ctx, 4, 2);
  const Shape want{out[1].shape[0], 3 * out[1].shape[2]};
  if (ctx.shape(6) != want) ctx.fail("p {}: must be {}", shape_str(ctx.shape(6)), shape_str(want));
  return out;
}

// GruGrad / LstmGrad: the forward node's inputs (`forward_inputs` of them) and then the
// gradients of its outputs, which must have those outputs' types; gives the inputs' types.
std::vector<TensorType> infer_recurrent_grad(const InferContext& ctx, int forward_inputs,
                                             const std::vector<TensorType>& forward_outputs) {
  static const char* const kOutputNames[] = {"dy", "dy_h", "dy_c"};
  for (size_t o = 0; o < forward_outputs.size(); ++o) {
    const int i = forward_inputs + static_cast<int>(o);
    if (ctx.shape(i) != forward_outputs[o].shape)
      ctx.fail("{} {}: must be {}, the shape of the output it is the gradient of", kOutputNames[o],
               shape_str(ctx.shape(i)), shape_str(forward_outputs[o].shape));
  }
  std::vector<TensorType> out;
  for (int i = 0; i < forward_inputs; ++i) out.push_back(TensorType{DType::f32, ctx.shape(i)});
  return out;
}

// One GruGrad / LstmGrad node fed every output's gradient, zeros where none flows (an output
// nothing downstream reads), its outputs split one per input.
std::vector<Output> grad_recurrent(GradContext& ctx, const char* grad_op) {
  std::vector<Output> inputs = ctx.node.inputs;
  const int outputs = static_cast<int>(ctx.node.outputs.size());
  for (int o = 0; o < outputs; ++o) {
    Output dy = ctx.grad(o);
    if (!dy.valid()) {
      const std::string name = ctx.name("zero_dy" + std::to_string(o));
      dy = ops::broadcast_to_like(ctx.graph, ops::scalar(ctx.graph, 0.0f, name + "/scalar"),
                                  ctx.output(o), {}, name);
    }
    inputs.push_back(dy);
  }
  const int id = ctx.graph.add_node(grad_op, std::move(inputs), ctx.attrs(), ctx.name("bptt"));
  std::vector<Output> grads;
  for (int i = 0; i < static_cast<int>(ctx.node.inputs.size()); ++i) grads.push_back(Output{id, i});
  return grads;
}

double recurrent_flops(const Node&, const std::vector<Shape>& in) {
  const Shape& x = in[0];
  const Shape& w = in[1];
  // The input and recurrent products of every step and direction.
  return 2.0 * static_cast<double>(x[0] * x[1] * w[0] * w[1] * (w[2] + in[2][2]));
}

}  // namespace

void register_rnn_ops(OpRegistry& r) {
  const std::vector<AttrSpec> gru_attrs = {
      {"direction", AttrKind::String, AttrValue{std::string("forward")}},
      {"linear_before_reset", AttrKind::Bool, AttrValue{false}}};
  // p [D, 3*H] holds the peepholes (i, o, f) and is read only when `peepholes`.
  const std::vector<AttrSpec> lstm_attrs = {
      {"direction", AttrKind::String, AttrValue{std::string("forward")}},
      {"peepholes", AttrKind::Bool, AttrValue{false}}};
  r.add(OpDef{.name = op_names::kGru,
              .inputs = {"x", "w", "r", "b", "h0"},
              .attrs = gru_attrs,
              .infer = [](const InferContext& ctx) { return infer_recurrent(ctx, 3, 1); },
              .grad = [](GradContext& ctx) { return grad_recurrent(ctx, op_names::kGruGrad); },
              .flops = recurrent_flops});
  r.add(OpDef{.name = op_names::kLstm,
              .inputs = {"x", "w", "r", "b", "h0", "c0", "p"},
              .attrs = lstm_attrs,
              .infer = infer_lstm,
              .grad = [](GradContext& ctx) { return grad_recurrent(ctx, op_names::kLstmGrad); },
              .flops = recurrent_flops});
  r.add(OpDef{.name = op_names::kGruGrad,
              .inputs = {"x", "w", "r", "b", "h0", "dy", "dy_h"},
              .attrs = gru_attrs,
              .infer = [](const InferContext& ctx) {
                return infer_recurrent_grad(ctx, 5, infer_recurrent(ctx, 3, 1));
              }});
  r.add(OpDef{.name = op_names::kLstmGrad,
              .inputs = {"x", "w", "r", "b", "h0", "c0", "p", "dy", "dy_h", "dy_c"},
              .attrs = lstm_attrs,
              .infer = [](const InferContext& ctx) {
                return infer_recurrent_grad(ctx, 7, infer_lstm(ctx));
              }});
}

}  // namespace sf
