// The rewrites made before a model runs keep every output and remove what they promise to:
// fire modules (SqueezeNet) lose their channel Concats, residual blocks (ResNet) their Add (or
// two-operand AddN) and Relu, into the conv or one FusedAddN; a Concat something else reads
// stays; a max pool after a concat, f32 or u8, runs on the parts.
#include "transforms/execution_passes.h"

#include <gtest/gtest.h>

#include <cstring>

#include "graph/graph.h"
#include "ops/ops.h"
#include "ops/quantized_ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

class Builder {
 public:
  explicit Builder(Graph& g) : g_(g) {}
  Output conv(Output x, int64_t kernel, int64_t out, const std::string& activation,
              const std::string& name) {
    const int64_t in = g_.type(x).shape[3];
    Attrs a{{"padding", std::string("SAME")}, {"activation", activation}};
    return g_.add("FusedConv2D", {x, constant({kernel, kernel, in, out}), constant({out})}, a,
                  name);
  }
  Output concat(std::vector<Output> parts, const std::string& name) {
    return g_.add("Concat", std::move(parts), {{"axis", int64_t{3}}}, name);
  }
  Output max_pool(Output x, const std::string& name) {
    return g_.add("MaxPool", {x},
                  {{"ksize", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}}},
                  name);
  }
  // squeeze 1x1 -> (expand 1x1, expand 3x3) -> channel concat
  Output fire(Output x, int64_t squeeze, int64_t expand, const std::string& name) {
    Output s = conv(x, 1, squeeze, "relu", name + "/squeeze");
    return concat({conv(s, 1, expand, "relu", name + "/expand1x1"),
                   conv(s, 3, expand, "relu", name + "/expand3x3")},
                  name + "/concat");
  }

 private:
  Output constant(Shape shape) {
    return ops::constant(g_, testing::random_tensor(shape, ++seed_, -0.5f, 0.5f));
  }
  Graph& g_;
  uint32_t seed_ = 100;
};

std::vector<Tensor> run(const Graph& g, const std::string& input, const Tensor& x,
                        const std::vector<std::string>& outputs) {
  Session session(g);
  std::vector<Output> fetches;
  for (const std::string& name : outputs) fetches.push_back({g.id_of(name), 0});
  std::vector<Tensor> got = session.run({{Output{g.id_of(input), 0}, x}}, fetches);
  for (Tensor& t : got) t = t.clone();
  return got;
}

void expect_same_outputs(const Graph& original, const std::vector<std::string>& names,
                         const Shape& input_shape) {
  std::vector<std::string> optimized_names = names;
  Graph optimized = optimize_for_execution(original, optimized_names);
  for (uint32_t seed : {1u, 2u}) {
    const Tensor x = testing::random_tensor(input_shape, seed);
    std::vector<Tensor> want = run(original, "x", x, names);
    std::vector<Tensor> got = run(optimized, "x", x, optimized_names);
    ASSERT_EQ(want.size(), got.size());
    for (size_t o = 0; o < want.size(); ++o) {
      ASSERT_EQ(want[o].shape(), got[o].shape());
      for (int64_t i = 0; i < want[o].numel(); ++i)
        ASSERT_NEAR(want[o].data<float>()[i], got[o].data<float>()[i], 1e-4)
            << "output " << o << " element " << i;
    }
  }
}

TEST(ExecutionPasses, FireModulesLoseTheirConcats) {
  Graph g;
  Builder b(g);
  Output x = ops::placeholder(g, DType::f32, {1, 15, 15, 3}, "x");
  Output f1 = b.fire(b.conv(x, 3, 8, "relu", "stem"), 4, 6, "fire1");
  Output f2 = b.fire(b.max_pool(f1, "pool1"), 4, 5, "fire2");  // pool moves before the concat
  Output f3 = b.fire(f2, 3, 4, "fire3");
  Output y = b.conv(f3, 1, 7, "none", "classifier");
  std::vector<std::string> outputs = {g.node(y.node).name};

  std::vector<std::string> names = outputs;
  Graph optimized = optimize_for_execution(g, names);
  EXPECT_EQ(testing::count_ops(optimized, "Concat"), 0);
  EXPECT_EQ(testing::count_ops(optimized, "MaxPool"), 2);
  // Each conv reading a concat of two parts becomes a conv and a conv that adds its sum.
  EXPECT_EQ(testing::count_ops(optimized, "FusedConv2DAdd"), 3);
  EXPECT_EQ(names, outputs);
  expect_same_outputs(g, outputs, {1, 15, 15, 3});
  // A new batch and image size re-infers the rewritten graph's shapes.
  expect_same_outputs(g, outputs, {3, 19, 17, 3});
}

TEST(ExecutionPasses, ConcatStaysWhereSplittingCostsMore) {
  Graph g;
  Builder b(g);
  Output x = ops::placeholder(g, DType::f32, {2, 9, 9, 3}, "x");
  Output f = b.fire(x, 4, 5, "fire");
  Output y = b.conv(f, 1, 3, "relu", "head");
  // The concat is also an output, so it must exist.
  std::vector<std::string> outputs = {g.node(y.node).name, g.node(f.node).name};
  // A conv with more outputs than inputs would rewrite its larger output once per part.
  Output wide = b.conv(b.fire(x, 4, 5, "fire2"), 1, 11, "relu", "wide");
  outputs.push_back(g.node(wide.node).name);
  std::vector<std::string> names = outputs;
  Graph optimized = optimize_for_execution(g, names);
  EXPECT_EQ(testing::count_ops(optimized, "Concat"), 2);
  EXPECT_EQ(testing::count_ops(optimized, "FusedConv2DAdd"), 0);
  expect_same_outputs(g, outputs, {2, 9, 9, 3});
}

TEST(ExecutionPasses, ResidualAddAndReluFuseIntoTheConv) {
  Graph g;
  Builder b(g);
  Output x = ops::placeholder(g, DType::f32, {1, 8, 8, 6}, "x");
  Output stem = b.conv(x, 3, 6, "relu", "stem");
  Output branch = b.conv(b.conv(stem, 3, 6, "relu", "conv1"), 1, 6, "none", "conv2");
  Output block = ops::relu(g, ops::add(g, branch, stem, "add"), "relu");
  // A second block whose Add has no Relu after it, and the graph output is the Add itself.
  Output branch2 = b.conv(block, 1, 6, "none", "conv3");
  Output block2 = ops::add(g, block, branch2, "add2");
  // A 3x3 conv keeps its Add: the add would push it off its fastest kernels.
  Output y = ops::add(g, block2, b.conv(block2, 3, 6, "none", "conv4"), "add3");
  std::vector<std::string> outputs = {g.node(y.node).name};
  std::vector<std::string> names = outputs;
  Graph optimized = optimize_for_execution(g, names);
  EXPECT_EQ(testing::count_ops(optimized, "Add"), 0);
  EXPECT_EQ(testing::count_ops(optimized, "AddN"), 1);  // add3, on the AddN kernels
  EXPECT_EQ(testing::count_ops(optimized, "Relu"), 0);
  EXPECT_EQ(testing::count_ops(optimized, "FusedConv2DAdd"), 2);
  EXPECT_EQ(optimized.node(optimized.id_of("conv2")).attrs.get_string("activation"), "relu");
  EXPECT_EQ(optimized.node(optimized.id_of("conv3")).op, "FusedConv2DAdd");
  expect_same_outputs(g, outputs, {1, 8, 8, 6});
}

// A spec's `add` layer freezes to an AddN: with two operands it fuses as an Add does; with
// three it stays.
TEST(ExecutionPasses, TwoOperandAddNFusesIntoTheConv) {
  Graph g;
  Builder b(g);
  Output x = ops::placeholder(g, DType::f32, {1, 7, 7, 8}, "x");
  Output block = ops::relu(g, ops::add_n(g, {b.conv(x, 1, 8, "none", "restore"), x}, "sum"));
  Output three = ops::add_n(g, {b.conv(block, 1, 8, "none", "restore2"), block, x}, "sum3");
  std::vector<std::string> outputs = {g.node(three.node).name};
  std::vector<std::string> names = outputs;
  Graph optimized = optimize_for_execution(g, names);
  EXPECT_EQ(testing::count_ops(optimized, "AddN"), 1);
  EXPECT_EQ(testing::count_ops(optimized, "Relu"), 0);
  EXPECT_EQ(optimized.node(optimized.id_of("restore")).op, "FusedConv2DAdd");
  EXPECT_EQ(optimized.node(optimized.id_of("restore")).attrs.get_string("activation"), "relu");
  EXPECT_EQ(optimized.node(optimized.id_of("restore2")).op, "FusedConv2D");
  expect_same_outputs(g, outputs, {1, 7, 7, 8});
}

TEST(ExecutionPasses, AddThatBroadcastsOrReadsAnActivatedConvStays) {
  Graph g;
  Builder b(g);
  Output x = ops::placeholder(g, DType::f32, {1, 6, 6, 4}, "x");
  Output activated = b.conv(x, 1, 4, "relu", "activated");
  Output sum = ops::add(g, activated, x, "sum");  // the conv's ReLU comes before the add
  Output plain = b.conv(sum, 1, 4, "none", "plain");
  Output y = ops::add(g, plain, ops::constant(g, testing::random_tensor({4}, 5)), "broadcast");
  std::vector<std::string> outputs = {g.node(y.node).name};
  std::vector<std::string> names = outputs;
  Graph optimized = optimize_for_execution(g, names);
  EXPECT_EQ(testing::count_ops(optimized, "Add"), 1);   // the broadcast
  EXPECT_EQ(testing::count_ops(optimized, "AddN"), 1);  // sum
  EXPECT_EQ(testing::count_ops(optimized, "FusedConv2DAdd"), 0);
  expect_same_outputs(g, outputs, {1, 6, 6, 4});
}

// After a 3x3 conv (ResNet-18's second conv of a block) the residual Add and its Relu, or Relu6,
// become one FusedAddN; a sum that something besides its Relu reads keeps the Relu apart.
TEST(ExecutionPasses, ResidualSumAndActivationNoConvTookBecomeOneFusedAddN) {
  Graph g;
  Builder b(g);
  Output x = ops::placeholder(g, DType::f32, {1, 8, 8, 6}, "x");
  Output stem = b.conv(x, 3, 6, "relu", "stem");
  Output block = ops::relu(g, ops::add(g, b.conv(stem, 3, 6, "none", "conv1"), stem, "add"),
                           "relu");
  Output sum = ops::add_n(g, {b.conv(block, 3, 6, "none", "conv2"), block, stem}, "sum3");
  Output block2 = ops::relu6(g, sum, "relu6");
  Output shared = ops::add(g, block2, b.conv(block2, 3, 6, "none", "conv3"), "shared");
  Output y = ops::add(g, ops::relu(g, shared, "relu_shared"), shared, "out");
  std::vector<std::string> outputs = {g.node(y.node).name};
  std::vector<std::string> names = outputs;
  Graph optimized = optimize_for_execution(g, names);
  EXPECT_EQ(testing::count_ops(optimized, "FusedAddN"), 2);
  EXPECT_EQ(testing::count_ops(optimized, "Relu6"), 0);
  EXPECT_EQ(testing::count_ops(optimized, "Relu"), 1);  // relu_shared
  EXPECT_EQ(testing::count_ops(optimized, "Add"), 0);
  EXPECT_EQ(testing::count_ops(optimized, "AddN"), 2);  // shared, out
  const Node& add = optimized.node(optimized.id_of("add"));
  EXPECT_EQ(add.op, "FusedAddN");
  EXPECT_EQ(add.attrs.get_string("activation"), "relu");
  EXPECT_EQ(optimized.node(optimized.id_of("sum3")).attrs.get_string("activation"), "relu6");
  EXPECT_EQ(optimized.node(optimized.id_of("sum3")).inputs.size(), 3u);
  expect_same_outputs(g, outputs, {1, 8, 8, 6});
}

// A u8 max pool after a channel QuantizedConcat runs on each part before the concat: each part's
// requantization to the concat's params is non-decreasing, so the bytes are the same.
TEST(ExecutionPasses, U8MaxPoolMovesBeforeItsConcatToTheByte) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {2, 9, 9, 8}, "x");
  const auto params = [&](float scale, float zero_point) {
    return ops::constant(g, Tensor::from_vector<float>({2}, {scale, zero_point}));
  };
  // Different params for each part and the output: every part is requantized, some saturate.
  const Output pa = params(0.01f, 100), pb = params(0.004f, 128), out = params(0.006f, 90);
  const Output a = ops::quantize(g, x, pa), b = ops::quantize(g, ops::relu(g, x), pb);
  const Output cat = ops::quantized_concat(g, {{a, pa}, {b, pb}}, out, 3, "cat");
  const Output pool = ops::quantized_max_pool(
      g, cat, {.ksize = {3, 3}, .strides = {2, 2}, .padding = "SAME"}, "pool");
  // A concat read by something besides a max pool stays whole.
  const Output other = ops::quantized_avg_pool(
      g, ops::quantized_concat(g, {{b, pb}, {a, pa}}, out, 3, "cat2"), {}, "other");
  const std::vector<std::string> outputs = {g.node(pool.node).name, g.node(other.node).name};

  std::vector<std::string> names = outputs;
  Graph optimized = optimize_for_execution(g, names);
  EXPECT_EQ(names, outputs);
  EXPECT_EQ(testing::count_ops(optimized, "QuantizedMaxPool"), 2);
  EXPECT_EQ(testing::count_ops(optimized, "QuantizedConcat"), 2);
  EXPECT_EQ(optimized.node(optimized.id_of("pool")).op, "QuantizedConcat");
  EXPECT_EQ(optimized.node(optimized.id_of("other")).op, "QuantizedAvgPool");
  for (uint32_t seed : {1u, 2u}) {
    const Tensor input = testing::random_tensor({2, 9, 9, 8}, seed, -1.0f, 1.5f);
    const std::vector<Tensor> want = run(g, "x", input, outputs);
    const std::vector<Tensor> got = run(optimized, "x", input, names);
    for (size_t o = 0; o < want.size(); ++o) {
      ASSERT_EQ(want[o].shape(), got[o].shape());
      EXPECT_EQ(std::memcmp(want[o].data<uint8_t>(), got[o].data<uint8_t>(),
                            static_cast<size_t>(want[o].numel())),
                0)
          << outputs[o];
    }
  }
}

}  // namespace
}  // namespace sf
