#include "models/initializers.h"

#include <cmath>

#include "core/error.h"

namespace sf {

Initializer parse_initializer(const std::string& text) {
  auto colon = text.find(':');
  std::string name = text.substr(0, colon);
  double arg = 0.0;
  bool has_arg = colon != std::string::npos;
  if (has_arg) {
    try {
      arg = std::stod(text.substr(colon + 1));
    } catch (const std::exception&) {
      fail("initializer '{}': '{}' is not a number", text, text.substr(colon + 1));
    }
  }
  if (name == "zeros") return {Initializer::Kind::Zeros, 0.0};
  if (name == "constant") return {Initializer::Kind::Constant, arg};
  if (name == "truncated_normal") return {Initializer::Kind::TruncatedNormal, has_arg ? arg : 0.1};
  if (name == "glorot") return {Initializer::Kind::GlorotUniform, 0.0};
  if (name == "he") return {Initializer::Kind::HeNormal, 0.0};
  fail("unknown initializer '{}' (expected zeros, constant:V, truncated_normal:STDDEV, glorot, he)",
       text);
}

namespace {

// Normal samples redrawn until within two standard deviations (TensorFlow's definition).
float truncated_normal(std::mt19937_64& rng, double stddev) {
  std::normal_distribution<double> normal(0.0, 1.0);
  double x;
  do {
    x = normal(rng);
  } while (std::abs(x) > 2.0);
  return static_cast<float>(x * stddev);
}

}  // namespace

void initialize(Tensor& tensor, const Initializer& init, int64_t fan_in, int64_t fan_out,
                std::mt19937_64& rng) {
  float* p = tensor.data<float>();
  const int64_t n = tensor.numel();
  switch (init.kind) {
    case Initializer::Kind::Zeros:
      tensor.fill_zero();
      return;
    case Initializer::Kind::Constant:
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(init.value);
      return;
    case Initializer::Kind::TruncatedNormal:
      for (int64_t i = 0; i < n; ++i) p[i] = truncated_normal(rng, init.value);
      return;
    case Initializer::Kind::GlorotUniform: {
      double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
      std::uniform_real_distribution<double> uniform(-limit, limit);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(uniform(rng));
      return;
    }
    case Initializer::Kind::HeNormal: {
      // Truncation to two sigma shrinks the variance by 0.7737; compensate as Keras does.
      double stddev = std::sqrt(2.0 / static_cast<double>(fan_in)) / 0.87962566103423978;
      for (int64_t i = 0; i < n; ++i) p[i] = truncated_normal(rng, stddev);
      return;
    }
  }
}

}  // namespace sf
