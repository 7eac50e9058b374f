// Gru and Lstm are inference ops (their kernels are checked against the reference by
// kernel_registry_test's shape sets, ONNX's node tests and onnx_rnn_test): differentiating
// through one fails naming the node.
#include <gtest/gtest.h>

#include "autodiff/gradients.h"
#include "graph/graph.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "support/testing.h"

namespace sf {
namespace {

TEST(RnnOps, DifferentiatingFailsNamingTheNode) {
  Graph g;
  const int64_t H = 2;
  Output x = ops::placeholder(g, DType::f32, {2, 1, 3});
  Output gru = g.add(
      op_names::kGru,
      {x, ops::placeholder(g, DType::f32, {1, 3 * H, 3}),
       ops::placeholder(g, DType::f32, {1, 3 * H, H}), ops::placeholder(g, DType::f32, {1, 6 * H}),
       ops::placeholder(g, DType::f32, {1, 1, H})},
      {}, "encoder_gru");
  Output loss = ops::reduce_sum(g, gru, {0, 1, 2, 3});
  testing::expect_error([&] { gradients(g, loss, {x}); },
                        "node 'encoder_gru' (Gru): op has no gradient");
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
