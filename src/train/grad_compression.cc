#include "train/grad_compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "codec/weight_codec.h"
#include "core/error.h"

namespace sf {

std::string GradCompression::name() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::fp16: return "fp16";
    case Kind::topk: return fmt::format("topk:{:g}", fraction);
    case Kind::onebit: return "onebit";
  }
  return "none";
}

GradCompression parse_grad_compression(const std::string& text) {
  GradCompression c;
  if (text == "none") return c;
  if (text == "fp16") {
    c.kind = GradCompression::Kind::fp16;
    return c;
  }
  if (text == "onebit") {
    c.kind = GradCompression::Kind::onebit;
    return c;
  }
  if (text.rfind("topk:", 0) == 0) {
    const std::string number = text.substr(5);
    char* end = nullptr;
    const double f = std::strtod(number.c_str(), &end);
    if (!number.empty() && end && *end == '\0' && f > 0.0 && f <= 1.0) {
      c.kind = GradCompression::Kind::topk;
      c.fraction = f;
      return c;
    }
  }
  fail("train: --grad-compression must be none, fp16, topk:F (0 < F <= 1) or onebit, got '{}'",
       text);
}

namespace {

int64_t topk_count(const GradCompression& c, int64_t n) {
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(c.fraction * static_cast<double>(n))),
                             n > 0 ? 1 : 0, n);
}

}  // namespace

size_t compressed_bytes(const GradCompression& c, int64_t n) {
  switch (c.kind) {
    case GradCompression::Kind::none: return static_cast<size_t>(n) * 4;
    case GradCompression::Kind::fp16: return static_cast<size_t>(n) * 2;
    case GradCompression::Kind::topk: return static_cast<size_t>(topk_count(c, n)) * 8;
    case GradCompression::Kind::onebit: return 4 + static_cast<size_t>((n + 7) / 8);
  }
  return 0;
}

void compress(const GradCompression& c, float* residual, int64_t n, uint8_t* message) {
  SF_CHECK(n >= 0, "compress: {} floats", n);
  switch (c.kind) {
    case GradCompression::Kind::none:
      std::memcpy(message, residual, static_cast<size_t>(n) * 4);
      std::fill(residual, residual + n, 0.0f);
      return;
    case GradCompression::Kind::fp16:
      for (int64_t i = 0; i < n; ++i) {
        // Beyond half's range the rest stays in the residual for later steps.
        const uint16_t h = quant::float_to_half(std::clamp(residual[i], -65504.0f, 65504.0f));
        std::memcpy(message + 2 * i, &h, 2);
        residual[i] -= quant::half_to_float(h);
      }
      return;
    case GradCompression::Kind::topk: {
      const int64_t k = topk_count(c, n);
      std::vector<uint32_t> index(static_cast<size_t>(n));
      std::iota(index.begin(), index.end(), 0u);
      std::nth_element(index.begin(), index.begin() + k, index.end(), [&](uint32_t a, uint32_t b) {
        const float fa = std::fabs(residual[a]), fb = std::fabs(residual[b]);
        return fa > fb || (fa == fb && a < b);
      });
      for (int64_t j = 0; j < k; ++j) {
        const uint32_t i = index[static_cast<size_t>(j)];
        std::memcpy(message + 8 * j, &i, 4);
        std::memcpy(message + 8 * j + 4, &residual[i], 4);
        residual[i] = 0.0f;
      }
      return;
    }
    case GradCompression::Kind::onebit: {
      double magnitude = 0.0;
      for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(residual[i]);
      const float scale = n ? static_cast<float>(magnitude / static_cast<double>(n)) : 0.0f;
      std::memcpy(message, &scale, 4);
      uint8_t* bits = message + 4;
      std::memset(bits, 0, static_cast<size_t>((n + 7) / 8));
      for (int64_t i = 0; i < n; ++i) {
        const bool negative = residual[i] < 0.0f;
        if (negative) bits[i / 8] = static_cast<uint8_t>(bits[i / 8] | (1u << (i % 8)));
        residual[i] -= negative ? -scale : scale;
      }
      return;
    }
  }
}

void add_decoded(const GradCompression& c, const uint8_t* message, int64_t n, float* sum) {
  SF_CHECK(n >= 0, "add_decoded: {} floats", n);
  switch (c.kind) {
    case GradCompression::Kind::none:
      for (int64_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, message + 4 * i, 4);
        sum[i] += v;
      }
      return;
    case GradCompression::Kind::fp16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, message + 2 * i, 2);
        sum[i] += quant::half_to_float(h);
      }
      return;
    case GradCompression::Kind::topk: {
      const int64_t k = topk_count(c, n);
      for (int64_t j = 0; j < k; ++j) {
        uint32_t i;
        float v;
        std::memcpy(&i, message + 8 * j, 4);
        std::memcpy(&v, message + 8 * j + 4, 4);
        if (i >= static_cast<uint64_t>(n)) fail("gradient message: index {} beyond {} floats", i, n);
        sum[i] += v;
      }
      return;
    }
    case GradCompression::Kind::onebit: {
      float scale;
      std::memcpy(&scale, message, 4);
      const uint8_t* bits = message + 4;
      for (int64_t i = 0; i < n; ++i) sum[i] += (bits[i / 8] >> (i % 8)) & 1u ? -scale : scale;
      return;
    }
  }
}

}  // namespace sf
