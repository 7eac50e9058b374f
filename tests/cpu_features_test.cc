// The CPU-feature module: flags of other architectures stay off, subsets come with their base,
// flushing cache lines leaves the data as it was, and `inspect --cpu` reports what runs here.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "cpu/cache_flush.h"
#include "cpu/cpu_features.h"
#include "kernels/cpu_report.h"
#include "support/cli.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
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

TEST(CpuFeatures, NamesListExactlyTheFlagsSet) {
  CpuFeatures f;
  EXPECT_TRUE(feature_names(f).empty());
  f.avx512f = f.avx512_vpopcntdq = f.amx_int8 = true;
  EXPECT_EQ(feature_names(f), (std::vector<std::string>{"avx512f", "avx512_vpopcntdq", "amx_int8"}));
}

TEST(CpuReport, SaysWhatTheCpuHasAndWhichPathsRunOnIt) {
  const CpuReport r = describe_cpu();
  EXPECT_EQ(r.features, feature_names(cpu_features()));
  EXPECT_EQ(r.amx, cpu_features().amx_bf16 && cpu_features().amx_int8);
  EXPECT_GE(r.logical_cpus, 1u);
  EXPECT_FALSE(r.onednn_version.empty());
  const auto path = [&](const std::string& work) {
    auto it = std::find_if(r.paths.begin(), r.paths.end(),
                           [&](const KernelPath& p) { return p.work == work; });
    return it == r.paths.end() ? std::string("missing") : it->path;
  };
  // Every build runs fp32 products on oneDNN; the rest depends on the CPU but is always named.
  EXPECT_NE(path("fp32 matmul"), "missing");
  EXPECT_NE(path("fp32 matmul"), "not available");
  EXPECT_NE(path("int8 matmul"), "missing");
  EXPECT_EQ(path("sparse int8 products"),
            cpu_features().avx512_vnni && cpu_features().avx512bw ? "avx512_vnni" : "portable");
  const char* bf16 = r.amx                          ? "AMX tiles"
                     : cpu_features().avx512_bf16 ? "no AMX"
                                                  : "no bf16 instructions";
  EXPECT_NE(r.bf16.find(bf16), std::string::npos) << r.bf16;
}

TEST(CpuReport, InspectCpuPrintsItAsJsonAndAsText) {
  const testing::CliResult json = testing::run_cli("inspect --cpu --json", false);
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["features"].get<std::vector<std::string>>(), feature_names(cpu_features()));
  EXPECT_TRUE(j["kernel_paths"].contains("fp32 conv"));
  EXPECT_EQ(j["amx"].get<bool>(), describe_cpu().amx);
  const testing::CliResult text = testing::run_cli("inspect --cpu");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("oneDNN "), std::string::npos) << text.out;
  const testing::CliResult neither = testing::run_cli("inspect");
  EXPECT_NE(neither.exit_code, 0);
  EXPECT_NE(neither.out.find("slimflow: error: inspect: give a model file, or --cpu"),
            std::string::npos)
      << neither.out;
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
