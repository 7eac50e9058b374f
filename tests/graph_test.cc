#include <gtest/gtest.h>

#include "graph/graph.h"
#include "kernels/kernel.h"
#include "ops/ops.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

TEST(GraphTest, PlaceholderHasDeclaredType) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2, 3}, "x");
  EXPECT_EQ(g.type(x).shape, (Shape{2, 3}));
  EXPECT_EQ(g.node(x.node).name, "x");
}

TEST(GraphTest, UnknownOpNamesTheNode) {
  Graph g;
  try {
    g.add("Conv3D", {}, {}, "mystery");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "node 'mystery': unknown op 'Conv3D'");
  }
}

TEST(GraphTest, UnknownAttributeListsKnownOnes) {
  Graph g;
  try {
    g.add("Placeholder", {}, {{"shape", Shape{1}}, {"shpe", Shape{1}}}, "x");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "node 'x' (Placeholder): unknown attribute 'shpe' (known: dtype, shape)");
  }
}

TEST(GraphTest, DuplicateNameIsAnError) {
  Graph g;
  ops::placeholder(g, DType::f32, {1}, "x");
  EXPECT_THROW(ops::placeholder(g, DType::f32, {1}, "x"), Error);
}

TEST(KernelRegistryTest, NoKernelListsWhatIsRegistered) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2}, "x");
  Output y = ops::relu(g, x, "r");
  g.mutable_node(y.node).device = "/gpu:0";
  KernelSpec spec{g.node(y.node), {g.type(x)}};
  try {
    KernelRegistry::global().select(spec);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'r' (Relu): no kernel for f32 on /gpu:0 "
                                         "(registered: cpu/f32/reference"),
              std::string::npos)
        << e.what();
  }
}

TEST(KernelRegistryTest, DeviceTypeOfName) {
  EXPECT_EQ(device_type("/cpu:0"), "cpu");
  EXPECT_EQ(device_type("/gpu:1"), "gpu");
}

}  // namespace
}  // namespace sf
