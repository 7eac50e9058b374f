// Magnitude pruning: which weights a model has to prune, masks that zero the smallest weights
// (or blocks of weights) of a layer, a model-wide threshold, and the gradual (cubic) sparsity
// schedule.
//
// Blocks: `block` consecutive weights of one row along the last axis, which holds the output
// channels of both [K, N] dense and HWIO conv weights, so a block is R adjacent values in memory
// that one vector load of a block-sparse kernel reads (kernels/sparse). Rows are cut from their
// start; when the row length is not a multiple of `block`, the last block of each row is shorter.
// A block's magnitude is its norm per weight: L1 / size ("l1") or L2 / sqrt(size) ("l2"), so
// that blocks of different sizes compare and block 1 is |w| with either norm.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/spec.h"

namespace sf {

// The parameters that layers read as their weights (the weight inputs their ops declare:
// conv filters, dense matrices), directly or fake-quantized; biases and norm parameters are
// left dense. In model order.
std::vector<std::string> prunable_weights(const Model& model);

// The layer name of a prunable weight: "fc1/weights" -> "fc1".
std::string layer_of(const std::string& weight_name);

// The block sizes `slimflow prune --block` takes: 1 (single weights) and the widths the
// block-sparse kernels run.
bool is_prune_block(int64_t block);

// The block a weight is pruned in under `prune --block R`: R for dense [K, N] weights, which the
// block-sparse MatMul kernels run faster; single weights for conv filters, whose sparse kernel
// (per output channel) gains nothing from blocks while blocks cost accuracy (Deep-MNIST, conv2
// at 90% and fc1 at 97%, 4 epochs: 99.11% with blocks of 16 in both, 99.35% with conv2 single).
int64_t prune_block_for(const Tensor& weights, int64_t block);

// A 0/1 mask that zeros exactly round(sparsity * blocks) blocks, those of smallest magnitude
// (earlier blocks first among equal magnitudes); with whole blocks that is round(sparsity * n)
// weights. Blocks already zero count as pruned first. `norm` is "l1" or "l2".
Tensor magnitude_mask(const Tensor& weights, double sparsity, int64_t block = 1,
                      const std::string& norm = "l1");

// Per-layer sparsities (fractions of each layer's blocks, as prune_block_for cuts them) that one
// magnitude threshold over the blocks of all `weights` gives when it zeros `target` of the weights in total (the model-wide
// target: large, redundant layers take most of it).
std::map<std::string, double> global_sparsities(const std::map<std::string, const Tensor*>& weights,
                                                double target, int64_t block = 1,
                                                const std::string& norm = "l1");

// Multiplies in place.
void apply_mask(Tensor& weights, const Tensor& mask);

// Fraction of exact zeros.
double sparsity_of(const Tensor& t);

// Zhu & Gupta (2017): s(t) = s_f * (1 - (1 - t / ramp)^3), reaching s_f at t = ramp.
double cubic_sparsity(int64_t step, int64_t ramp_steps, double final_sparsity);

}  // namespace sf
