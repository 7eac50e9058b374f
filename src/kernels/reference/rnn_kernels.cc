// Reference kernels for Gru and Lstm: ONNX's equations step by step, each product summed in
// double, one direction after the other; and for their gradients GruGrad and LstmGrad,
// backpropagation through time.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/op_names.h"

namespace sf {

namespace {

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// The sizes, direction and inputs x, w, r, b, h0 of one Gru/Lstm node or its gradient.
struct Recurrence {
  int64_t steps, batch, in, hidden, dirs, gates;
  bool reverse;
  const float *x, *w, *r, *b, *h0;

  Recurrence(const KernelContext& ctx, int64_t gate_count)
      : steps(ctx.inputs[0].dim(0)),
        batch(ctx.inputs[0].dim(1)),
        in(ctx.inputs[0].dim(2)),
        hidden(ctx.inputs[1].dim(1) / gate_count),
        dirs(ctx.inputs[1].dim(0)),
        gates(gate_count),
        reverse(ctx.node.attrs.get_string("direction") == "reverse"),
        x(ctx.inputs[0].data<float>()),
        w(ctx.inputs[1].data<float>()),
        r(ctx.inputs[2].data<float>()),
        b(ctx.inputs[3].data<float>()),
        h0(ctx.inputs[4].data<float>()) {}

  // Time index of step i in direction d (a bidirectional node's second runs backwards).
  int64_t time(int64_t d, int64_t i) const { return (reverse || d == 1) ? steps - 1 - i : i; }
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

// The gradients of x, w, r and b, summed in double over the steps, batch rows and directions
// of a GruGrad / LstmGrad node, then written to its outputs 0 to 3.
class WeightGradients {
 public:
  explicit WeightGradients(const Recurrence& rc)
      : rc_(rc),
        dx_(static_cast<size_t>(rc.steps * rc.batch * rc.in)),
        dw_(static_cast<size_t>(rc.dirs * rc.gates * rc.hidden * rc.in)),
        dr_(static_cast<size_t>(rc.dirs * rc.gates * rc.hidden * rc.hidden)),
        db_(static_cast<size_t>(rc.dirs * 2 * rc.gates * rc.hidden)) {}

  // Backpropagates `da`, the gradient of gate g's pre-activation at unit j, into its input part
  // W x_t + Wb.
  void input(int64_t d, int64_t t, int64_t n, int64_t g, int64_t j, double da) {
    const int64_t row = d * rc_.gates * rc_.hidden + g * rc_.hidden + j;
    const int64_t xt = (t * rc_.batch + n) * rc_.in;
    for (int64_t k = 0; k < rc_.in; ++k) {
      dw_[static_cast<size_t>(row * rc_.in + k)] += da * rc_.x[xt + k];
      dx_[static_cast<size_t>(xt + k)] += da * rc_.w[row * rc_.in + k];
    }
    db_[static_cast<size_t>(d * 2 * rc_.gates * rc_.hidden + g * rc_.hidden + j)] += da;
  }
  // The same for its recurrent part R v + Rb, adding R^T da into dv.
  void recurrent(int64_t d, int64_t g, int64_t j, double da, const float* v, double* dv) {
    const int64_t row = d * rc_.gates * rc_.hidden + g * rc_.hidden + j;
    for (int64_t k = 0; k < rc_.hidden; ++k) {
      dr_[static_cast<size_t>(row * rc_.hidden + k)] += da * v[k];
      dv[k] += da * rc_.r[row * rc_.hidden + k];
    }
    db_[static_cast<size_t>(d * 2 * rc_.gates * rc_.hidden + (rc_.gates + g) * rc_.hidden + j)] +=
        da;
  }

  void write(KernelContext& ctx) const {
    int output = 0;
    for (const std::vector<double>* sums : {&dx_, &dw_, &dr_, &db_})
      std::copy(sums->begin(), sums->end(), ctx.outputs[output++].data<float>());
  }

 private:
  const Recurrence& rc_;
  std::vector<double> dx_, dw_, dr_, db_;
};

// One GRU step of direction d at time t for batch row n from state h: each unit's gates, the
// reset state r * h, the recurrent part that builds the candidate (R_h (r * h) + Rb_h, or with
// linear_before_reset R_h h + Rb_h, which r then scales), the candidate and the new state.
// gru() keeps the last step's; gru_grad() every step's, to walk them backwards.
struct GruStep {
  double *z, *reset, *recurrent_h, *candidate;
  float *reset_h, *next;

  void run(const Recurrence& rc, bool linear_before_reset, int64_t d, int64_t t, int64_t n,
           const float* h) const {
    for (int64_t j = 0; j < rc.hidden; ++j) {
      z[j] = sigmoid(rc.input_part(d, t, n, 0, j) + rc.recurrent_part(d, 0, j, h));
      reset[j] = sigmoid(rc.input_part(d, t, n, 1, j) + rc.recurrent_part(d, 1, j, h));
      reset_h[j] = static_cast<float>(reset[j] * h[j]);
    }
    for (int64_t j = 0; j < rc.hidden; ++j) {
      recurrent_h[j] =
          linear_before_reset ? rc.recurrent_part(d, 2, j, h) : rc.recurrent_part(d, 2, j, reset_h);
      candidate[j] = std::tanh(rc.input_part(d, t, n, 2, j) +
                               (linear_before_reset ? reset[j] : 1.0) * recurrent_h[j]);
      next[j] = static_cast<float>((1.0 - z[j]) * candidate[j] + z[j] * h[j]);
    }
  }
};

// One LSTM step likewise from state h and cell c: gates i, o, f, the tanh of the cell input,
// the new cell before rounding to float, and the new cell and state. `peepholes` is direction
// d's [3, H] (i, o, f), or null.
struct LstmStep {
  double *input_gate, *output_gate, *forget_gate, *cell_input, *cell;
  float *next_cell, *next;

  void run(const Recurrence& rc, const float* peepholes, int64_t d, int64_t t, int64_t n,
           const float* h, const float* c) const {
    const auto peep = [&](int64_t k, int64_t j) {
      return peepholes ? static_cast<double>(peepholes[k * rc.hidden + j]) : 0.0;
    };
    for (int64_t j = 0; j < rc.hidden; ++j) {
      const auto pre = [&](int64_t g) {
        return rc.input_part(d, t, n, g, j) + rc.recurrent_part(d, g, j, h);
      };
      const double c_prev = c[j];
      input_gate[j] = sigmoid(pre(0) + peep(0, j) * c_prev);
      forget_gate[j] = sigmoid(pre(2) + peep(2, j) * c_prev);
      cell_input[j] = std::tanh(pre(3));
      cell[j] = forget_gate[j] * c_prev + input_gate[j] * cell_input[j];
      output_gate[j] = sigmoid(pre(1) + peep(1, j) * cell[j]);
      next_cell[j] = static_cast<float>(cell[j]);
      next[j] = static_cast<float>(output_gate[j] * std::tanh(cell[j]));
    }
  }
};

void gru(KernelContext& ctx) {
  const Recurrence rc(ctx, 3);
  const bool linear_before_reset = ctx.node.attrs.get_bool("linear_before_reset");
  const int64_t H = rc.hidden, N = rc.batch;
  const size_t units = static_cast<size_t>(H);
  float* y = ctx.outputs[0].data<float>();
  float* y_h = ctx.outputs[1].data<float>();
  std::vector<float> h(units), reset_h(units), next(units);
  std::vector<double> z(units), reset(units), recurrent_h(units), candidate(units);
  const GruStep step{z.data(),         reset.data(),   recurrent_h.data(),
                     candidate.data(), reset_h.data(), next.data()};
  for (int64_t d = 0; d < rc.dirs; ++d)
    for (int64_t n = 0; n < N; ++n) {
      const float* h0 = rc.h0 + (d * N + n) * H;
      h.assign(h0, h0 + H);
      for (int64_t i = 0; i < rc.steps; ++i) {
        const int64_t t = rc.time(d, i);
        step.run(rc, linear_before_reset, d, t, n, h.data());
        h = next;
        std::copy(h.begin(), h.end(), y + ((t * rc.dirs + d) * N + n) * H);
      }
      std::copy(h.begin(), h.end(), y_h + (d * N + n) * H);
    }
}

// Lstm(x, w, r, b, h0, c0, p) -> y, y_h, y_c.
void lstm(KernelContext& ctx) {
  const Recurrence rc(ctx, 4);
  const bool peepholes = ctx.node.attrs.get_bool("peepholes");
  const int64_t H = rc.hidden, N = rc.batch;
  const size_t units = static_cast<size_t>(H);
  float* y = ctx.outputs[0].data<float>();
  float* y_h = ctx.outputs[1].data<float>();
  float* y_c = ctx.outputs[2].data<float>();
  std::vector<float> h(units), cell(units), next_h(units), next_cell(units);
  std::vector<double> input_gate(units), output_gate(units), forget_gate(units), cell_input(units),
      cell_sum(units);
  const LstmStep step{input_gate.data(), output_gate.data(), forget_gate.data(), cell_input.data(),
                      cell_sum.data(),   next_cell.data(),   next_h.data()};
  for (int64_t d = 0; d < rc.dirs; ++d) {
    const float* p = peepholes ? ctx.inputs[6].data<float>() + d * 3 * H : nullptr;
    for (int64_t n = 0; n < N; ++n) {
      const float* h0 = rc.h0 + (d * N + n) * H;
      const float* c0 = ctx.inputs[5].data<float>() + (d * N + n) * H;
      h.assign(h0, h0 + H);
      cell.assign(c0, c0 + H);
      for (int64_t i = 0; i < rc.steps; ++i) {
        const int64_t t = rc.time(d, i);
        step.run(rc, p, d, t, n, h.data(), cell.data());
        h = next_h;
        cell = next_cell;
        std::copy(h.begin(), h.end(), y + ((t * rc.dirs + d) * N + n) * H);
      }
      std::copy(h.begin(), h.end(), y_h + (d * N + n) * H);
      std::copy(cell.begin(), cell.end(), y_c + (d * N + n) * H);
    }
  }
}

// GruGrad(x, w, r, b, h0, dy, dy_h) -> dx, dw, dr, db, dh0. Each batch row's pass is recomputed
// here, as gru() computes it, keeping every step's incoming state and gates, then walked
// backwards: recomputing costs one more forward pass but keeps the Gru node's outputs as they
// are (no saved activations to carry between the nodes).
void gru_grad(KernelContext& ctx) {
  const Recurrence rc(ctx, 3);
  const bool linear_before_reset = ctx.node.attrs.get_bool("linear_before_reset");
  const int64_t H = rc.hidden, N = rc.batch, T = rc.steps;
  const auto at = [](int64_t i) { return static_cast<size_t>(i); };
  const float* dy = ctx.inputs[5].data<float>();
  const float* dy_h = ctx.inputs[6].data<float>();
  float* dh0 = ctx.outputs[4].data<float>();
  WeightGradients grads(rc);
  // GruStep's values for every step i and unit j (index i * H + j); states[(i + 1) * H + j] is
  // the state step i wrote, states[i * H + j] the one it read.
  std::vector<float> states(at((T + 1) * H)), reset_h(at(T * H));
  std::vector<double> z(at(T * H)), reset(at(T * H)), candidate(at(T * H)), recurrent_h(at(T * H));
  std::vector<double> dh(at(H)), dh_prev(at(H)), da_z(at(H)), da_r(at(H)), da_h(at(H)),
      d_reset_h(at(H));
  for (int64_t d = 0; d < rc.dirs; ++d)
    for (int64_t n = 0; n < N; ++n) {
      const float* h0 = rc.h0 + (d * N + n) * H;
      std::copy(h0, h0 + H, states.begin());
      for (int64_t i = 0; i < T; ++i) {
        const size_t s = at(i * H);
        const GruStep step{&z[s],         &reset[s],   &recurrent_h[s],
                           &candidate[s], &reset_h[s], &states[s + at(H)]};
        step.run(rc, linear_before_reset, d, rc.time(d, i), n, &states[s]);
      }
      for (int64_t j = 0; j < H; ++j) dh[at(j)] = dy_h[(d * N + n) * H + j];
      for (int64_t i = T - 1; i >= 0; --i) {
        const int64_t t = rc.time(d, i);
        const float* h = &states[at(i * H)];
        std::fill(dh_prev.begin(), dh_prev.end(), 0.0);
        std::fill(d_reset_h.begin(), d_reset_h.end(), 0.0);
        for (int64_t j = 0; j < H; ++j) {
          const size_t s = at(i * H + j);
          const double dh_j = dh[at(j)] + dy[((t * rc.dirs + d) * N + n) * H + j];
          dh_prev[at(j)] += dh_j * z[s];
          da_z[at(j)] = dh_j * (h[j] - candidate[s]) * z[s] * (1.0 - z[s]);
          da_h[at(j)] = dh_j * (1.0 - z[s]) * (1.0 - candidate[s] * candidate[s]);
        }
        for (int64_t j = 0; j < H; ++j) {
          const size_t s = at(i * H + j);
          if (linear_before_reset) {
            da_r[at(j)] = da_h[at(j)] * recurrent_h[s];
            grads.recurrent(d, 2, j, da_h[at(j)] * reset[s], h, dh_prev.data());
          } else {
            grads.recurrent(d, 2, j, da_h[at(j)], &reset_h[at(i * H)], d_reset_h.data());
          }
        }
        for (int64_t j = 0; j < H; ++j) {
          const size_t s = at(i * H + j);
          if (!linear_before_reset) {
            da_r[at(j)] = d_reset_h[at(j)] * h[j];
            dh_prev[at(j)] += d_reset_h[at(j)] * reset[s];
          }
          da_r[at(j)] *= reset[s] * (1.0 - reset[s]);
        }
        for (int64_t j = 0; j < H; ++j) {
          grads.input(d, t, n, 0, j, da_z[at(j)]);
          grads.input(d, t, n, 1, j, da_r[at(j)]);
          grads.input(d, t, n, 2, j, da_h[at(j)]);
          grads.recurrent(d, 0, j, da_z[at(j)], h, dh_prev.data());
          grads.recurrent(d, 1, j, da_r[at(j)], h, dh_prev.data());
        }
        dh = dh_prev;
      }
      for (int64_t j = 0; j < H; ++j) dh0[(d * N + n) * H + j] = static_cast<float>(dh[at(j)]);
    }
  grads.write(ctx);
}

// LstmGrad(x, w, r, b, h0, c0, p, dy, dy_h, dy_c) -> dx, dw, dr, db, dh0, dc0, dp, recomputing
// the forward pass as gru_grad does. dp stays zero without peepholes (lstm() reads no p).
void lstm_grad(KernelContext& ctx) {
  const Recurrence rc(ctx, 4);
  const bool peepholes = ctx.node.attrs.get_bool("peepholes");
  const int64_t H = rc.hidden, N = rc.batch, T = rc.steps;
  const auto at = [](int64_t i) { return static_cast<size_t>(i); };
  const float* dy = ctx.inputs[7].data<float>();
  const float* dy_h = ctx.inputs[8].data<float>();
  const float* dy_c = ctx.inputs[9].data<float>();
  float* dh0 = ctx.outputs[4].data<float>();
  float* dc0 = ctx.outputs[5].data<float>();
  float* dp = ctx.outputs[6].data<float>();
  std::fill(dp, dp + ctx.outputs[6].numel(), 0.0f);
  WeightGradients grads(rc);
  // LstmStep's values for every step i and unit j (index i * H + j); states and cells at
  // (i + 1) * H + j hold what step i wrote, at i * H + j what it read.
  std::vector<float> states(at((T + 1) * H)), cells(at((T + 1) * H));
  std::vector<double> input_gate(at(T * H)), output_gate(at(T * H)), forget_gate(at(T * H)),
      cell_input(at(T * H)), cell(at(T * H));
  std::vector<double> dh(at(H)), dc(at(H)), dh_prev(at(H)), dc_prev(at(H));
  // The gradients of the four gates' pre-activations (i, o, f, c) at each unit.
  std::vector<double> da(at(4 * H));
  for (int64_t d = 0; d < rc.dirs; ++d) {
    const float* p = peepholes ? ctx.inputs[6].data<float>() + d * 3 * H : nullptr;
    const auto peep = [&](int64_t k, int64_t j) {
      return p ? static_cast<double>(p[k * H + j]) : 0.0;
    };
    for (int64_t n = 0; n < N; ++n) {
      const float* h0 = rc.h0 + (d * N + n) * H;
      const float* c0 = ctx.inputs[5].data<float>() + (d * N + n) * H;
      std::copy(h0, h0 + H, states.begin());
      std::copy(c0, c0 + H, cells.begin());
      for (int64_t i = 0; i < T; ++i) {
        const size_t s = at(i * H);
        const LstmStep step{&input_gate[s], &output_gate[s],   &forget_gate[s],   &cell_input[s],
                            &cell[s],       &cells[s + at(H)], &states[s + at(H)]};
        step.run(rc, p, d, rc.time(d, i), n, &states[s], &cells[s]);
      }
      for (int64_t j = 0; j < H; ++j) {
        dh[at(j)] = dy_h[(d * N + n) * H + j];
        dc[at(j)] = dy_c[(d * N + n) * H + j];
      }
      for (int64_t i = T - 1; i >= 0; --i) {
        const int64_t t = rc.time(d, i);
        const float* h = &states[at(i * H)];
        std::fill(dh_prev.begin(), dh_prev.end(), 0.0);
        for (int64_t j = 0; j < H; ++j) {
          const size_t s = at(i * H + j);
          const double c_prev = cells[s], ig = input_gate[s], og = output_gate[s],
                       fg = forget_gate[s], g = cell_input[s], tanh_c = std::tanh(cell[s]);
          const double dh_j = dh[at(j)] + dy[((t * rc.dirs + d) * N + n) * H + j];
          const double da_o = dh_j * tanh_c * og * (1.0 - og);
          const double dc_j = dc[at(j)] + dh_j * og * (1.0 - tanh_c * tanh_c) + da_o * peep(1, j);
          const double da_i = dc_j * g * ig * (1.0 - ig);
          const double da_f = dc_j * c_prev * fg * (1.0 - fg);
          da[at(0 * H + j)] = da_i;
          da[at(1 * H + j)] = da_o;
          da[at(2 * H + j)] = da_f;
          da[at(3 * H + j)] = dc_j * ig * (1.0 - g * g);
          dc_prev[at(j)] = dc_j * fg + da_i * peep(0, j) + da_f * peep(2, j);
          if (peepholes) {
            dp[(d * 3 + 0) * H + j] += static_cast<float>(da_i * c_prev);
            dp[(d * 3 + 1) * H + j] += static_cast<float>(da_o * cell[s]);
            dp[(d * 3 + 2) * H + j] += static_cast<float>(da_f * c_prev);
          }
        }
        for (int64_t g = 0; g < 4; ++g)
          for (int64_t j = 0; j < H; ++j) {
            grads.input(d, t, n, g, j, da[at(g * H + j)]);
            grads.recurrent(d, g, j, da[at(g * H + j)], h, dh_prev.data());
          }
        dh = dh_prev;
        dc = dc_prev;
      }
      for (int64_t j = 0; j < H; ++j) {
        dh0[(d * N + n) * H + j] = static_cast<float>(dh[at(j)]);
        dc0[(d * N + n) * H + j] = static_cast<float>(dc[at(j)]);
      }
    }
  }
  grads.write(ctx);
}

}  // namespace

void register_reference_rnn_kernels(KernelRegistry& r) {
  r.add(simple_kernel(op_names::kGru, DType::f32, "reference", gru));
  r.add(simple_kernel(op_names::kLstm, DType::f32, "reference", lstm));
  r.add(simple_kernel(op_names::kGruGrad, DType::f32, "reference", gru_grad));
  r.add(simple_kernel(op_names::kLstmGrad, DType::f32, "reference", lstm_grad));
}

}  // namespace sf
