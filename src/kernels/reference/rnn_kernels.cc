// Reference kernels for Gru and Lstm: ONNX's equations step by step, each product summed in
// double, one direction after the other.
#include <cmath>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/op_names.h"

namespace sf {

namespace {

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// The sizes of one Gru/Lstm node and its weights for direction d.
struct Recurrence {
  int64_t steps, batch, in, hidden, dirs, gates;
  const float *x, *w, *r, *b;

  Recurrence(const KernelContext& ctx, int64_t gate_count)
      : steps(ctx.inputs[0].dim(0)),
        batch(ctx.inputs[0].dim(1)),
        in(ctx.inputs[0].dim(2)),
        hidden(ctx.inputs[1].dim(1) / gate_count),
        dirs(ctx.inputs[1].dim(0)),
        gates(gate_count),
        x(ctx.inputs[0].data<float>()),
        w(ctx.inputs[1].data<float>()),
        r(ctx.inputs[2].data<float>()),
        b(ctx.inputs[3].data<float>()) {}

  // Time index of step i in direction d.
  int64_t time(const std::string& direction, int64_t d, int64_t i) const {
    return (direction == "reverse" || d == 1) ? steps - 1 - i : i;
  }
  // W x_t + Wb (gate g, unit j, batch row n, direction d).
  double input_part(int64_t d, int64_t t, int64_t n, int64_t g, int64_t j) const {
    const float* row = w + (d * gates * hidden + g * hidden + j) * in;
    const float* xt = x + (t * batch + n) * in;
    double s = b[d * 2 * gates * hidden + g * hidden + j];
    for (int64_t k = 0; k < in; ++k) s += static_cast<double>(row[k]) * xt[k];
    return s;
  }
  // R v + Rb for a hidden-sized vector v.
  double recurrent_part(int64_t d, int64_t g, int64_t j, const float* v) const {
    const float* row = r + (d * gates * hidden + g * hidden + j) * hidden;
    double s = b[d * 2 * gates * hidden + (gates + g) * hidden + j];
    for (int64_t k = 0; k < hidden; ++k) s += static_cast<double>(row[k]) * v[k];
    return s;
  }
};

void gru(KernelContext& ctx) {
  const Recurrence rc(ctx, 3);
  const std::string& direction = ctx.node.attrs.get_string("direction");
  const bool linear_before_reset = ctx.node.attrs.get_bool("linear_before_reset");
  const int64_t H = rc.hidden, N = rc.batch;
  float* y = ctx.outputs[0].data<float>();
  float* y_h = ctx.outputs[1].data<float>();
  std::vector<float> h(static_cast<size_t>(H)), reset_h(static_cast<size_t>(H)),
      next(static_cast<size_t>(H));
  for (int64_t d = 0; d < rc.dirs; ++d)
    for (int64_t n = 0; n < N; ++n) {
      const float* h0 = ctx.inputs[4].data<float>() + (d * N + n) * H;
      h.assign(h0, h0 + H);
      for (int64_t i = 0; i < rc.steps; ++i) {
        const int64_t t = rc.time(direction, d, i);
        std::vector<double> z(static_cast<size_t>(H)), reset(static_cast<size_t>(H));
        for (int64_t j = 0; j < H; ++j) {
          z[static_cast<size_t>(j)] =
              sigmoid(rc.input_part(d, t, n, 0, j) + rc.recurrent_part(d, 0, j, h.data()));
          reset[static_cast<size_t>(j)] =
              sigmoid(rc.input_part(d, t, n, 1, j) + rc.recurrent_part(d, 1, j, h.data()));
          reset_h[static_cast<size_t>(j)] =
              static_cast<float>(reset[static_cast<size_t>(j)] * h[static_cast<size_t>(j)]);
        }
        for (int64_t j = 0; j < H; ++j) {
          const double recurrent = linear_before_reset ? reset[static_cast<size_t>(j)] *
                                                             rc.recurrent_part(d, 2, j, h.data())
                                                       : rc.recurrent_part(d, 2, j, reset_h.data());
          const double candidate = std::tanh(rc.input_part(d, t, n, 2, j) + recurrent);
          const double zj = z[static_cast<size_t>(j)];
          next[static_cast<size_t>(j)] =
              static_cast<float>((1.0 - zj) * candidate + zj * h[static_cast<size_t>(j)]);
        }
        h = next;
        std::copy(h.begin(), h.end(), y + ((t * rc.dirs + d) * N + n) * H);
      }
      std::copy(h.begin(), h.end(), y_h + (d * N + n) * H);
    }
}

void lstm(KernelContext& ctx) {
  const Recurrence rc(ctx, 4);
  const std::string& direction = ctx.node.attrs.get_string("direction");
  const bool peepholes = ctx.node.attrs.get_bool("peepholes");
  const int64_t H = rc.hidden, N = rc.batch;
  float* y = ctx.outputs[0].data<float>();
  float* y_h = ctx.outputs[1].data<float>();
  float* y_c = ctx.outputs[2].data<float>();
  std::vector<float> h(static_cast<size_t>(H)), cell(static_cast<size_t>(H)),
      next_h(static_cast<size_t>(H));
  for (int64_t d = 0; d < rc.dirs; ++d) {
    // Peepholes i, o, f; zero when the node has none.
    const auto peep = [&](int64_t k, int64_t j) {
      return peepholes ? static_cast<double>(ctx.inputs[6].data<float>()[(d * 3 + k) * H + j])
                       : 0.0;
    };
    for (int64_t n = 0; n < N; ++n) {
      const float* h0 = ctx.inputs[4].data<float>() + (d * N + n) * H;
      const float* c0 = ctx.inputs[5].data<float>() + (d * N + n) * H;
      h.assign(h0, h0 + H);
      cell.assign(c0, c0 + H);
      for (int64_t i = 0; i < rc.steps; ++i) {
        const int64_t t = rc.time(direction, d, i);
        for (int64_t j = 0; j < H; ++j) {
          const auto pre = [&](int64_t g) {
            return rc.input_part(d, t, n, g, j) + rc.recurrent_part(d, g, j, h.data());
          };
          const double c_prev = cell[static_cast<size_t>(j)];
          const double input_gate = sigmoid(pre(0) + peep(0, j) * c_prev);
          const double forget_gate = sigmoid(pre(2) + peep(2, j) * c_prev);
          const double c = forget_gate * c_prev + input_gate * std::tanh(pre(3));
          const double output_gate = sigmoid(pre(1) + peep(1, j) * c);
          cell[static_cast<size_t>(j)] = static_cast<float>(c);
          next_h[static_cast<size_t>(j)] = static_cast<float>(output_gate * std::tanh(c));
        }
        h = next_h;
        std::copy(h.begin(), h.end(), y + ((t * rc.dirs + d) * N + n) * H);
      }
      std::copy(h.begin(), h.end(), y_h + (d * N + n) * H);
      std::copy(cell.begin(), cell.end(), y_c + (d * N + n) * H);
    }
  }
}

}  // namespace

void register_reference_rnn_kernels(KernelRegistry& r) {
  r.add(simple_kernel(op_names::kGru, DType::f32, "reference", gru));
  r.add(simple_kernel(op_names::kLstm, DType::f32, "reference", lstm));
}

}  // namespace sf
