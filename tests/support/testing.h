// Shared test helpers: random tensors, finite-difference gradient checks, and comparisons of an
// optimized kernel against the reference kernel on the same one-op graph.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"
#include "runtime/precision.h"

namespace sf::testing {

Tensor random_tensor(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
// How many nodes of `g` run `op`.
int count_ops(const Graph& g, const std::string& op);
Tensor random_labels(int64_t count, int64_t classes, uint32_t seed);

// Builds the graph under test from placeholders for `inputs` (same dtypes and shapes).
using BuildFn = std::function<Output(Graph&, const std::vector<Output>&)>;

struct GradCheckOptions {
  double eps = 1e-2;   // central-difference step
  double rtol = 2e-2;  // |analytic - numeric| <= atol + rtol * |numeric|
  double atol = 2e-3;
  bool training = false;  // run kernels in training mode (dropout, batch norm)
  std::string impl = "reference";
};

// Checks d(sum(y * R)) / d(input) for every f32 input against central differences, where R is
// a fixed random tensor. Reports the seed and the worst element on failure (gtest assertions).
void expect_gradients_match(const BuildFn& build, const std::vector<Tensor>& inputs, uint32_t seed,
                            const GradCheckOptions& options = {});

// How far a kernel's output may be from the reference's. Floats: |got - want| <= atol +
// rtol * |want|. Integers: |got - want| <= units (0: exact; 1: the one unit by which
// requantizing in float may differ from the reference's fixed point).
struct Tolerance {
  double rtol = 1e-4;
  double atol = 1e-4;
  int64_t units = 0;
};

// Expects `got` to have `want`'s dtype and shape and values within `tolerance`; a failure names
// `what`, the first mismatch, and the max and mean error.
void expect_close(const Tensor& want, const Tensor& got, const Tolerance& tolerance,
                  const std::string& what);

// Runs the node `build` makes, on placeholders for `inputs` (Consts where `constant[i]`), with
// `impl` forced and, if a kernel of `impl` accepted the node, with the reference kernels, and
// expects every output of the node to match within `tolerance` (on two runs when an input is a
// Const, which kernels may prepare on the first run only). Returns the implementation the
// session chose for the node: `impl`, or "reference" when `impl` declined it (nothing compared).
// Under Precision::bf16 the kernel runs in a bf16 session and the reference on the float inputs
// rounded to bf16 (as a product that rounds all of its inputs computes).
std::string compare_with_reference(const BuildFn& build, const std::vector<Tensor>& inputs,
                                   const std::vector<bool>& constant, const std::string& impl,
                                   const Tolerance& tolerance,
                                   Precision precision = Precision::fp32);

// t's values rounded to bf16 to nearest even (as oneDNN's and our AVX-512 conversions do),
// kept as fp32.
Tensor rounded_to_bf16(const Tensor& t);

// compare_with_reference on fed inputs, integer outputs exact; also asserts that `impl` was
// actually chosen for the node (unless allow_fallback).
void expect_impl_matches_reference(const BuildFn& build, const std::vector<Tensor>& inputs,
                                   const std::string& impl, double rtol = 1e-4, double atol = 1e-4,
                                   bool allow_fallback = false);

// Whether oneDNN can be expected to run every node the oneDNN kernel tests give it: its x86-64
// JIT code covers them all; elsewhere some have only oneDNN's reference code, which our kernels
// decline (the reference kernels run instead), so tests that insist on oneDNN skip there.
bool onednn_jit_covers_all();

// Expects `fn` to throw sf::Error whose message contains `want`.
void expect_error(const std::function<void()>& fn, const std::string& want);

// The message of the sf::Error that `fn` throws, or "(no error)".
std::string error_of(const std::function<void()>& fn);
// The message of the sf::Error that `build` throws while building into an empty graph, or
// "(no error)".
std::string error_of(const std::function<void(Graph&)>& build);

// A tensor's elements as a vector.
template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// Runs the graph once and returns output 0 of the built node (a clone).
Tensor run_once(const BuildFn& build, const std::vector<Tensor>& inputs,
                const std::string& impl = "", bool training = false);

}  // namespace sf::testing
