// Three builds of one loop: AVX-512 intrinsics (sparse_accumulate_avx512.cc), and the portable
// loop compiled for AVX2 and for the baseline ISA. No -march flag: each is compiled for its own
// target and picked at run time.
#include "kernels/sparse/sparse_accumulate.h"

#include <algorithm>

#include "cpu/cpu_features.h"
#include "kernels/sparse/avx512_loops.h"

namespace sf::sparse {

namespace {

template <typename Index>
[[gnu::always_inline]] inline void accumulate_loop(const float* src, const Index* index,
                                                   int64_t stride, const float* values,
                                                   int64_t count, int64_t len, float* out) {
  // A chunk of outputs small enough that the compiler can keep its sums close.
  constexpr int64_t kChunk = 64;
  for (int64_t start = 0; start < len; start += kChunk) {
    const int64_t n = std::min(kChunk, len - start);
    float acc[kChunk] = {};
    for (int64_t j = 0; j < count; ++j) {
      const float v = values[j];
      const float* row = src + static_cast<int64_t>(index[j]) * stride + start;
      for (int64_t i = 0; i < n; ++i) acc[i] += v * row[i];
    }
    std::copy(acc, acc + n, out + start);
  }
}

template <typename Index>
void accumulate_portable(const float* src, const Index* index, int64_t stride, const float* values,
                         int64_t count, int64_t len, float* out) {
  accumulate_loop(src, index, stride, values, count, len, out);
}

#if defined(__x86_64__)
template <typename Index>
__attribute__((target("avx2,fma"))) void accumulate_avx2(const float* src, const Index* index,
                                                         int64_t stride, const float* values,
                                                         int64_t count, int64_t len, float* out) {
  accumulate_loop(src, index, stride, values, count, len, out);
}
#endif

}  // namespace

template <typename Index>
AccumulateFn<Index> best_accumulate() {
#if defined(__x86_64__)
  const CpuFeatures& cpu = cpu_features();
  if (cpu.avx512f) return accumulate_avx512<Index>;
  if (cpu.avx2 && cpu.fma) return accumulate_avx2<Index>;
#endif
  return accumulate_portable<Index>;
}

template <typename Index>
AccumulateFn<Index> portable_accumulate() {
  return accumulate_portable<Index>;
}

template AccumulateFn<uint16_t> best_accumulate<uint16_t>();
template AccumulateFn<uint32_t> best_accumulate<uint32_t>();
template AccumulateFn<uint16_t> portable_accumulate<uint16_t>();
template AccumulateFn<uint32_t> portable_accumulate<uint32_t>();

}  // namespace sf::sparse
