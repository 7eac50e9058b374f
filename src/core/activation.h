// The activation a fused node applies to its result: the "activation" attribute of FusedConv2D,
// FusedMatMul and the integer ops. Model files store it by name, so the names never change.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

namespace sf {

enum class Activation { None, Relu, Relu6 };

// "none", "relu" or "relu6"; nullopt for any other name.
std::optional<Activation> parse_activation(std::string_view name);
std::string activation_name(Activation activation);

// A real value after the activation: relu clamps it below at 0, relu6 also above at 6; NaN
// stays NaN.
inline double activated(double value, Activation activation) {
  if (activation == Activation::None) return value;
  value = std::max(value, 0.0);
  return activation == Activation::Relu6 ? std::min(value, 6.0) : value;
}

// The float the Relu or Relu6 op gives for `value` (the Relu op maps NaN to 0, Relu6 keeps it):
// what a kernel that applies one of them to its result must give.
inline float activation_op_value(float value, Activation activation) {
  if (activation == Activation::Relu) return value > 0.0f ? value : 0.0f;
  if (activation == Activation::Relu6) return std::min(std::max(value, 0.0f), 6.0f);
  return value;
}

// The float the ReluGrad or Relu6Grad op gives for the gradient dy of the activation's output
// where its input or output was x: dy where the activation passes its input on (x > 0, and for
// Relu6 x < 6), else 0, NaN x included. Both conditions hold of an input exactly where they hold
// of the activation's output, so either may be x.
inline float activation_grad_op_value(float dy, float x, Activation activation) {
  if (activation == Activation::Relu) return x > 0.0f ? dy : 0.0f;
  if (activation == Activation::Relu6) return x > 0.0f && x < 6.0f ? dy : 0.0f;
  return dy;
}

// A ReluGrad or Relu6Grad that a kernel applies to its input gradient dy as it reads it (a fused
// one): element i is activation_grad_op_value(dy[i], activated[i], activation). None where
// `activated` is null.
struct ActivationGrad {
  const float* activated = nullptr;
  Activation activation = Activation::None;
};

}  // namespace sf
