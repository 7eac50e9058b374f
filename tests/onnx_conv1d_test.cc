// 1-D Conv and pooling ([N, C, L] inputs) import as the 2-D ops on [N, C, 1, L]; 3-D pooling
// ([N, C, D, H, W]) as a pool over (H, W) and one over D; a dilated MaxPool as strided taps.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "onnx/importer.h"
#include "support/onnx_models.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
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

TEST(OnnxConv1d, Pool3dWithPadsAndStridesMatchesTheDefinition) {
  const int64_t n = 1, ch = 2, D = 4, H = 5, W = 3;
  const std::vector<int64_t> k{2, 3, 2}, stride{2, 2, 1}, pad_begin{1, 1, 0}, pad_end{0, 1, 1};
  const Tensor x = testing::random_tensor({n, ch, D, H, W}, 8);
  for (const char* op : {"MaxPool", "AveragePool"}) {
    SCOPED_TRACE(op);
    onnx::ModelProto m = testing::new_onnx_model(13);
    testing::add_input(m, "x", {n, ch, D, H, W});
    testing::add_output(m, "y");
    onnx::NodeProto* pool = testing::add_node(m, op, {"x"}, {"y"}, "pool3d");
    testing::set_ints(pool, "kernel_shape", k);
    testing::set_ints(pool, "strides", stride);
    testing::set_ints(pool, "pads", {pad_begin[0], pad_begin[1], pad_begin[2], pad_end[0],
                                     pad_end[1], pad_end[2]});
    std::string bytes;
    ASSERT_TRUE(m.SerializeToString(&bytes));
    const Tensor y = testing::run_model(import_onnx_bytes(bytes, "pool3d.onnx"), x);
    const Shape in{D, H, W};
    Shape out;
    for (size_t a = 0; a < 3; ++a)
      out.push_back((in[a] + pad_begin[a] + pad_end[a] - k[a]) / stride[a] + 1);
    ASSERT_EQ(y.shape(), (Shape{n, ch, out[0], out[1], out[2]}));
    const bool max = std::string(op) == "MaxPool";
    for (int64_t c = 0; c < ch; ++c)
      for (int64_t od = 0; od < out[0]; ++od)
        for (int64_t oh = 0; oh < out[1]; ++oh)
          for (int64_t ow = 0; ow < out[2]; ++ow) {
            double acc = max ? -1e30 : 0;
            int64_t count = 0;
            for (int64_t i = 0; i < k[0]; ++i)
              for (int64_t j = 0; j < k[1]; ++j)
                for (int64_t l = 0; l < k[2]; ++l) {
                  const int64_t d = od * stride[0] - pad_begin[0] + i,
                                h = oh * stride[1] - pad_begin[1] + j,
                                w = ow * stride[2] - pad_begin[2] + l;
                  if (d < 0 || d >= D || h < 0 || h >= H || w < 0 || w >= W) continue;
                  const double v = x.data<float>()[((c * D + d) * H + h) * W + w];
                  acc = max ? std::max(acc, v) : acc + v;
                  ++count;
                }
            const double want = max ? acc : acc / static_cast<double>(count);
            EXPECT_NEAR(y.data<float>()[((c * out[0] + od) * out[1] + oh) * out[2] + ow], want, 1e-5)
                << "at " << c << "," << od << "," << oh << "," << ow;
          }
  }
}

TEST(OnnxConv1d, DilatedMaxPoolWithPadsMatchesTheDefinition) {
  const int64_t ch = 2, H = 7, W = 6;
  const std::vector<int64_t> k{2, 3}, stride{2, 1}, dil{2, 2}, pads{1, 0, 0, 2};
  const Tensor x = testing::random_tensor({1, ch, H, W}, 9);
  onnx::ModelProto m = testing::new_onnx_model(13);
  testing::add_input(m, "x", {1, ch, H, W});
  testing::add_output(m, "y");
  onnx::NodeProto* pool = testing::add_node(m, "MaxPool", {"x"}, {"y"}, "dilated");
  testing::set_ints(pool, "kernel_shape", k);
  testing::set_ints(pool, "strides", stride);
  testing::set_ints(pool, "dilations", dil);
  testing::set_ints(pool, "pads", pads);
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  const Tensor y = testing::run_model(import_onnx_bytes(bytes, "dilated.onnx"), x);
  const int64_t oh = (H + pads[0] + pads[2] - (k[0] - 1) * dil[0] - 1) / stride[0] + 1;
  const int64_t ow = (W + pads[1] + pads[3] - (k[1] - 1) * dil[1] - 1) / stride[1] + 1;
  ASSERT_EQ(y.shape(), (Shape{1, ch, oh, ow}));
  for (int64_t c = 0; c < ch; ++c)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double want = -1e30;
        for (int64_t a = 0; a < k[0]; ++a)
          for (int64_t b = 0; b < k[1]; ++b) {
            const int64_t h = i * stride[0] - pads[0] + a * dil[0];
            const int64_t w = j * stride[1] - pads[1] + b * dil[1];
            if (h >= 0 && h < H && w >= 0 && w < W)
              want = std::max(want, static_cast<double>(x.data<float>()[(c * H + h) * W + w]));
          }
        EXPECT_EQ(y.data<float>()[(c * oh + i) * ow + j], static_cast<float>(want))
            << c << "," << i << "," << j;
      }
}

}  // namespace
}  // namespace sf
