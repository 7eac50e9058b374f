// GRU and LSTM (forward, reverse or bidirectional; layout 0 or 1; ONNX's default activations)
// unrolled over the sequence, whose length is known when the model is planned: the input
// projection of every step is one MatMul, then each step is a MatMul by R and the gate
// arithmetic in plain ops. sequence_lens shorter than the sequence are refused by name.
#include "core/limits.h"
#include "onnx/context.h"
#include "ops/op_names.h"

namespace sf::onnx_import {

namespace {

// The pieces of one direction, each a graph value.
struct Direction {
  Output w, r, w_bias, r_bias, peephole;  // biases and peepholes invalid when absent
  Output h, cell;
};

class Unroller {
 public:
  Unroller(Context& c, int64_t hidden) : c_(c), hidden_(hidden) {}

  Output slice(Output x, int64_t axis, int64_t begin, int64_t end, const std::string& what) {
    return c_.add(op_names::kSlice, {x}, {{"axis", axis}, {"begin", begin}, {"end", end}}, what);
  }
  Output reshape(Output x, Shape shape, const std::string& what) {
    return c_.add(op_names::kReshape, {x}, {{"shape", std::move(shape)}}, what);
  }
  // Gate k of a [rows, gates * hidden] value.
  Output gate(Output x, int64_t k, const std::string& what) {
    return slice(x, 1, k * hidden_, (k + 1) * hidden_, what);
  }
  Output op(const char* name, std::vector<Output> in, const std::string& what, Attrs a = {}) {
    return c_.add(name, std::move(in), std::move(a), what);
  }
  // Direction d of a [dirs, ...] input, as `shape`; invalid when the input is absent.
  Output per_direction(int input, int64_t d, Shape shape, const std::string& what) {
    if (!c_.has_input(input)) return Output{};
    return reshape(slice(c_.plain(c_.in(input)), 0, d, d + 1, what + "_slice"), std::move(shape),
                   what);
  }

 private:
  Context& c_;
  int64_t hidden_;
};

void check_defaults(Context& c, bool lstm, int64_t dirs) {
  if (c.attr("clip")) c.unsupported("the clip attribute is not supported");
  if (lstm && c.attr_int("input_forget", 0) != 0) c.unsupported("input_forget=1 is not supported");
  if (const onnx::AttributeProto* a = c.attr("activations")) {
    const std::vector<std::string> one = lstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                              : std::vector<std::string>{"Sigmoid", "Tanh"};
    std::vector<std::string> want;
    for (int64_t d = 0; d < dirs; ++d) want.insert(want.end(), one.begin(), one.end());
    if (std::vector<std::string>(a->strings().begin(), a->strings().end()) != want)
      c.unsupported("only the default activations ({}) are supported", fmt::join(one, ", "));
  }
}

void recurrent(Context& c, bool lstm) {
  Value& xv = c.in(0);
  if (xv.dtype != DType::f32) c.unsupported("only float inputs are supported");
  if (xv.shape.size() != 3) c.fail("X {} must have rank 3", shape_str(xv.shape));
  const int64_t hidden = c.attr_int("hidden_size", 0);
  if (hidden < 1 || hidden > limits::kMaxElements)
    c.fail("hidden_size must be given and in [1, {}], got {}", limits::kMaxElements, hidden);
  const std::string direction = c.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    c.fail("unknown direction '{}'", direction);
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  check_defaults(c, lstm, dirs);
  const bool batch_first = c.attr_int("layout", 0) != 0;
  const int64_t gates = lstm ? 4 : 3;
  const bool linear_before_reset = !lstm && c.attr_int("linear_before_reset", 0) != 0;
  Unroller u(c, hidden);
  Output x = c.plain(xv);
  if (batch_first)
    x = u.op(op_names::kTranspose, {x}, "time_major", {{"perm", std::vector<int64_t>{1, 0, 2}}});
  const Shape& s = xv.shape;
  const int64_t steps = batch_first ? s[1] : s[0], batch = batch_first ? s[0] : s[1], in = s[2];
  limits::checked_num_elements({batch, gates * hidden},
                               fmt::format("{}: node '{}' ({})", c.path, c.node_name(), c.op()));
  if (c.has_input(4))
    for (int64_t len : to_ints(c.const_in(4, "sequence_lens")))
      if (len != steps)
        c.unsupported("sequence_lens shorter than the sequence ({} of {}) are not supported", len,
                      steps);
  const Output flat_x = u.reshape(x, {steps * batch, in}, "flat_x");
  std::vector<Output> ys, last_h, last_c;
  for (int64_t d = 0; d < dirs; ++d) {
    const std::string p = dirs == 2 ? (d == 0 ? "fw/" : "bw/") : "";
    Direction dir;
    dir.w = u.per_direction(1, d, {gates * hidden, in}, p + "w");
    dir.r = u.per_direction(2, d, {gates * hidden, hidden}, p + "r");
    if (Output b = u.per_direction(3, d, {2 * gates * hidden}, p + "b"); b.valid()) {
      dir.w_bias = u.slice(b, 0, 0, gates * hidden, p + "w_bias");
      dir.r_bias = u.slice(b, 0, gates * hidden, 2 * gates * hidden, p + "r_bias");
    }
    const Tensor zeros(DType::f32, {batch, hidden});
    dir.h = c.has_input(5) ? u.per_direction(5, d, {batch, hidden}, p + "h0")
                           : c.constant(zeros, p + "h0");
    if (lstm) {
      dir.cell = c.has_input(6) ? u.per_direction(6, d, {batch, hidden}, p + "c0")
                                : c.constant(zeros, p + "c0");
      dir.peephole = u.per_direction(7, d, {3 * hidden}, p + "p");
    }
    Output projected =
        u.op(op_names::kMatMul, {flat_x, dir.w}, p + "projected", {{"transpose_b", true}});
    if (dir.w_bias.valid())
      projected = u.op(op_names::kBiasAdd, {projected, dir.w_bias}, p + "projected_bias");
    std::vector<Output> outputs(static_cast<size_t>(steps));
    for (int64_t i = 0; i < steps; ++i) {
      const int64_t t = (direction == "reverse" || d == 1) ? steps - 1 - i : i;
      const std::string q = p + "t" + std::to_string(t) + "/";
      const Output xt = u.slice(projected, 0, t * batch, (t + 1) * batch, q + "x");
      Output hr = u.op(op_names::kMatMul, {dir.h, dir.r}, q + "hr", {{"transpose_b", true}});
      if (dir.r_bias.valid()) hr = u.op(op_names::kBiasAdd, {hr, dir.r_bias}, q + "hr_bias");
      const auto sum = [&](int64_t k, const std::string& what) {
        return u.op(op_names::kAdd,
                    {u.gate(xt, k, q + what + "_x"), u.gate(hr, k, q + what + "_h")},
                    q + what + "_sum");
      };
      if (lstm) {  // gates i, o, f, c; peepholes i, o, f
        const auto peep = [&](Output pre, int64_t k, Output cell, const std::string& what) {
          if (!dir.peephole.valid()) return pre;
          Output pk = u.slice(dir.peephole, 0, k * hidden, (k + 1) * hidden, q + what + "_p");
          return u.op(op_names::kAdd, {pre, u.op(op_names::kMul, {pk, cell}, q + what + "_pc")},
                      q + what + "_peep");
        };
        Output ig = u.op(op_names::kSigmoid, {peep(sum(0, "i"), 0, dir.cell, "i")}, q + "i");
        Output fg = u.op(op_names::kSigmoid, {peep(sum(2, "f"), 2, dir.cell, "f")}, q + "f");
        Output cg = u.op(op_names::kTanh, {sum(3, "c")}, q + "c");
        dir.cell = u.op(op_names::kAdd,
                        {u.op(op_names::kMul, {fg, dir.cell}, q + "fc"),
                         u.op(op_names::kMul, {ig, cg}, q + "ic")},
                        q + "cell");
        Output og = u.op(op_names::kSigmoid, {peep(sum(1, "o"), 1, dir.cell, "o")}, q + "o");
        dir.h =
            u.op(op_names::kMul, {og, u.op(op_names::kTanh, {dir.cell}, q + "tanh_cell")}, q + "h");
      } else {  // gates z, r, h
        Output z = u.op(op_names::kSigmoid, {sum(0, "z")}, q + "z");
        Output r = u.op(op_names::kSigmoid, {sum(1, "r")}, q + "r");
        Output recurrent_h;
        if (linear_before_reset) {
          recurrent_h = u.op(op_names::kMul, {r, u.gate(hr, 2, q + "hh")}, q + "r_hh");
        } else {
          Output rh = u.slice(dir.r, 0, 2 * hidden, 3 * hidden, q + "r_weights");
          recurrent_h = u.op(op_names::kMatMul, {u.op(op_names::kMul, {r, dir.h}, q + "r_h"), rh},
                             q + "r_h_weights", {{"transpose_b", true}});
          if (dir.r_bias.valid())
            recurrent_h =
                u.op(op_names::kBiasAdd,
                     {recurrent_h, u.slice(dir.r_bias, 0, 2 * hidden, 3 * hidden, q + "rbh")},
                     q + "r_h_bias");
        }
        Output candidate = u.op(
            op_names::kTanh,
            {u.op(op_names::kAdd, {u.gate(xt, 2, q + "h_x"), recurrent_h}, q + "candidate_sum")},
            q + "candidate");
        // (1 - z) * candidate + z * h = candidate + z * (h - candidate)
        Output kept = u.op(op_names::kMul,
                           {z, u.op(op_names::kSub, {dir.h, candidate}, q + "diff")}, q + "kept");
        dir.h = u.op(op_names::kAdd, {candidate, kept}, q + "h");
      }
      outputs[static_cast<size_t>(t)] = u.reshape(dir.h, {1, 1, batch, hidden}, q + "y");
    }
    ys.push_back(u.op(op_names::kConcat, outputs, p + "y", {{"axis", int64_t{0}}}));
    last_h.push_back(u.reshape(dir.h, {1, batch, hidden}, p + "y_h"));
    if (lstm) last_c.push_back(u.reshape(dir.cell, {1, batch, hidden}, p + "y_c"));
  }
  const auto join = [&](std::vector<Output> parts, int64_t axis, const std::string& what) {
    return parts.size() == 1 ? u.op(op_names::kIdentity, {parts[0]}, what)
                             : u.op(op_names::kConcat, std::move(parts), what, {{"axis", axis}});
  };
  Output y = join(ys, 1, "Y");
  Output y_h = join(last_h, 0, "Y_h");
  if (batch_first) {
    y = u.op(op_names::kTranspose, {y}, "Y_batch_first",
             {{"perm", std::vector<int64_t>{2, 0, 1, 3}}});
    y_h = u.op(op_names::kTranspose, {y_h}, "Y_h_batch_first",
               {{"perm", std::vector<int64_t>{1, 0, 2}}});
  }
  c.set_out(0, y, Layout::kPlain);
  c.set_out(1, y_h, Layout::kPlain);
  if (lstm) {
    Output y_c = join(last_c, 0, "Y_c");
    if (batch_first)
      y_c = u.op(op_names::kTranspose, {y_c}, "Y_c_batch_first",
                 {{"perm", std::vector<int64_t>{1, 0, 2}}});
    c.set_out(2, y_c, Layout::kPlain);
  }
}

}  // namespace

void add_rnn_converters(ConverterMap& m) {
  m["GRU"] = [](Context& c) { recurrent(c, false); };
  m["LSTM"] = [](Context& c) { recurrent(c, true); };
}

}  // namespace sf::onnx_import
