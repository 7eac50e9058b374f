// What this CPU offers and which code paths the engine takes on it: the answer of
// `slimflow inspect --cpu`, and the line benchmarks print beside their figures.
#pragma once

#include <string>
#include <vector>

namespace sf {

// One kind of work and the implementation that runs it here ("fp32 matmul" ->
// "brg:avx512_core"). oneDNN's entries are the implementation names its primitives report.
struct KernelPath {
  std::string work;
  std::string path;
};

struct CpuReport {
  std::string model;                  // "AMD EPYC" (from /proc/cpuinfo; "unknown" elsewhere)
  unsigned logical_cpus = 0;
  std::vector<std::string> features;  // the CpuFeatures flags that are set
  std::string onednn_version;         // "2.6.3"
  std::string onednn_isa;             // oneDNN's effective ISA: "avx512_core_bf16"
  std::vector<KernelPath> paths;
  bool amx = false;                   // amx_bf16 and amx_int8 tiles usable
  std::string bf16;                   // what bf16 compute means on this CPU, in one sentence
};

// Probes oneDNN with small primitives (a few milliseconds, once per call).
CpuReport describe_cpu();

}  // namespace sf
