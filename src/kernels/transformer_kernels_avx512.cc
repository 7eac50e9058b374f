// LayerNorm and Gelu (impl "avx512"; x86-64 builds only): the fused forms of the decomposed
// LayerNormalization and erf GELU that PyTorch exports for transformer encoders
// (transforms/execution_passes.h). Unfused, a 128x256 LayerNorm ran nine reference kernels
// (its Pow alone 0.4 ms); here it is one pass to sum, one for the squared deviations and one
// to write. CPUs without AVX-512 run the portable kernels (transformer_kernels.cc).
#include "kernels/transformer_kernels_avx512.h"

// GCC 12's intrinsics start from _mm512_undefined_ps(), a deliberate self-initialization that
// -W(maybe-)uninitialized reports once they are inlined here (as in int8_loops_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "cpu/avx512_lanes.h"
#include "cpu/cpu_features.h"
#include "cpu/parallel_for.h"
#include "kernels/erf_rational.h"
#include "kernels/kernel.h"
#include "kernels/layer_norm_rows.h"
#include "kernels/register.h"
#include "ops/op_names.h"

namespace sf {

namespace {

constexpr int kPriority = 10;
constexpr int64_t kParallelMin = 1 << 14;  // elements; below this one thread is quicker

// One row of `channels` values. Masked loads and arithmetic keep the tail's lanes zero, so the
// sums see only the row.
__attribute__((target("avx512f"))) void layer_norm_row(const float* x, const float* gamma,
                                                       const float* beta, float* y,
                                                       int64_t channels, float epsilon) {
  __m512 sum = _mm512_setzero_ps();
  for (int64_t c = 0; c < channels; c += 16)
    sum = _mm512_add_ps(sum, load16(x + c, lanes16(c, channels)));
  const float mean_value = _mm512_reduce_add_ps(sum) / static_cast<float>(channels);
  const __m512 mean = _mm512_set1_ps(mean_value);
  __m512 sq = _mm512_setzero_ps();
  for (int64_t c = 0; c < channels; c += 16) {
    const __mmask16 m = lanes16(c, channels);
    const __m512 d = _mm512_maskz_sub_ps(m, load16(x + c, m), mean);
    sq = _mm512_fmadd_ps(d, d, sq);
  }
  const float var = _mm512_reduce_add_ps(sq) / static_cast<float>(channels);
  const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(var + epsilon));
  for (int64_t c = 0; c < channels; c += 16) {
    const __mmask16 m = lanes16(c, channels);
    const __m512 d = _mm512_sub_ps(load16(x + c, m), mean);
    const __m512 g = _mm512_mul_ps(load16(gamma + c, m), inv);
    store16(y + c, m, _mm512_fmadd_ps(d, g, load16(beta + c, m)));
  }
}

void layer_norm(KernelContext& ctx) { layer_norm_rows(ctx, kParallelMin, layer_norm_row); }

// erf_rational::erf, sixteen lanes at a time (fused multiply-adds).
__attribute__((target("avx512f"))) __m512 erf_ps(__m512 z) {
  using namespace erf_rational;
  const __m512 zc =
      _mm512_min_ps(_mm512_max_ps(z, _mm512_set1_ps(-kClamp)), _mm512_set1_ps(kClamp));
  const __m512 t = _mm512_mul_ps(zc, zc);
  __m512 p = _mm512_set1_ps(kP[kPSize - 1]);
  for (int i = kPSize - 2; i >= 0; --i) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kP[i]));
  __m512 q = _mm512_set1_ps(kQ[kQSize - 1]);
  for (int i = kQSize - 2; i >= 0; --i) q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kQ[i]));
  const __m512 r = _mm512_div_ps(_mm512_mul_ps(zc, p), q);
  return _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-1.0f)), _mm512_set1_ps(1.0f));
}

__attribute__((target("avx512f"))) void gelu_span(const float* x, float* y, int64_t n) {
  const __m512 inv_sqrt2 = _mm512_set1_ps(0.70710678118654752440f);
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(i, n);
    const __m512 v = load16(x + i, m);
    const __m512 e = erf_ps(_mm512_mul_ps(v, inv_sqrt2));
    store16(y + i, m, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, e)));
  }
}

// Spans of whole vectors, so threads never share a cache line of the output.
template <typename Span>
void split_spans(const float* x, float* y, int64_t n, Span span) {
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(
      0, chunks, n >= kParallelMin,
      [&](int64_t share_begin, int64_t share_end) __attribute__((target("avx512f"))) {
        for (int64_t k = share_begin; k < share_end; ++k) {
          const int64_t begin = k * kChunk;
          span(x + begin, y + begin, std::min(kChunk, n - begin));
        }
      });
}

void gelu(KernelContext& ctx) {
  split_spans(ctx.inputs[0].data<float>(), ctx.outputs[0].data<float>(), ctx.inputs[0].numel(),
              gelu_span);
}

__attribute__((target("avx512f"))) void erf_span(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(i, n);
    store16(y + i, m, erf_ps(load16(x + i, m)));
  }
}

bool has_avx512(const KernelSpec&) { return cpu_features().avx512f; }

}  // namespace

void erf_avx512(const float* x, float* y, int64_t n) { erf_span(x, y, n); }

void register_transformer_kernels_avx512(KernelRegistry& r) {
  using Compute = void (*)(KernelContext&);
  const std::pair<const char*, Compute> kernels[] = {{op_names::kLayerNorm, layer_norm},
                                                     {op_names::kGelu, gelu}};
  for (const auto& [op, compute] : kernels) {
    KernelDef def = simple_kernel(op, DType::f32, "avx512", compute, kPriority);
    def.accepts = has_avx512;
    r.add(std::move(def));
  }
}

}  // namespace sf
