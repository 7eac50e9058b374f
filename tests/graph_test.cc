#include <gtest/gtest.h>

#include "graph/graph.h"
#include "ops/ops.h"

namespace sf {
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

}  // namespace
}  // namespace sf
