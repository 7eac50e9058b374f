// Gru and Lstm (their kernels are checked against the reference by kernel_registry_test's shape
// sets, ONNX's node tests and onnx_rnn_test) and their gradients GruGrad and LstmGrad, checked
// by finite differences in every direction and variant.
#include <gtest/gtest.h>

#include "autodiff/gradients.h"
#include "graph/graph.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

constexpr int64_t T = 3, N = 2, I = 3, H = 4;

struct RnnCase {
  std::string op;  // Gru or Lstm
  std::string direction;
  bool variant;  // Gru: linear_before_reset; Lstm: peepholes
};

int64_t dirs_of(const RnnCase& k) { return k.direction == "bidirectional" ? 2 : 1; }

// Random inputs x, w, r, b, h0 (and c0, p) of the node of `k`.
std::vector<Tensor> rnn_inputs(const RnnCase& k, uint32_t seed) {
  const int64_t D = dirs_of(k), G = k.op == op_names::kGru ? 3 : 4;
  std::vector<Tensor> in{testing::random_tensor({T, N, I}, seed),
                         testing::random_tensor({D, G * H, I}, seed + 1),
                         testing::random_tensor({D, G * H, H}, seed + 2),
                         testing::random_tensor({D, 2 * G * H}, seed + 3),
                         testing::random_tensor({D, N, H}, seed + 4)};
  if (k.op == op_names::kLstm) {
    in.push_back(testing::random_tensor({D, N, H}, seed + 5));
    in.push_back(testing::random_tensor({D, 3 * H}, seed + 6));
  }
  return in;
}

// Builds the node of `k` and returns the sum of the outputs listed in `used` (0: Y [T, D, N, H];
// 1: Y_h and 2: Y_c [D, N, H], broadcast over time), so that the others get no gradient.
testing::BuildFn rnn_build(const RnnCase& k, std::vector<int> used) {
  return [k, used](Graph& g, const std::vector<Output>& in) {
    Attrs attrs{{"direction", k.direction}};
    attrs.set(k.op == op_names::kGru ? "linear_before_reset" : "peepholes", k.variant);
    const int id = g.add_node(k.op, in, attrs, "rnn");
    Output sum{id, used[0]};
    for (size_t u = 1; u < used.size(); ++u) sum = ops::add(g, sum, Output{id, used[u]});
    return sum;
  };
}

std::string name_of(const RnnCase& k) {
  return k.op + " " + k.direction + (k.variant ? " (variant)" : "");
}

TEST(RnnOps, GruGradientsMatchFiniteDifferences) {
  uint32_t seed = 10;
  for (const char* direction : {"forward", "reverse", "bidirectional"})
    for (const bool linear_before_reset : {false, true}) {
      const RnnCase k{op_names::kGru, direction, linear_before_reset};
      SCOPED_TRACE(name_of(k));
      testing::expect_gradients_match(rnn_build(k, {0, 1}), rnn_inputs(k, seed), seed);
      seed += 10;
    }
}

TEST(RnnOps, LstmGradientsMatchFiniteDifferences) {
  uint32_t seed = 100;
  for (const char* direction : {"forward", "reverse", "bidirectional"})
    for (const bool peepholes : {false, true}) {
      const RnnCase k{op_names::kLstm, direction, peepholes};
      SCOPED_TRACE(name_of(k));
      testing::expect_gradients_match(rnn_build(k, {0, 1, 2}), rnn_inputs(k, seed), seed);
      seed += 10;
    }
}

// An output nothing reads gets a zero gradient inside the one GruGrad / LstmGrad node.
TEST(RnnOps, GradientsFlowFromAnySubsetOfTheOutputs) {
  struct Subset {
    RnnCase k;
    std::vector<int> used;
  };
  uint32_t seed = 200;
  for (const Subset& s : {Subset{{op_names::kGru, "bidirectional", true}, {0}},
                          Subset{{op_names::kGru, "reverse", false}, {1}},
                          Subset{{op_names::kLstm, "bidirectional", true}, {2}},
                          Subset{{op_names::kLstm, "forward", true}, {1}},
                          Subset{{op_names::kLstm, "reverse", false}, {0}}}) {
    SCOPED_TRACE(name_of(s.k) + ", output " + std::to_string(s.used[0]));
    testing::expect_gradients_match(rnn_build(s.k, s.used), rnn_inputs(s.k, seed), seed);
    seed += 10;
  }
}

TEST(RnnOps, OneGradientNodeDifferentiatesTheLayer) {
  Graph g;
  const RnnCase k{op_names::kLstm, "bidirectional", false};
  std::vector<Output> in;
  for (const Tensor& t : rnn_inputs(k, 1)) in.push_back(ops::placeholder(g, DType::f32, t.shape()));
  Output y = rnn_build(k, {0, 2})(g, in);
  Output loss = ops::reduce_sum(g, y, {0, 1, 2, 3});
  const std::vector<Output> grads = gradients(g, loss, in);
  EXPECT_EQ(testing::count_ops(g, op_names::kLstmGrad), 1);
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_TRUE(grads[i].valid()) << i;
    EXPECT_EQ(g.type(grads[i]).shape, g.type(in[i]).shape) << i;
  }
}

TEST(RnnOps, GradientOfTheWrongShapeFailsNamingTheNode) {
  Graph g;
  std::vector<Output> in;
  for (const Shape& s : std::vector<Shape>{{T, N, I},
                                           {1, 3 * H, I},
                                           {1, 3 * H, H},
                                           {1, 6 * H},
                                           {1, N, H},
                                           {T, 1, N, H + 1},
                                           {1, N, H}})
    in.push_back(ops::placeholder(g, DType::f32, s));
  testing::expect_error(
      [&] { g.add(op_names::kGruGrad, in, {}, "gru_backward"); },
      "node 'gru_backward' (GruGrad): dy [3,1,2,5]: must be [3,1,2,4], the shape of the output it "
      "is the gradient of");
}

TEST(RnnOps, MismatchedWeightsFailNamingTheNode) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2, 1, 3});
  testing::expect_error(
      [&] {
        g.add(op_names::kLstm,
              {x, ops::placeholder(g, DType::f32, {1, 8, 4}),
               ops::placeholder(g, DType::f32, {1, 8, 2}), ops::placeholder(g, DType::f32, {1, 16}),
               ops::placeholder(g, DType::f32, {1, 1, 2}),
               ops::placeholder(g, DType::f32, {1, 1, 2}), ops::placeholder(g, DType::f32, {1, 6})},
              {}, "decoder_lstm");
      },
      "node 'decoder_lstm' (Lstm): w [1,8,4] vs x [2,1,3]: must be [1, 4 * hidden, 3]");
}

}  // namespace
}  // namespace sf
