// The inner loop of every sparse product here: a sum of scaled contiguous input rows,
//
//   out[0, len) = sum over j < count of values[j] * src[index[j] * stride + [0, len)]
//
// Each nonzero weight is loaded once and reused for `len` outputs (the rows of a batch, or the
// pixels of an output image), which is what lets a sparse product run at vector speed instead
// of gathering one input per multiply.
#pragma once

#include <cstdint>

namespace sf::sparse {

template <typename Index>
using AccumulateFn = void (*)(const float* src, const Index* index, int64_t stride,
                              const float* values, int64_t count, int64_t len, float* out);

// The fastest version this CPU runs (AVX-512, AVX2 or portable), chosen at run time.
template <typename Index>
AccumulateFn<Index> best_accumulate();

// The portable version, for tests to compare against.
template <typename Index>
AccumulateFn<Index> portable_accumulate();

// One sparse dot product: sum over j < count of values[j] * x[index[j]]. Batch-1 MatMul spends
// its time here; with one input row there is no reuse to vectorize. Four independent scalar sums
// measured as fast as AVX-512 gathers and as eight sums with FMA (the loop is bound by its three
// loads per nonzero), so it stays portable.
template <typename Index>
inline float sparse_dot(const Index* index, const float* values, int64_t count, const float* x) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    s0 += values[j] * x[index[j]];
    s1 += values[j + 1] * x[index[j + 1]];
    s2 += values[j + 2] * x[index[j + 2]];
    s3 += values[j + 3] * x[index[j + 3]];
  }
  for (; j < count; ++j) s0 += values[j] * x[index[j]];
  return (s0 + s1) + (s2 + s3);
}

}  // namespace sf::sparse
