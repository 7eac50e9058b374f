// The CPU-feature module: flags of other architectures stay off, subsets come with their base,
// and flushing cache lines leaves the data as it was.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "cpu/cache_flush.h"
#include "cpu/cpu_features.h"

namespace sf {
namespace {

TEST(CpuFeatures, OnlyThisArchitecturesFlagsAreSet) {
  const CpuFeatures& cpu = cpu_features();
#if defined(__x86_64__)
  EXPECT_FALSE(cpu.neon || cpu.dotprod);
#elif defined(__aarch64__)
  EXPECT_TRUE(cpu.neon);  // every Linux aarch64 CPU has Advanced SIMD
  EXPECT_FALSE(cpu.avx2 || cpu.fma || cpu.avx512f || cpu.avx512bw || cpu.avx512vl ||
               cpu.avx512dq || cpu.avx512_vnni || cpu.avx_vnni || cpu.avx512_bf16 ||
               cpu.avx512_vpopcntdq || cpu.amx_bf16 || cpu.amx_int8);
#endif
}

TEST(CpuFeatures, AvxFiveTwelveExtensionsComeWithTheFoundation) {
  const CpuFeatures& cpu = cpu_features();
  for (bool extension : {cpu.avx512bw, cpu.avx512vl, cpu.avx512dq, cpu.avx512_vnni,
                         cpu.avx512_bf16, cpu.avx512_vpopcntdq})
    EXPECT_TRUE(!extension || cpu.avx512f);
  EXPECT_TRUE(!cpu.avx512f || cpu.avx2);
}

TEST(CacheFlush, LeavesTheDataAsItWas) {
  std::vector<float> data(10'000);
  std::iota(data.begin(), data.end(), 0.0f);
  // From an address inside a cache line, so the first and last lines are partial.
  flush_cache_lines(data.data() + 3, (data.size() - 5) * sizeof(float));
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], static_cast<float>(i));
}

}  // namespace
}  // namespace sf
