// The standard shape set of every op that has a kernel besides the reference one, read by
// kernel_registry_test: only the op knows what valid inputs are, so each case gives the inputs'
// shapes, dtypes and value ranges and the node's attributes, covering sizes 1, primes, the SIMD
// vector width ±1 (16 floats, 64 bytes), strides, padding, dilation and groups where the op has
// them. Every kernel registered for the op runs every case it accepts against the reference.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/attr.h"
#include "support/testing.h"

namespace sf::testing {

// How the values of one input are drawn.
struct InputSpec {
  DType dtype = DType::f32;
  Shape shape;
  double lo = -1.0, hi = 1.0;  // uniform; integer dtypes: whole numbers in [lo, hi]
  double step = 0.0;           // > 0: floats rounded to multiples of it (ties for max pooling)
  double zeros = 0.0;          // the fraction set to exactly zero (pruned weights)
  int64_t zero_block = 1;      // zeros in runs of this many along the last axis (block pruning)
  std::vector<float> values;   // literal values (quantization params) instead of random ones
  bool constant = false;       // a Const node (frozen weights, calibrated params); else fed
  // Non-empty: the reference output of this op on input 0 with the case's attributes
  // (MaxPoolGrad's y, which must be the max of each window of x).
  std::string output_of;
};

struct KernelCase {
  std::string name;
  std::vector<InputSpec> inputs;
  Attrs attrs;
};

struct ShapeSet {
  std::vector<KernelCase> cases;
  Tolerance tolerance;  // what every kernel of the op is held to
};

// By op name: every op with a kernel other than the reference one.
const std::map<std::string, ShapeSet>& kernel_shape_sets();

// The inputs of `c`, drawn from `seed`.
std::vector<Tensor> make_inputs(const KernelCase& c, uint32_t seed);

}  // namespace sf::testing
