// The multiply-accumulate rate this machine can reach in each number format, measured two ways:
//   instruction: a register-resident loop of the widest multiply-accumulate instruction the CPU
//     has for the format, on every thread at once: fp32 AVX-512 FMA (2 OP per lane), bf16
//     AVX512_BF16 vdpbf16ps and AMX tdpbf16ps, int8 AVX512_VNNI vpdpbusd and AMX tdpbssd; no
//     memory traffic, so this is the core's ceiling;
//   onednn: oneDNN's matmul at --size^3 (f32; bf16 in, f32 out; u8 x s8 -> s32), the best a
//     library reaches on large, cache-friendly products.
// Prints one JSON object; bench/op_rates.py puts each kernel's achieved OP/s next to these.
//   op_ceiling [--threads 2] [--size 2048] [--seconds 0.5]
#include <immintrin.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cpu/amx.h"
#include "cpu/cpu_features.h"

namespace {

using Clock = std::chrono::steady_clock;

// GCC 12's intrinsics start from _mm512_undefined_*(), a deliberate self-initialization that
// -Wmaybe-uninitialized reports once they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// Independent accumulators: enough to hide a 4-cycle latency on 2 ports.
constexpr int kChains = 12;

__attribute__((target("avx512f"))) float fp32_fma(int64_t iterations) {
  __m512 acc[kChains];
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], x, y);
  float sum = 0.0f;
  for (int j = 0; j < kChains; ++j) sum += _mm512_reduce_add_ps(acc[j]);
  return sum;
}

__attribute__((target("avx512f,avx512bf16"))) float bf16_dot(int64_t iterations) {
  __m512 acc[kChains];
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));  // 1.0
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3a83));  // ~1e-3
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  float sum = 0.0f;
  for (int j = 0; j < kChains; ++j) sum += _mm512_reduce_add_ps(acc[j]);
  return sum;
}

__attribute__((target("avx512f,avx512vnni"))) float int8_dot(int64_t iterations) {
  __m512i acc[kChains];
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_setzero_si512();
  for (int64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
  int64_t sum = 0;
  for (int j = 0; j < kChains; ++j) sum += _mm512_reduce_add_epi32(acc[j]);
  return static_cast<float>(sum);
}

// Four accumulator tiles (tmm0-3) fed by two A tiles and two B tiles, all 16 rows x 64 bytes.
template <bool kInt8>
__attribute__((target("amx-tile,amx-bf16,amx-int8"))) float amx_dot(int64_t iterations) {
  sf::AmxTileConfig config;
  for (int t = 0; t < 8; ++t) config.bytes_per_row[t] = 64, config.rows[t] = 16;
  _tile_loadconfig(&config);
  alignas(64) static thread_local uint8_t operand[16 * 64];
  alignas(64) static thread_local float result[16 * 16];
  std::memset(operand, 1, sizeof operand);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iterations; ++i) {
    if constexpr (kInt8) {
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 4, 7);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    } else {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, result, 64);
  _tile_release();
  return result[0];
}

#pragma GCC diagnostic pop

// OP/s of `loop` (doing `ops_per_iteration` per iteration) run on `threads` threads at once,
// with the iteration count grown until one run lasts about `seconds`.
double instruction_rate(const std::function<float(int64_t)>& loop, double ops_per_iteration,
                        int threads, double seconds) {
  int64_t iterations = 1 << 14;
  std::atomic<float> sink{0.0f};
  for (;;) {
    const auto start = Clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
      workers.emplace_back([&] { sink = sink + loop(iterations); });
    for (std::thread& w : workers) w.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (elapsed >= seconds)
      return ops_per_iteration * static_cast<double>(iterations) * threads / elapsed;
    iterations *= elapsed > seconds / 16 ? 2 : 8;
  }
}

struct GemmRate {
  double ops_per_second = 0.0;
  std::string impl;
};

GemmRate onednn_matmul(dnnl::memory::data_type in, dnnl::memory::data_type weights,
                       dnnl::memory::data_type out, int64_t n, double seconds) {
  using dnnl::memory;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc a_md({n, n}, in, memory::format_tag::ab);
  const memory::desc b_plain({n, n}, weights, memory::format_tag::ab);
  const memory::desc b_md({n, n}, weights, memory::format_tag::any);
  const memory::desc c_md({n, n}, out, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
  memory a(a_md, engine), b_user(b_plain, engine), b(pd.weights_desc(), engine), c(c_md, engine);
  std::memset(a.get_data_handle(), 1, a_md.get_size());
  std::memset(b_user.get_data_handle(), 1, b_plain.get_size());
  dnnl::reorder(b_user, b).execute(stream, b_user, b);
  dnnl::matmul product(pd);
  auto run = [&] {
    product.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  };
  run();
  double best = 1e30;
  const auto start = Clock::now();
  do {
    const auto t0 = Clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  } while (std::chrono::duration<double>(Clock::now() - start).count() < seconds);
  return {2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best,
          pd.impl_info_str()};
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  int64_t size = 2048;
  double seconds = 0.5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) threads = std::max(1, std::stoi(argv[++i]));
    else if (arg == "--size" && i + 1 < argc) size = std::max<int64_t>(64, std::stoll(argv[++i]));
    else if (arg == "--seconds" && i + 1 < argc) seconds = std::stod(argv[++i]);
    else {
      std::fprintf(stderr,
                   "op_ceiling: unknown argument '%s' (--threads N, --size N, --seconds S)\n",
                   arg.c_str());
      return 2;
    }
  }
  const sf::CpuFeatures& cpu = sf::cpu_features();
  std::string json = "{\"threads\": " + std::to_string(threads) + ", \"instruction\": {";
  bool first = true;
  auto add = [&](std::string& out, const char* name, double rate) {
    out += (first ? "" : ", ") + std::string("\"") + name + "\": " + std::to_string(rate);
    first = false;
  };
  if (cpu.avx512f)
    add(json, "fp32_avx512_fma",
        instruction_rate(fp32_fma, kChains * 16 * 2, threads, seconds));
  if (cpu.avx512_bf16)
    add(json, "bf16_avx512_dpbf16ps",
        instruction_rate(bf16_dot, kChains * 16 * 2 * 2, threads, seconds));
  if (cpu.avx512_vnni)
    add(json, "int8_avx512_vpdpbusd",
        instruction_rate(int8_dot, kChains * 16 * 4 * 2, threads, seconds));
  const bool amx = (cpu.amx_bf16 || cpu.amx_int8) && sf::amx_permitted();
  if (amx && cpu.amx_bf16)
    add(json, "bf16_amx_tdpbf16ps",
        instruction_rate(amx_dot<false>, 4.0 * 16 * 16 * 32 * 2, threads, seconds));
  if (amx && cpu.amx_int8)
    add(json, "int8_amx_tdpbssd",
        instruction_rate(amx_dot<true>, 4.0 * 16 * 16 * 64 * 2, threads, seconds));
  json += "}, \"onednn_matmul_size\": " + std::to_string(size) + ", \"onednn\": {";
  omp_set_num_threads(threads);
  using dt = dnnl::memory::data_type;
  first = true;
  struct Case {
    const char* name;
    dt in, weights, out;
  };
  for (const Case& c : {Case{"fp32", dt::f32, dt::f32, dt::f32},
                        Case{"bf16", dt::bf16, dt::bf16, dt::f32},
                        Case{"int8", dt::u8, dt::s8, dt::s32}}) {
    try {
      const GemmRate r = onednn_matmul(c.in, c.weights, c.out, size, seconds);
      json += (first ? "" : ", ") + std::string("\"") + c.name + "\": {\"ops_per_second\": " +
              std::to_string(r.ops_per_second) + ", \"impl\": \"" + r.impl + "\"}";
      first = false;
    } catch (const dnnl::error& e) {  // no kernel for this format on this CPU
      std::fprintf(stderr, "op_ceiling: oneDNN has no %s matmul here: %s\n", c.name, e.what());
    }
  }
  json += "}}";
  std::printf("%s\n", json.c_str());
  return 0;
}
