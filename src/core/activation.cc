#include "core/activation.h"

#include <array>

namespace sf {

namespace {

// By enum value: the names model files store.
constexpr std::array<std::string_view, 3> kNames = {"none", "relu", "relu6"};

}  // namespace

std::optional<Activation> parse_activation(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<Activation>(i);
  return std::nullopt;
}

std::string activation_name(Activation activation) {
  return std::string(kNames.at(static_cast<size_t>(activation)));
}

}  // namespace sf
