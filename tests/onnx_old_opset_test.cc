// Models of opsets before 9 import through the ONNX library's version converter; the README's
// list of supported ONNX ops is the importer's (generated, and checked here).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <fstream>
#include <sstream>

#include "onnx/importer.h"
#include "support/mnist.h"
#include "support/onnx_models.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

TEST(OnnxOldOpsets, Opset7ModelIsUpgradedAndRuns) {
  onnx::ModelProto m = testing::new_onnx_model(7);
  testing::add_input(m, "x", {1, 2, 4, 4});
  testing::add_init(m, "w", {2, 2, 3, 3}, testing::random_values(36, 3));
  testing::add_output(m, "y");
  // Old models go through the ONNX checker before the version converter, and the checker wants
  // the shape of every graph output, as exporters write it.
  for (int d : {1, 2, 4, 4})
    m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()
        ->add_dim()->set_dim_value(d);
  onnx::NodeProto* conv = testing::add_node(m, "Conv", {"x", "w"}, {"c"}, "conv");
  testing::set_ints(conv, "pads", {1, 1, 1, 1});
  testing::add_node(m, "Relu", {"c"}, {"y"}, "relu");
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  const ModelFile model = import_onnx_bytes(bytes, "old.onnx");
  EXPECT_EQ(model.metadata.at("onnx_opset"), "9");
  const Tensor y = testing::run_model(model, testing::random_tensor({1, 2, 4, 4}, 4));
  EXPECT_EQ(y.shape(), (Shape{1, 2, 4, 4}));
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_GE(y.data<float>()[i], 0.0f);
}

TEST(OnnxOldOpsets, ReadmeListsTheImportersOps) {
  std::ifstream in(testing::source_path("README.md"));
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const std::string begin = "<!-- onnx-ops begin -->\n", end = "\n<!-- onnx-ops end -->";
  const size_t from = readme.find(begin), to = readme.find(end);
  ASSERT_NE(from, std::string::npos);
  ASSERT_NE(to, std::string::npos);
  const std::string listed = readme.substr(from + begin.size(), to - from - begin.size());
  EXPECT_EQ(listed, supported_onnx_ops_markdown())
      << "regenerate with build/release/tests/onnx_conformance --supported-ops";
}

}  // namespace
}  // namespace sf
