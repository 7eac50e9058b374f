// NHWC images skip an NCHW model's input move: the move becomes the placeholder they are fed
// to, and the model computes exactly what it computed from the permuted images.
#include "transforms/image_input.h"

#include <gtest/gtest.h>

#include "io/image.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// x NCHW [1,C,4,5] -> the importer's move to NHWC -> conv -> y; `move` is "Transpose" or, for
// C == 1, "Reshape".
Graph nchw_conv(int64_t channels, const std::string& move) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {1, channels, 4, 5}, "x");
  Output nhwc = move == "Transpose" ? ops::transpose(g, x, {0, 2, 3, 1}, "x/to_nhwc")
                                    : ops::reshape(g, x, {-1, 4, 5, channels}, "x/to_nhwc");
  ops::conv2d(g, nhwc, ops::constant(g, testing::random_tensor({3, 3, channels, 2}, 1), "w"),
              {.padding = "SAME"}, "y");
  return g;
}

Tensor run(const Graph& g, const std::string& input, const Tensor& x) {
  Session session(g);
  return session.run({{Output{g.id_of(input), 0}, x}}, {Output{g.id_of("y"), 0}})[0].clone();
}

TEST(FeedNhwcImages, TheInputTransposeBecomesThePlaceholder) {
  const Graph original = nchw_conv(3, "Transpose");
  Graph g = original;
  const ImageFeed feed = feed_nhwc_images(g, "x", true, {"y"});
  EXPECT_EQ(feed.placeholder, "x/to_nhwc");
  EXPECT_FALSE(feed.nchw);
  ASSERT_EQ(g.num_nodes(), original.num_nodes());  // ids unchanged
  const Node& fed = g.node(g.id_of("x/to_nhwc"));
  EXPECT_EQ(fed.op, "Placeholder");
  EXPECT_TRUE(fed.inputs.empty());
  EXPECT_EQ(fed.outputs[0], (TensorType{DType::f32, {1, 4, 5, 3}}));

  // A batch of two, and the same numbers as the NCHW images through the transpose.
  const Tensor nhwc = testing::random_tensor({2, 4, 5, 3}, 2);
  const Tensor want = run(original, "x", nhwc_to_nchw(nhwc));
  const Tensor got = run(g, feed.placeholder, nhwc);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(testing::values<float>(got), testing::values<float>(want));
}

TEST(FeedNhwcImages, TheReshapeOfOneChannelBecomesThePlaceholder) {
  const Graph original = nchw_conv(1, "Reshape");
  Graph g = original;
  const ImageFeed feed = feed_nhwc_images(g, "x", true, {"y"});
  EXPECT_EQ(feed.placeholder, "x/to_nhwc");
  EXPECT_FALSE(feed.nchw);
  const Tensor nhwc = testing::random_tensor({3, 4, 5, 1}, 3);
  EXPECT_EQ(testing::values<float>(run(g, feed.placeholder, nhwc)),
            testing::values<float>(run(original, "x", nhwc_to_nchw(nhwc))));
}

TEST(FeedNhwcImages, OtherwiseTheInputStaysAsDeclared) {
  auto unchanged = [](Graph g, bool nchw, const std::vector<std::string>& outputs) {
    const std::vector<Node> before = g.nodes();
    const ImageFeed feed = feed_nhwc_images(g, "x", nchw, outputs);
    EXPECT_EQ(feed.placeholder, "x");
    EXPECT_EQ(feed.nchw, nchw);
    for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(g.nodes()[i].op, before[i].op);
  };
  // Declared NHWC: nothing to skip.
  unchanged(nchw_conv(3, "Transpose"), false, {"y"});
  // The input is also a graph output, so it must stay fed.
  unchanged(nchw_conv(3, "Transpose"), true, {"y", "x"});
  // A second reader needs the NCHW values.
  Graph two_readers = nchw_conv(3, "Transpose");
  ops::identity(two_readers, Output{two_readers.id_of("x"), 0}, "copy");
  unchanged(two_readers, true, {"y", "copy"});
  // A transpose to some other order is not the move to NHWC.
  Graph other;
  Output x = ops::placeholder(other, DType::f32, {1, 3, 4, 5}, "x");
  ops::transpose(other, x, {0, 3, 2, 1}, "y");
  unchanged(other, true, {"y"});
}

TEST(NhwcToNchw, MovesChannelsToDimensionOne) {
  const Tensor nhwc = Tensor::from_vector<float>({1, 1, 2, 3}, {0, 1, 2, 10, 11, 12});
  const Tensor nchw = nhwc_to_nchw(nhwc);
  EXPECT_EQ(nchw.shape(), (Shape{1, 3, 1, 2}));
  EXPECT_EQ(testing::values<float>(nchw), (std::vector<float>{0, 10, 1, 11, 2, 12}));
}

}  // namespace
}  // namespace sf
