// The analysis half of the rewrite toolkit (transforms/graph_uses.h) and the Activation enum
// its fusions produce.
#include <gtest/gtest.h>

#include "ops/ops.h"
#include "support/testing.h"
#include "transforms/graph_uses.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// x -> m = x + x -> r = relu(m) -> y = -r, and a branch dead = sigmoid(m) that y does not need.
struct Branches {
  Graph g;
  Output x, m, r, y, dead;
  Branches() {
    x = ops::placeholder(g, DType::f32, {2, 3}, "x");
    m = ops::add(g, x, x, "m");
    r = ops::relu(g, m, "r");
    y = ops::neg(g, r, "y");
    dead = ops::sigmoid(g, m, "dead");
  }
};

TEST(GraphUses, NeededNodesAreWhatTheOutputsDependOn) {
  Branches b;
  const std::vector<bool> needed = needed_nodes(b.g, {b.y});
  for (Output o : {b.x, b.m, b.r, b.y}) EXPECT_TRUE(needed[static_cast<size_t>(o.node)]);
  EXPECT_FALSE(needed[static_cast<size_t>(b.dead.node)]);
}

TEST(GraphUses, CountsReadsOfNeededNodesAndOutputs) {
  Branches b;
  const GraphUses uses(b.g, {b.y});
  EXPECT_FALSE(uses.needed(b.dead.node));
  EXPECT_EQ(uses.uses(b.x.node), 2);  // both inputs of m
  EXPECT_EQ(uses.uses(b.m.node), 1);  // the unneeded sigmoid does not count
  EXPECT_EQ(uses.sole_consumer(b.m.node), &b.g.node(b.r.node));
  EXPECT_EQ(fusable_activation(uses, b.m.node), &b.g.node(b.r.node));
  EXPECT_EQ(fused_activation(fusable_activation(uses, b.m.node)), Activation::Relu);
  EXPECT_EQ(fused_activation(nullptr), Activation::None);
  EXPECT_EQ(uses.sole_consumer(b.x.node), nullptr);  // read twice
  EXPECT_TRUE(uses.is_graph_output(b.y.node));
  EXPECT_EQ(uses.sole_consumer(b.y.node), nullptr);  // a graph output has no sole consumer
  EXPECT_TRUE(uses.is_read(b.y));
  ASSERT_EQ(uses.readers(b.r.node).size(), 1u);
  EXPECT_EQ(uses.readers(b.r.node)[0], (std::pair<int, int>{b.y.node, 0}));
}

TEST(GraphUses, KeptAndAllNodesCountMoreReaders) {
  Branches b;
  const GraphUses kept(b.g, {b.y}, {b.dead.node});
  EXPECT_TRUE(kept.needed(b.dead.node));
  EXPECT_FALSE(kept.is_graph_output(b.dead.node));
  EXPECT_EQ(kept.uses(b.m.node), 2);
  EXPECT_EQ(fusable_activation(kept, b.m.node), nullptr);
  const GraphUses all = GraphUses::of_all_nodes(b.g);
  EXPECT_EQ(all.uses(b.m.node), 2);
  EXPECT_EQ(all.uses(b.y.node), 0);
  EXPECT_FALSE(all.is_read(b.dead));
}

TEST(GraphUses, ConstValue) {
  Graph g;
  const Output c = ops::constant(g, testing::random_tensor({2}, 1), "c");
  const Output n = ops::neg(g, c, "n");
  ASSERT_NE(const_value(g, c), nullptr);
  EXPECT_EQ(const_value(g, c)->shape(), (Shape{2}));
  EXPECT_EQ(const_value(g, n), nullptr);
}

TEST(Activation, NamesRoundTrip) {
  for (Activation a : {Activation::None, Activation::Relu, Activation::Relu6})
    EXPECT_EQ(parse_activation(activation_name(a)), a);
  EXPECT_EQ(activation_name(Activation::Relu6), "relu6");
  EXPECT_EQ(parse_activation("sigmoid"), std::nullopt);
  EXPECT_EQ(activated(-1.0, Activation::None), -1.0);
  EXPECT_EQ(activated(-1.0, Activation::Relu), 0.0);
  EXPECT_EQ(activated(7.0, Activation::Relu), 7.0);
  EXPECT_EQ(activated(7.0, Activation::Relu6), 6.0);
}

TEST(Activation, UnknownNameIsRejectedNamingTheNode) {
  Graph g;
  const Output x = ops::placeholder(g, DType::f32, {2, 3}, "x");
  const Output w = ops::constant(g, testing::random_tensor({3, 4}, 2), "w");
  const Output bias = ops::constant(g, testing::random_tensor({4}, 3), "bias");
  try {
    g.add("FusedMatMul", {x, w, bias}, {{"activation", std::string("gelu")}}, "fc");
    FAIL() << "expected sf::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "node 'fc' (FusedMatMul): activation 'gelu' must be none, relu or relu6");
  }
  EXPECT_EQ(activation_of(g.node(x.node)), Activation::None);  // no attribute
}

}  // namespace
}  // namespace sf
