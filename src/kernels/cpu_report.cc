#include "kernels/cpu_report.h"

#include <fmt/format.h>

#include <fstream>
#include <oneapi/dnnl/dnnl.hpp>
#include <thread>

#include "cpu/cpu_features.h"
#include "kernels/onednn/onednn_common.h"
#include "kernels/sparse/block_product.h"
#include "kernels/sparse/int8_sparse_product.h"

namespace sf {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    // x86 names the model; arm64 kernels only name the implementer and part.
    for (const char* key : {"model name", "Model", "CPU part"}) {
      if (line.rfind(key, 0) != 0) continue;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const size_t begin = line.find_first_not_of(" \t", colon + 1);
      if (begin != std::string::npos) return line.substr(begin);
    }
  }
  return "unknown";
}

std::string onednn_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::all: break;
  }
  return "generic";  // aarch64 and other non-x86 builds
}

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// The implementation oneDNN picks for a 64x512 * 512x512 product, as our kernels create it.
std::string matmul_path(dt a, dt b, dt c) {
  try {
    const dnnl::memory::dims m = {64, 512}, w = {512, 512};
    dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(dnnl::memory::desc(m, a, tag::ab), dnnl::memory::desc(w, b, tag::ab),
                           dnnl::memory::desc(m, c, tag::ab)),
        onednn::engine());
    return pd.impl_info_str();
  } catch (const dnnl::error&) {
    return "not available";
  }
}

// A 3x3 convolution of a 28x28x32 NHWC batch of 8 into 64 channels, weights in the layout the
// primitive prefers (as our conv kernels ask for them).
std::string conv_path(dt src, dt weights, dt dst) {
  try {
    dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
            dnnl::memory::desc({8, 32, 28, 28}, src, tag::nhwc),
            dnnl::memory::desc({64, 32, 3, 3}, weights, tag::any),
            dnnl::memory::desc({8, 64, 28, 28}, dst, tag::nhwc), {1, 1}, {1, 1}, {1, 1}),
        onednn::engine());
    return pd.impl_info_str();
  } catch (const dnnl::error&) {
    return "not available";
  }
}

}  // namespace

CpuReport describe_cpu() {
  const CpuFeatures& cpu = cpu_features();
  CpuReport r;
  r.model = cpu_model();
  r.logical_cpus = std::thread::hardware_concurrency();
  r.features = feature_names(cpu);
  const dnnl_version_t* v = dnnl_version();
  r.onednn_version = fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
  r.onednn_isa = onednn_isa_name();
  r.amx = cpu.amx_bf16 && cpu.amx_int8;

  r.paths.push_back({"fp32 matmul", matmul_path(dt::f32, dt::f32, dt::f32)});
  r.paths.push_back({"fp32 conv", conv_path(dt::f32, dt::f32, dt::f32)});
  r.paths.push_back({"int8 matmul", matmul_path(dt::u8, dt::s8, dt::s32)});
  r.paths.push_back({"int8 conv", conv_path(dt::u8, dt::s8, dt::u8)});
  r.paths.push_back({"int8 products exact (no int16 saturation)",
                     onednn::exact_int8_products() ? "yes (VNNI)" : "no (vpmaddubsw pairs)"});
  r.paths.push_back({"bf16 matmul", matmul_path(dt::bf16, dt::bf16, dt::f32)});
  const bool sparse_fp32_simd =
      sparse::best_block_strip<uint32_t>(16) != sparse::portable_block_strip<uint32_t>(16);
  r.paths.push_back(
      {"sparse fp32 products", sparse_fp32_simd ? (cpu.avx512f ? "avx512" : "avx2") : "portable"});
  const bool sparse_int8_simd = sparse::best_quad_strip() != sparse::portable_quad_strip();
  r.paths.push_back({"sparse int8 products", sparse_int8_simd ? "avx512_vnni" : "portable"});

  if (r.amx)
    r.bf16 = "AMX tiles: bf16 and int8 products run on AMX (several times fp32's throughput)";
  else if (cpu.avx512_bf16)
    r.bf16 =
        "no AMX: bf16 products use avx512_bf16 (vdpbf16ps, at most twice fp32's rate); "
        "--precision auto trains in fp32 here, --precision bf16 chooses bf16";
  else
    r.bf16 = "no bf16 instructions: bf16 would be emulated, slower than fp32";
  return r;
}

}  // namespace sf
