// 1-D Conv and pooling ([N, C, L] inputs) import as the 2-D ops on [N, C, 1, L].
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "onnx/importer.h"
#include "support/onnx_models.h"
#include "support/testing.h"

namespace sf {
namespace {

TEST(OnnxConv1d, ConvWithStridePadsAndDilationMatchesTheDefinition) {
  const int64_t n = 2, ci = 3, co = 4, len = 11, k = 3, stride = 2, pad = 1, dil = 2;
  const std::vector<float> w = testing::random_values(co * ci * k, 5);
  const std::vector<float> bias = testing::random_values(co, 6);
  onnx::ModelProto m = testing::new_onnx_model(13);
  testing::add_input(m, "x", {n, ci, len});
  testing::add_init(m, "w", {co, ci, k}, w);
  testing::add_init(m, "b", {co}, bias);
  testing::add_output(m, "y");
  onnx::NodeProto* conv = testing::add_node(m, "Conv", {"x", "w", "b"}, {"c"}, "conv1d");
  testing::set_ints(conv, "strides", {stride});
  testing::set_ints(conv, "pads", {pad, pad});
  testing::set_ints(conv, "dilations", {dil});
  onnx::NodeProto* pool = testing::add_node(m, "MaxPool", {"c"}, {"y"}, "pool1d");
  testing::set_ints(pool, "kernel_shape", {2});
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  const ModelFile model = import_onnx_bytes(bytes, "conv1d.onnx");
  const Tensor x = testing::random_tensor({n, ci, len}, 7);
  const Tensor y = testing::run_model(model, x);
  const int64_t conv_len = (len + 2 * pad - dil * (k - 1) - 1) / stride + 1;
  ASSERT_EQ(y.shape(), (Shape{n, co, conv_len - 1}));
  auto conv_at = [&](int64_t b, int64_t o, int64_t t) {
    double acc = bias[static_cast<size_t>(o)];
    for (int64_t c = 0; c < ci; ++c)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = t * stride - pad + j * dil;
        if (at < 0 || at >= len) continue;
        acc += x.data<float>()[(b * ci + c) * len + at] * w[static_cast<size_t>((o * ci + c) * k + j)];
      }
    return acc;
  };
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < co; ++o)
      for (int64_t t = 0; t + 1 < conv_len; ++t)
        EXPECT_NEAR(y.data<float>()[(b * co + o) * (conv_len - 1) + t],
                    std::max(conv_at(b, o, t), conv_at(b, o, t + 1)), 1e-4);
}

}  // namespace
}  // namespace sf
