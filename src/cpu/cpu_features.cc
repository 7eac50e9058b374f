#include "cpu/cpu_features.h"

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <utility>

namespace sf {

namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  // GCC's checks read CPUID and XGETBV, so a flag also means the OS saves its registers.
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512_vbmi = __builtin_cpu_supports("avx512vbmi");
  f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
  f.avx_vnni = __builtin_cpu_supports("avxvnni");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512_vpopcntdq = __builtin_cpu_supports("avx512vpopcntdq");
  f.amx_bf16 = __builtin_cpu_supports("amx-bf16");
  f.amx_int8 = __builtin_cpu_supports("amx-int8");
#elif defined(__aarch64__)
  const unsigned long hwcap = getauxval(AT_HWCAP);
  f.neon = (hwcap & HWCAP_ASIMD) != 0;
  f.dotprod = (hwcap & HWCAP_ASIMDDP) != 0;
#endif
  return f;
}

}  // namespace

std::vector<std::string> feature_names(const CpuFeatures& f) {
  const std::pair<bool, const char*> flags[] = {
      {f.avx2, "avx2"},
      {f.fma, "fma"},
      {f.avx512f, "avx512f"},
      {f.avx512bw, "avx512bw"},
      {f.avx512vl, "avx512vl"},
      {f.avx512dq, "avx512dq"},
      {f.avx512_vbmi, "avx512vbmi"},
      {f.avx512_vnni, "avx512_vnni"},
      {f.avx_vnni, "avx_vnni"},
      {f.avx512_bf16, "avx512_bf16"},
      {f.avx512_vpopcntdq, "avx512_vpopcntdq"},
      {f.amx_bf16, "amx_bf16"},
      {f.amx_int8, "amx_int8"},
      {f.neon, "asimd"},
      {f.dotprod, "asimddp"},
  };
  std::vector<std::string> names;
  for (const auto& [set, name] : flags)
    if (set) names.emplace_back(name);
  return names;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace sf
