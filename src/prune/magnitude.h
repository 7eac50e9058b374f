// Magnitude pruning: which weights a model has to prune, masks that zero the smallest weights
// of a layer, a model-wide threshold, and the gradual (cubic) sparsity schedule.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/spec.h"

namespace sf {

// The weights of conv and dense layers ("<layer>/weights", rank >= 2); biases and norm
// parameters are left dense. In model order.
std::vector<std::string> prunable_weights(const Model& model);

// The layer name of a prunable weight: "fc1/weights" -> "fc1".
std::string layer_of(const std::string& weight_name);

// A 0/1 mask with exactly round(sparsity * n) zeros at the smallest |w| (earlier elements
// first among equal magnitudes). Weights already zero count as pruned first.
Tensor magnitude_mask(const Tensor& weights, double sparsity);

// Per-layer sparsities that one magnitude threshold over all `weights` gives when it zeros
// `target` of them in total (the model-wide target: large, redundant layers take most of it).
std::map<std::string, double> global_sparsities(const std::map<std::string, const Tensor*>& weights,
                                                double target);

// Multiplies in place.
void apply_mask(Tensor& weights, const Tensor& mask);

// Fraction of exact zeros.
double sparsity_of(const Tensor& t);

// Zhu & Gupta (2017): s(t) = s_f * (1 - (1 - t / ramp)^3), reaching s_f at t = ramp.
double cubic_sparsity(int64_t step, int64_t ramp_steps, double final_sparsity);

}  // namespace sf
