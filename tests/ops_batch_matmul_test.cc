// BatchMatMul (ONNX MatMul on rank >= 3): shapes with broadcast batch dimensions, values against
// per-batch matrix products, gradients by finite differences (the kernel registry test holds
// the oneDNN kernel to the reference on tests/support/kernel_cases.cc's shapes).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "graph/graph.h"
#include "onnx/importer.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/onnx_models.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

Shape output_shape(Shape a, Shape b, bool ta = false, bool tb = false) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, a, "a");
  Output y = ops::placeholder(g, DType::f32, b, "b");
  return g.type(ops::batch_matmul(g, x, y, ta, tb, "bmm")).shape;
}

TEST(BatchMatMulTest, BroadcastsBatchDimensions) {
  EXPECT_EQ(output_shape({2, 3, 4}, {2, 4, 5}), (Shape{2, 3, 5}));
  EXPECT_EQ(output_shape({1, 40, 120}, {120, 360}), (Shape{1, 40, 360}));
  EXPECT_EQ(output_shape({2, 1, 3, 4}, {5, 4, 6}), (Shape{2, 5, 3, 6}));
  EXPECT_EQ(output_shape({2, 4, 9, 16}, {2, 4, 9, 16}, false, true), (Shape{2, 4, 9, 9}));
  try {
    output_shape({2, 3, 4}, {3, 4, 5});
    FAIL() << "batch 2 vs 3 must not broadcast";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch dimensions do not broadcast"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(output_shape({2, 3, 4}, {2, 5, 6}), Error);
}

TEST(BatchMatMulTest, EachBatchIsAMatrixProduct) {
  const Tensor a = testing::random_tensor({2, 1, 3, 4}, 1);
  const Tensor b = testing::random_tensor({3, 4, 5}, 2);
  Graph g;
  Output y = ops::batch_matmul(g, ops::constant(g, a), ops::constant(g, b));
  Session session(g);
  const Tensor out = session.run({}, {y})[0].clone();
  ASSERT_EQ(out.shape(), (Shape{2, 3, 3, 5}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t c = 0; c < 5; ++c) {
          double want = 0;
          for (int64_t p = 0; p < 4; ++p)
            want += a.data<float>()[(i * 3 + r) * 4 + p] * b.data<float>()[(j * 4 + p) * 5 + c];
          EXPECT_NEAR(out.data<float>()[((i * 3 + j) * 3 + r) * 5 + c], want, 1e-5);
        }
}

TEST(BatchMatMulTest, GradientsMatchFiniteDifferences) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  for (const Case& c : {Case{{2, 3, 4}, {2, 4, 5}, false, false},
                        Case{{2, 1, 3, 4}, {3, 5, 4}, false, true},
                        Case{{3, 4, 2}, {4, 3}, true, false},
                        Case{{4, 2}, {2, 3, 4}, true, true}}) {
    SCOPED_TRACE(shape_str(c.a) + " x " + shape_str(c.b));
    testing::expect_gradients_match(
        [&](Graph& g, const std::vector<Output>& in) {
          return ops::batch_matmul(g, in[0], in[1], c.ta, c.tb);
        },
        {testing::random_tensor(c.a, 3), testing::random_tensor(c.b, 4)}, 5);
  }
}

// The text recognizer's first attention block: MatMul [1,40,120] x [120,360] imports.
TEST(BatchMatMulTest, OnnxMatMulOfRankThreeImports) {
  onnx::ModelProto m = testing::new_onnx_model(13);
  testing::add_input(m, "x", {1, 40, 120});
  testing::add_init(m, "w", {120, 360}, testing::random_values(120 * 360, 9));
  testing::add_output(m, "y");
  testing::add_node(m, "MatMul", {"x", "w"}, {"y"}, "p2o.MatMul.0");
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  const ModelFile model = import_onnx_bytes(bytes, "recognizer.onnx");
  EXPECT_EQ(testing::count_ops(model, op_names::kBatchMatMul), 1);
  const Tensor x = testing::random_tensor({1, 40, 120}, 10);
  EXPECT_EQ(testing::run_model(model, x).shape(), (Shape{1, 40, 360}));
}

}  // namespace
}  // namespace sf
