// Gradient compression with error feedback: what a message carries plus the residual left
// behind is exactly what was to be sent, for every scheme.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "support/testing.h"
#include "train/grad_compression.h"

namespace sf {
namespace {

TEST(GradCompression, MessagePlusResidualIsTheGradient) {
  const int64_t n = 1001;
  const Tensor g = testing::random_tensor({n}, 42, -3.0f, 3.0f);
  for (const char* name : {"none", "fp16", "topk:0.01", "topk:1", "onebit"}) {
    const GradCompression c = parse_grad_compression(name);
    std::vector<float> residual(g.data<float>(), g.data<float>() + n);
    std::vector<uint8_t> message(compressed_bytes(c, n));
    compress(c, residual.data(), n, message.data());
    std::vector<float> decoded(static_cast<size_t>(n), 0.0f);
    add_decoded(c, message.data(), n, decoded.data());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(decoded[i] + residual[i], g.data<float>()[i], 1e-5f) << name << " at " << i;
  }
}

TEST(GradCompression, MessagesAreAsSmallAsTheSchemeSays) {
  const int64_t n = 100000;
  EXPECT_EQ(compressed_bytes(parse_grad_compression("none"), n), 400000u);
  EXPECT_EQ(compressed_bytes(parse_grad_compression("fp16"), n), 200000u);
  EXPECT_EQ(compressed_bytes(parse_grad_compression("topk:0.01"), n), 8000u);  // 50x
  EXPECT_EQ(compressed_bytes(parse_grad_compression("onebit"), n), 12504u);    // 32x
}

TEST(GradCompression, TopKSendsTheLargestMagnitudes) {
  std::vector<float> residual = {0.1f, -5.0f, 0.2f, 4.0f, -0.3f, 0.0f, 1.0f, 0.05f, 0.0f, 0.0f};
  const GradCompression c = parse_grad_compression("topk:0.2");
  std::vector<uint8_t> message(compressed_bytes(c, 10));
  compress(c, residual.data(), 10, message.data());
  std::vector<float> decoded(10, 0.0f);
  add_decoded(c, message.data(), 10, decoded.data());
  EXPECT_EQ(decoded[1], -5.0f);
  EXPECT_EQ(decoded[3], 4.0f);
  EXPECT_EQ(residual[1], 0.0f);
  EXPECT_EQ(residual[6], 1.0f);  // kept for a later step
}

TEST(GradCompression, UnknownSchemesAreOneLineErrors) {
  for (const char* bad : {"zip", "topk", "topk:0", "topk:2", "topk:x", "fp8"}) {
    try {
      parse_grad_compression(bad);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("train: --grad-compression must be none, fp16, topk:F (0 < F <= 1) "
                            "or onebit, got '") + bad + "'");
    }
  }
}

}  // namespace
}  // namespace sf
