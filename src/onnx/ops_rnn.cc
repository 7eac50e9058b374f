// GRU and LSTM (forward, reverse or bidirectional; layout 0 or 1; ONNX's default activations;
// LSTM peepholes) as one Gru / Lstm node each (ops/rnn_ops.cc), which oneDNN's RNN primitives
// run. Absent biases and initial states become zero constants; batch-first models are
// transposed to time-major around the node. sequence_lens shorter than the sequence are
// refused by name.
#include "core/limits.h"
#include "onnx/context.h"
#include "ops/op_names.h"

namespace sf::onnx_import {

namespace {

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
  const Shape& s = xv.shape;
  const int64_t steps = batch_first ? s[1] : s[0], batch = batch_first ? s[0] : s[1], in = s[2];
  limits::checked_num_elements({batch, gates * hidden},
                               fmt::format("{}: node '{}' ({})", c.path, c.node_name(), c.op()));
  if (c.has_input(4))
    for (int64_t len : to_ints(c.const_in(4, "sequence_lens")))
      if (len != steps)
        c.unsupported("sequence_lens shorter than the sequence ({} of {}) are not supported", len,
                      steps);
  const auto input = [&](int i, const char* what, const Shape& want) {
    Value& v = c.in(i);
    if (v.shape != want)
      c.fail("{} {} must be {} (X {}, hidden_size {}, {} direction(s))", what, shape_str(v.shape),
             shape_str(want), shape_str(s), hidden, dirs);
    return c.plain(v);
  };
  const auto transpose = [&](Output v, std::vector<int64_t> perm, const std::string& what) {
    return c.add(op_names::kTranspose, {v}, {{"perm", std::move(perm)}}, what);
  };
  Output x = c.plain(xv);
  if (batch_first) x = transpose(x, {1, 0, 2}, "time_major");
  std::vector<Output> inputs{x, input(1, "W", {dirs, gates * hidden, in}),
                             input(2, "R", {dirs, gates * hidden, hidden})};
  const Shape bias{dirs, 2 * gates * hidden};
  inputs.push_back(c.has_input(3) ? input(3, "B", bias)
                                  : c.constant(Tensor(DType::f32, bias), "b"));
  // Initial states; batch-first models give them as [batch, directions, hidden].
  const Shape state = batch_first ? Shape{batch, dirs, hidden} : Shape{dirs, batch, hidden};
  for (int i : lstm ? std::vector<int>{5, 6} : std::vector<int>{5}) {
    const char* what = i == 5 ? "initial_h" : "initial_c";
    if (!c.has_input(i)) {
      inputs.push_back(c.constant(Tensor(DType::f32, {dirs, batch, hidden}), what));
      continue;
    }
    Output v = input(i, what, state);
    inputs.push_back(batch_first ? transpose(v, {1, 0, 2}, std::string(what) + "_time_major") : v);
  }
  Attrs attrs{{"direction", direction}};
  if (lstm) {
    const Shape peepholes{dirs, 3 * hidden};
    const bool has_peepholes = c.has_input(7);
    inputs.push_back(has_peepholes ? input(7, "P", peepholes)
                                   : c.constant(Tensor(DType::f32, peepholes), "p"));
    attrs.set("peepholes", has_peepholes);
  } else {
    attrs.set("linear_before_reset", c.attr_int("linear_before_reset", 0) != 0);
  }
  const Output y =
      c.add(lstm ? op_names::kLstm : op_names::kGru, std::move(inputs), std::move(attrs));
  const auto out = [&](int i) {
    const Output o{y.node, i};
    if (!batch_first) return o;
    return i == 0 ? transpose(o, {2, 0, 1, 3}, "Y_batch_first")
                  : transpose(o, {1, 0, 2}, i == 1 ? "Y_h_batch_first" : "Y_c_batch_first");
  };
  for (int i = 0; i < (lstm ? 3 : 2); ++i) c.set_out(i, out(i), Layout::kPlain);
}

}  // namespace

void add_rnn_converters(ConverterMap& m) {
  m["GRU"] = [](Context& c) { recurrent(c, false); };
  m["LSTM"] = [](Context& c) { recurrent(c, true); };
}

}  // namespace sf::onnx_import
