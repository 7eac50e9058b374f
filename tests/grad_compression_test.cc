// Gradient compression with error feedback: what a message carries plus the residual left
// behind is exactly what was to be sent, for every scheme.
#include "train/grad_compression.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "codec/weight_codec.h"
#include "core/error.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// Compresses `residual` in place (leaving what the message does not carry) and returns what the
// message decodes to.
std::vector<float> compress_and_decode(const GradCompression& c, std::vector<float>& residual) {
  const auto n = static_cast<int64_t>(residual.size());
  std::vector<uint8_t> message(compressed_bytes(c, n));
  compress(c, residual.data(), n, message.data());
  std::vector<float> decoded(residual.size(), 0.0f);
  add_decoded(c, message.data(), n, decoded.data());
  return decoded;
}

TEST(GradCompression, MessagePlusResidualIsTheGradient) {
  const int64_t n = 1001;
  const Tensor g = testing::random_tensor({n}, 42, -3.0f, 3.0f);
  for (const char* name : {"none", "fp16", "topk:0.01", "topk:1", "onebit"}) {
    const GradCompression c = parse_grad_compression(name);
    std::vector<float> residual(g.data<float>(), g.data<float>() + n);
    const std::vector<float> decoded = compress_and_decode(c, residual);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(decoded[i] + residual[i], g.data<float>()[i], 1e-5f) << name << " at " << i;
  }
}

// The fp16 message (vectorized where the CPU has AVX-512) holds float_to_half of each value,
// bit for bit: normal, subnormal, rounding ties, beyond half's range, infinities and NaN, with a
// length that leaves a partial vector.
TEST(GradCompression, Fp16MessageIsFloatToHalfOfEveryValue) {
  std::vector<float> values;
  for (float scale : {1.0f, 1e-3f, 1e-5f, 6e-8f, 3e-8f, 1e4f, 7e4f}) {
    const Tensor r =
        testing::random_tensor({23}, static_cast<uint32_t>(values.size()), -scale, scale);
    values.insert(values.end(), r.data<float>(), r.data<float>() + 23);
  }
  // Exactly halfway between two halves (1 + 2^-11), its neighbours, and the specials.
  for (float v : {1.00048828125f, 1.0004883f, 1.0014648438f, 65504.0f, 65520.0f, -65536.0f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f, 5.9604645e-8f})
    values.push_back(v);
  const auto n = static_cast<int64_t>(values.size());
  ASSERT_NE(n % 16, 0);
  const GradCompression c = parse_grad_compression("fp16");
  std::vector<float> residual = values;
  std::vector<uint8_t> message(compressed_bytes(c, n));
  compress(c, residual.data(), n, message.data());
  std::vector<float> decoded(static_cast<size_t>(n), 0.0f);
  add_decoded(c, message.data(), n, decoded.data());
  for (int64_t i = 0; i < n; ++i) {
    const float v = values[static_cast<size_t>(i)];
    const uint16_t want =
        quant::float_to_half(std::isnan(v) ? v : std::clamp(v, -65504.0f, 65504.0f));
    uint16_t got;
    std::memcpy(&got, message.data() + 2 * i, 2);
    ASSERT_EQ(got, want) << "value " << v << " at " << i;
    const float half = quant::half_to_float(want);
    EXPECT_EQ(std::bit_cast<uint32_t>(decoded[i]), std::bit_cast<uint32_t>(0.0f + half)) << v;
    if (std::isnan(v))
      EXPECT_TRUE(std::isnan(residual[i]));
    else
      EXPECT_EQ(residual[i], v - half) << v;  // an infinity stays in the residual
  }
}

TEST(GradCompression, MessagesAreAsSmallAsTheSchemeSays) {
  const int64_t n = 100000;
  EXPECT_EQ(compressed_bytes(parse_grad_compression("none"), n), 400000u);
  EXPECT_EQ(compressed_bytes(parse_grad_compression("fp16"), n), 200000u);
  // 1000 halves, 1000 x 6 low bits, 1562 + 1000 unary high bits: 130x.
  EXPECT_EQ(compressed_bytes(parse_grad_compression("topk:0.01"), n), 3071u);
  // 100,000 sign bits and 196 bf16 scales, one per 512 floats: 31x.
  EXPECT_EQ(compressed_bytes(parse_grad_compression("onebit"), n), 12892u);
  // Top-k 1% stays >= 100x at every bucket size.
  for (int64_t m : {1000, 4096, 65536, 1000000, 3274634})
    EXPECT_GE(4.0 * static_cast<double>(m) /
                  static_cast<double>(compressed_bytes(parse_grad_compression("topk:0.01"), m)),
              100.0)
        << m;
}

TEST(GradCompression, CorruptTopKMessagesAreErrors) {
  const int64_t n = 1000;
  const GradCompression c = parse_grad_compression("topk:0.01");
  const Tensor g = testing::random_tensor({n}, 7, -1.0f, 1.0f);
  std::vector<float> residual(g.data<float>(), g.data<float>() + n);
  std::vector<uint8_t> message(compressed_bytes(c, n));
  compress(c, residual.data(), n, message.data());
  std::vector<float> sum(static_cast<size_t>(n), 0.0f);
  std::vector<uint8_t> extra = message, missing = message;
  // The unary high parts are the message's last bytes: all ones holds too many indices, all
  // zeros too few.
  std::fill(extra.end() - 4, extra.end(), uint8_t{0xff});
  std::fill(missing.begin() + 2 * 10 + 7, missing.end(), uint8_t{0});
  EXPECT_THROW(add_decoded(c, extra.data(), n, sum.data()), Error);
  EXPECT_THROW(add_decoded(c, missing.data(), n, sum.data()), Error);
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

// Each chunk of 512 floats has its own scale: a chunk of small gradients is not sent at the
// magnitude of a chunk of large ones, and a chunk of zeros is sent as zeros.
TEST(GradCompression, OneBitScalesEachChunkOfFloatsApart) {
  const int64_t n = 512 * 2 + 100;
  std::vector<float> residual(static_cast<size_t>(n), 0.0f);
  for (int64_t i = 0; i < 512; ++i) residual[static_cast<size_t>(i)] = i % 2 ? 4.0f : -4.0f;
  for (int64_t i = 1024; i < n; ++i) residual[static_cast<size_t>(i)] = i % 3 ? 0.001f : -0.001f;
  const GradCompression c = parse_grad_compression("onebit");
  const std::vector<float> decoded = compress_and_decode(c, residual);
  EXPECT_EQ(decoded[0], -4.0f);
  EXPECT_EQ(decoded[1], 4.0f);
  for (int64_t i = 512; i < 1024; ++i) {
    ASSERT_EQ(decoded[static_cast<size_t>(i)], 0.0f) << i;
    ASSERT_EQ(residual[static_cast<size_t>(i)], 0.0f) << i;
  }
  // 0.001 rounded to bf16, the residual keeping the rounding.
  EXPECT_NEAR(decoded[1025], 0.001f, 0.001f / 128);
  EXPECT_NEAR(decoded[1026], -0.001f, 0.001f / 128);
  EXPECT_EQ(decoded[1025] + residual[1025], 0.001f);
}

// Top-k on large buckets first keeps the floats above a sampled threshold; the k it sends must
// still be the k largest magnitudes, ties to the lower index: on random floats, on many ties, on
// mostly zeros, on a ramp whose every 16th float (the sample) is the smallest around it.
TEST(GradCompression, TopKChoosesTheLargestMagnitudesOnLargeBuckets) {
  const int64_t n = 100003;
  std::vector<std::pair<std::string, std::vector<float>>> inputs;
  const Tensor random = testing::random_tensor({n}, 5, -1.0f, 1.0f);
  inputs.emplace_back("random", std::vector<float>(random.data<float>(), random.data<float>() + n));
  std::vector<float> ties(static_cast<size_t>(n)), sparse(static_cast<size_t>(n), 0.0f),
      ramp(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ties[static_cast<size_t>(i)] = static_cast<float>(i * 7919 % 7) - 3.0f;
    if (i % 97 == 0) sparse[static_cast<size_t>(i)] = static_cast<float>(i % 13) - 6.0f;
    ramp[static_cast<size_t>(i)] = i % 16 == 0 ? 0.0f : static_cast<float>(i) * 1e-3f;
  }
  inputs.emplace_back("ties", ties);
  inputs.emplace_back("sparse", sparse);
  inputs.emplace_back("ramp", ramp);
  for (const char* scheme : {"topk:0.01", "topk:0.2"}) {
    const GradCompression c = parse_grad_compression(scheme);
    for (const auto& [name, values] : inputs) {
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return std::fabs(values[static_cast<size_t>(a)]) >
               std::fabs(values[static_cast<size_t>(b)]);
      });
      const auto k = static_cast<size_t>(std::ceil(c.fraction * static_cast<double>(n)));
      std::vector<bool> chosen(static_cast<size_t>(n), false);
      for (size_t j = 0; j < k; ++j) chosen[static_cast<size_t>(order[j])] = true;
      std::vector<float> residual = values;
      const std::vector<float> decoded = compress_and_decode(c, residual);
      for (int64_t i = 0; i < n; ++i) {
        const auto u = static_cast<size_t>(i);
        const float sent = chosen[u] ? quant::half_to_float(quant::float_to_half(values[u])) : 0.0f;
        ASSERT_EQ(decoded[u], sent) << scheme << " " << name << " at " << i;
        ASSERT_EQ(residual[u], values[u] - sent) << scheme << " " << name << " at " << i;
      }
    }
  }
}

// The one-bit message (vectorized where the CPU has AVX-512) is, bit for bit, the format
// grad_compression.cc describes: per chunk of 512 floats a bf16 scale, the mean magnitude, its
// sum taken in 16 interleaved float lanes and then the lanes in order in double; then the sign
// bits. Lengths leave partial chunks, vectors and bytes.
TEST(GradCompression, OneBitMessageIsItsFormatExactly) {
  const GradCompression c = parse_grad_compression("onebit");
  for (int64_t n : {1, 7, 9, 16, 17, 511, 512, 513, 3000, 5131}) {
    const Tensor g = testing::random_tensor({n}, static_cast<uint32_t>(n), -2.0f, 1.0f);
    std::vector<float> residual(g.data<float>(), g.data<float>() + n);
    if (n > 20) residual[3] = 0.0f, residual[4] = -0.0f, residual[19] = 1e-30f;
    std::vector<float> want = residual;
    const size_t chunks = static_cast<size_t>((n + 511) / 512);
    std::vector<uint8_t> expected(compressed_bytes(c, n), 0);
    std::vector<float> scales(chunks);
    for (size_t chunk = 0; chunk < chunks; ++chunk) {
      const auto begin = static_cast<int64_t>(chunk) * 512, end = std::min(n, begin + 512);
      float lanes[16] = {};
      for (int64_t i = begin; i < end; ++i)
        lanes[(i - begin) % 16] += std::fabs(want[static_cast<size_t>(i)]);
      double magnitude = 0.0;
      for (float lane : lanes) magnitude += lane;
      const uint16_t stored =
          quant::float_to_bf16(static_cast<float>(magnitude / static_cast<double>(end - begin)));
      std::memcpy(expected.data() + 2 * chunk, &stored, 2);
      scales[chunk] = quant::bf16_to_float(stored);
      for (int64_t i = begin; i < end; ++i) {
        float& v = want[static_cast<size_t>(i)];
        const bool below = v < 0.0f;
        if (below)
          expected[2 * chunks + static_cast<size_t>(i / 8)] |= static_cast<uint8_t>(1u << (i % 8));
        v -= below ? -scales[chunk] : scales[chunk];
      }
    }
    std::vector<uint8_t> message(compressed_bytes(c, n), 0xa5);
    compress(c, residual.data(), n, message.data());
    ASSERT_EQ(message, expected) << n << " floats";
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(residual[static_cast<size_t>(i)]),
                std::bit_cast<uint32_t>(want[static_cast<size_t>(i)]))
          << n << " floats, at " << i;
    // Decoding adds each float's value to what is there.
    std::vector<float> sum(static_cast<size_t>(n), 0.5f);
    add_decoded(c, message.data(), n, sum.data());
    for (int64_t i = 0; i < n; ++i) {
      const float scale = scales[static_cast<size_t>(i / 512)];
      const bool below = (expected[2 * chunks + static_cast<size_t>(i / 8)] >> (i % 8)) & 1u;
      ASSERT_EQ(sum[static_cast<size_t>(i)], 0.5f + (below ? -scale : scale))
          << n << " floats, at " << i;
    }
  }
}

TEST(GradCompression, UnknownSchemesAreOneLineErrors) {
  for (const char* bad : {"zip", "topk", "topk:0", "topk:2", "topk:x", "fp8"}) {
    try {
      parse_grad_compression(bad);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("train: --grad-compression must be none, fp16, topk:F (0 < F <= 1) "
                            "or onebit, got '") +
                    bad + "'");
    }
  }
}

}  // namespace
}  // namespace sf
