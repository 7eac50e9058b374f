// Gru and Lstm: whole recurrent layers over a time-major sequence, with ONNX's weight layouts
// and gate orders (GRU z, r, h; LSTM i, o, f, c), so imported models keep their weights as they
// are. Inference only: they declare no gradient, so differentiating through one fails naming
// the node.
#include "graph/op_registry.h"
#include "ops/op_names.h"
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

double recurrent_flops(const Node&, const std::vector<Shape>& in) {
  const Shape& x = in[0];
  const Shape& w = in[1];
  // The input and recurrent products of every step and direction.
  return 2.0 * static_cast<double>(x[0] * x[1] * w[0] * w[1] * (w[2] + in[2][2]));
}

}  // namespace

void register_rnn_ops(OpRegistry& r) {
  r.add(OpDef{.name = op_names::kGru,
              .inputs = {"x", "w", "r", "b", "h0"},
              .attrs = {{"direction", AttrKind::String, AttrValue{std::string("forward")}},
                        {"linear_before_reset", AttrKind::Bool, AttrValue{false}}},
              .infer = [](const InferContext& ctx) { return infer_recurrent(ctx, 3, 1); },
              .flops = recurrent_flops});
  r.add(OpDef{.name = op_names::kLstm,
              .inputs = {"x", "w", "r", "b", "h0", "c0", "p"},
              // p [D, 3*H] holds the peepholes (i, o, f) and is read only when `peepholes`.
              .attrs = {{"direction", AttrKind::String, AttrValue{std::string("forward")}},
                        {"peepholes", AttrKind::Bool, AttrValue{false}}},
              .infer =
                  [](const InferContext& ctx) {
                    std::vector<TensorType> out = infer_recurrent(ctx, 4, 2);
                    const Shape want{out[1].shape[0], 3 * out[1].shape[2]};
                    if (ctx.shape(6) != want)
                      ctx.fail("p {}: must be {}", shape_str(ctx.shape(6)), shape_str(want));
                    return out;
                  },
              .flops = recurrent_flops});
}

}  // namespace sf
