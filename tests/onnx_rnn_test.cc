// GRU and LSTM import: linear_before_reset against a GRU written out here, the reverse and
// bidirectional forms against forward runs on the time-reversed sequence (the forward forms are
// checked by ONNX's node tests in onnx_conformance), and training through imported layers.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>

#include "autodiff/gradients.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/fed_gradients.h"
#include "support/onnx_models.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using namespace testing;

constexpr int64_t T = 3, N = 2, I = 3, H = 4;

struct Weights {
  std::vector<float> w, r, b;
};

Weights random_weights(int64_t gates, int64_t dirs, uint32_t seed) {
  return {random_values(dirs * gates * H * I, seed), random_values(dirs * gates * H * H, seed + 1),
          random_values(dirs * 2 * gates * H, seed + 2)};
}

// Direction d of weights holding `dirs`.
Weights direction(const Weights& all, int64_t gates, int64_t d) {
  const auto part = [&](const std::vector<float>& v, int64_t size) {
    return std::vector<float>(v.begin() + d * size, v.begin() + (d + 1) * size);
  };
  return {part(all.w, gates * H * I), part(all.r, gates * H * H), part(all.b, 2 * gates * H)};
}

// The ONNX model of one GRU/LSTM node on x [T, N, I] (output Y [T, dirs, N, H]), with an
// initial state when asked.
std::string rnn_model(const std::string& op, const std::string& dir, const Weights& wts,
                      int64_t linear_before_reset = 0, bool initial_state = false) {
  const int64_t gates = op == "GRU" ? 3 : 4, dirs = dir == "bidirectional" ? 2 : 1;
  onnx::ModelProto m = new_onnx_model(14);
  add_input(m, "x", {T, N, I});
  add_init(m, "w", {dirs, gates * H, I}, wts.w);
  add_init(m, "r", {dirs, gates * H, H}, wts.r);
  add_init(m, "b", {dirs, 2 * gates * H}, wts.b);
  std::vector<std::string> inputs = {"x", "w", "r", "b"};
  if (initial_state) {
    add_init(m, "h0", {dirs, N, H}, random_values(dirs * N * H, 77));
    inputs.insert(inputs.end(), {"", "h0"});
  }
  onnx::NodeProto* n = add_node(m, op, inputs, {"y"}, "rnn");
  set_int(n, "hidden_size", H);
  if (op == "GRU") set_int(n, "linear_before_reset", linear_before_reset);
  set_string(n, "direction", dir);
  add_output(m, "y");
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  return bytes;
}

// Output Y [T, dirs, N, H] of one GRU/LSTM node on x [T, N, I].
Tensor run_rnn(const std::string& op, const std::string& dir, const Weights& wts, const Tensor& x,
               int64_t linear_before_reset = 0) {
  return run_model(import_onnx_bytes(rnn_model(op, dir, wts, linear_before_reset), "rnn.onnx"), x);
}

Tensor reversed_in_time(const Tensor& x) {
  Tensor r(x.dtype(), x.shape());
  const int64_t step = x.numel() / T;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < step; ++i)
      r.data<float>()[(T - 1 - t) * step + i] = x.data<float>()[t * step + i];
  return r;
}

TEST(OnnxRnn, ReverseAndBidirectionalMatchForwardOnTheReversedSequence) {
  const Tensor x = random_tensor({T, N, I}, 1);
  for (const std::string op : {"GRU", "LSTM"}) {
    SCOPED_TRACE(op);
    const int64_t gates = op == "GRU" ? 3 : 4;
    const Weights both = random_weights(gates, 2, 2);
    const Tensor bi = run_rnn(op, "bidirectional", both, x);
    const Tensor fw = run_rnn(op, "forward", direction(both, gates, 0), x);
    const Tensor bw = run_rnn(op, "reverse", direction(both, gates, 1), x);
    const Tensor bw_as_fw = run_rnn(op, "forward", direction(both, gates, 1), reversed_in_time(x));
    ASSERT_EQ(bi.shape(), (Shape{T, 2, N, H}));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < N * H; ++i) {
        const float reverse = bw_as_fw.data<float>()[(T - 1 - t) * N * H + i];
        EXPECT_NEAR(bi.data<float>()[(t * 2 + 0) * N * H + i], fw.data<float>()[t * N * H + i],
                    1e-6);
        EXPECT_NEAR(bi.data<float>()[(t * 2 + 1) * N * H + i], reverse, 1e-6);
        EXPECT_NEAR(bw.data<float>()[t * N * H + i], reverse, 1e-6);
      }
  }
}

TEST(OnnxRnn, GruLinearBeforeResetMatchesTheDefinition) {
  const Tensor x = random_tensor({T, N, I}, 5);
  const Weights wts = random_weights(3, 1, 6);
  const Tensor y = run_rnn("GRU", "forward", wts, x, 1);
  const auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  std::vector<double> h(N * H, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> next(h.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < H; ++j) {
        // Gate g's input and recurrent parts (with their biases) for unit j.
        const auto part = [&](int64_t g, bool recurrent) {
          const int64_t row = g * H + j;
          double s = wts.b[static_cast<size_t>((recurrent ? 3 * H : 0) + row)];
          if (recurrent)
            for (int64_t k = 0; k < H; ++k)
              s += wts.r[static_cast<size_t>(row * H + k)] * h[n * H + k];
          else
            for (int64_t k = 0; k < I; ++k)
              s += wts.w[static_cast<size_t>(row * I + k)] * x.data<float>()[(t * N + n) * I + k];
          return s;
        };
        const double z = sigmoid(part(0, false) + part(0, true));
        const double r = sigmoid(part(1, false) + part(1, true));
        const double candidate = std::tanh(part(2, false) + r * part(2, true));
        next[n * H + j] = (1 - z) * candidate + z * h[n * H + j];
      }
    h = next;
    for (int64_t i = 0; i < N * H; ++i)
      EXPECT_NEAR(y.data<float>()[t * N * H + i], h[i], 1e-5) << "t=" << t << " i=" << i;
  }
}

// Exported back to ONNX, an imported GRU / LSTM is one GRU / LSTM node again and computes the
// same outputs once imported.
TEST(OnnxRnn, GruAndLstmExportAsOneNodeAndRoundTrip) {
  const Tensor x = random_tensor({T, N, I}, 31);
  struct Case {
    const char* op;
    const char* dir;
    int64_t linear_before_reset;
  };
  for (const Case& k : {Case{"GRU", "bidirectional", 1}, Case{"GRU", "forward", 0},
                        Case{"LSTM", "reverse", 0}, Case{"LSTM", "bidirectional", 0}}) {
    SCOPED_TRACE(std::string(k.op) + " " + k.dir);
    const int64_t gates = std::string(k.op) == "GRU" ? 3 : 4;
    const int64_t dirs = std::string(k.dir) == "bidirectional" ? 2 : 1;
    const ModelFile imported = import_onnx_bytes(
        rnn_model(k.op, k.dir, random_weights(gates, dirs, 41), k.linear_before_reset, true),
        "rnn.onnx");
    const std::string exported = export_onnx_bytes(imported, "rnn.sfm");
    onnx::ModelProto proto;
    ASSERT_TRUE(proto.ParseFromString(exported));
    int recurrent_nodes = 0;
    for (const onnx::NodeProto& n : proto.graph().node()) recurrent_nodes += n.op_type() == k.op;
    EXPECT_EQ(recurrent_nodes, 1);
    const Tensor want = run_model(imported, x);
    const Tensor got = run_model(import_onnx_bytes(exported, "exported.onnx"), x);
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < want.numel(); ++i)
      EXPECT_FLOAT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
  }
}

// The ONNX model of one GRU / LSTM node whose x and W are graph inputs (as a model being
// fine-tuned feeds its weights), batch-first when `layout` is 1, with peepholes for the LSTM.
std::string trainable_rnn_model(const std::string& op, const std::string& dir, int64_t layout) {
  const int64_t gates = op == "GRU" ? 3 : 4, dirs = dir == "bidirectional" ? 2 : 1;
  const Weights wts = random_weights(gates, dirs, 51);
  onnx::ModelProto m = new_onnx_model(14);
  add_input(m, "x", layout == 1 ? Shape{N, T, I} : Shape{T, N, I});
  add_input(m, "w", {dirs, gates * H, I});
  add_init(m, "r", {dirs, gates * H, H}, wts.r);
  add_init(m, "b", {dirs, 2 * gates * H}, wts.b);
  std::vector<std::string> inputs = {"x", "w", "r", "b"};
  if (op == "LSTM") {
    add_init(m, "p", {dirs, 3 * H}, random_values(dirs * 3 * H, 52));
    inputs.insert(inputs.end(), {"", "", "", "p"});
  }
  // Y_h is computed but not a graph output: nothing downstream reads it.
  onnx::NodeProto* n = add_node(m, op, inputs, {"y", "y_h"}, "rnn");
  set_int(n, "hidden_size", H);
  set_int(n, "layout", layout);
  if (op == "GRU") set_int(n, "linear_before_reset", 1);
  set_string(n, "direction", dir);
  add_output(m, "y");
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  return bytes;
}

// d(sum(y * R)) / d(x) and / d(W) of imported layers match central differences of the loss the
// same session computes, and a few gradient-descent steps on W lower that loss.
TEST(OnnxRnn, ImportedGruAndLstmTrainWithGradientsMatchingFiniteDifferences) {
  struct Case {
    const char* op;
    const char* dir;
    int64_t layout;
  };
  for (const Case& k : {Case{"GRU", "bidirectional", 0}, Case{"GRU", "reverse", 1},
                        Case{"LSTM", "bidirectional", 1}, Case{"LSTM", "forward", 0}}) {
    SCOPED_TRACE(std::string(k.op) + " " + k.dir + " layout " + std::to_string(k.layout));
    ModelFile model = import_onnx_bytes(trainable_rnn_model(k.op, k.dir, k.layout), "rnn.onnx");
    Graph& g = model.graph;
    const Output x{g.id_of(model.inputs.at(0)), 0}, w{g.id_of(model.inputs.at(1)), 0};
    const Output y{g.id_of(model.outputs.at(0)), 0};
    const Shape y_shape = g.type(y).shape;
    Output loss = ops::reduce_sum(g, ops::mul(g, y, ops::constant(g, random_tensor(y_shape, 53))),
                                  {0, 1, 2, 3}, false, "loss");
    const std::vector<Output> grads = gradients(g, loss, {x, w});
    std::vector<Tensor> values{random_tensor(g.type(x).shape, 54),
                               random_tensor(g.type(w).shape, 55)};
    Session session(g);
    testing::expect_fed_gradients_match(session, loss, {x, w}, values, grads);
    if (::testing::Test::HasFatalFailure()) return;
    const auto feeds = [&] { return testing::feeds_of({x, w}, values); };
    const auto loss_now = [&] {
      return static_cast<double>(session.run(feeds(), {loss})[0].data<float>()[0]);
    };
    double before = loss_now();
    for (int step = 0; step < 3; ++step) {
      const Tensor dw = session.run(feeds(), {grads[1]})[0].clone();
      for (int64_t e = 0; e < dw.numel(); ++e)
        values[1].data<float>()[e] -= 0.05f * dw.data<float>()[e];
      const double after = loss_now();
      EXPECT_LT(after, before) << "step " << step;
      before = after;
    }
  }
}

}  // namespace
}  // namespace sf
