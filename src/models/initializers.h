// Weight initializers. Each fills a tensor from a seeded generator, so a run is reproducible.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "core/tensor.h"

namespace sf {

struct Initializer {
  enum class Kind { Zeros, Constant, TruncatedNormal, GlorotUniform, HeNormal };
  Kind kind = Kind::Zeros;
  double value = 0.0;  // Constant: the value; TruncatedNormal: the standard deviation
};

// "zeros", "constant:0.1", "truncated_normal:0.1", "glorot", "he". Throws sf::Error otherwise.
Initializer parse_initializer(const std::string& text);

// fan_in / fan_out: inputs and outputs per unit (kh*kw*in and kh*kw*out for a conv filter).
void initialize(Tensor& tensor, const Initializer& init, int64_t fan_in, int64_t fan_out,
                std::mt19937_64& rng);

}  // namespace sf
