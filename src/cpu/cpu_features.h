// What the CPU running this process can do, detected once at run time. Kernels ask here, in
// their `accepts` checks or when they pick a loop, instead of testing CPUs themselves; code that
// uses intrinsics lives in files CMake compiles only for their architecture (*_avx512.cc on
// x86-64) and is called only under `#if defined(__x86_64__)` after such a check.
//
// A flag is true only when both the CPU and the operating system support it (the OS must save
// the wider registers); on other architectures every flag of this one is false.
#pragma once

#include <string>
#include <vector>

namespace sf {

struct CpuFeatures {
  // x86-64
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_vbmi = false;  // vpermi2b: 64 bytes through a 128-byte table in one instruction
  bool avx512_vnni = false;  // vpdpbusd on 512-bit vectors: u8 x i8 dot products of four
  bool avx_vnni = false;     // the same on 256-bit vectors, VEX-encoded
  bool avx512_bf16 = false;
  bool avx512_vpopcntdq = false;
  bool amx_bf16 = false;  // the process must also ask Linux for the tiles: cpu/amx.h
  bool amx_int8 = false;
  // aarch64
  bool neon = false;
  bool dotprod = false;  // sdot/udot: i8 dot products of four
};

const CpuFeatures& cpu_features();

// The names of the flags that are set, as /proc/cpuinfo spells them ("avx512f", "amx_bf16").
std::vector<std::string> feature_names(const CpuFeatures& features);

}  // namespace sf
