// LayerNorm and Gelu in portable C++ (impl "portable"): what CPUs without AVX-512 (and aarch64)
// run instead of the reference kernels, which sum in double and call std::erf per element.
// Rows are summed in float, two passes; erf is erf_rational's approximation, as in the AVX-512
// kernels (transformer_kernels_avx512.cc), which rank above these where the CPU has AVX-512.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "cpu/parallel_for.h"
#include "kernels/erf_rational.h"
#include "kernels/kernel.h"
#include "kernels/layer_norm_rows.h"
#include "kernels/register.h"
#include "ops/op_names.h"

namespace sf {

namespace {

constexpr int kPriority = 5;
constexpr int64_t kParallelMin = 1 << 14;  // elements; below this one thread is quicker

void layer_norm_row(const float* x, const float* gamma, const float* beta, float* y,
                    int64_t channels, float epsilon) {
  const float scale = 1.0f / static_cast<float>(channels);
  float sum = 0.0f;
  for (int64_t c = 0; c < channels; ++c) sum += x[c];
  const float mean = sum * scale;
  float sq = 0.0f;
  for (int64_t c = 0; c < channels; ++c) sq += (x[c] - mean) * (x[c] - mean);
  const float inv = 1.0f / std::sqrt(sq * scale + epsilon);
  for (int64_t c = 0; c < channels; ++c) y[c] = (x[c] - mean) * (inv * gamma[c]) + beta[c];
}

void layer_norm(KernelContext& ctx) { layer_norm_rows(ctx, kParallelMin, layer_norm_row); }

void gelu(KernelContext& ctx) {
  const float* x = ctx.inputs[0].data<float>();
  float* y = ctx.outputs[0].data<float>();
  const int64_t n = ctx.inputs[0].numel();
  parallel_for(0, n, n >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
    for (int64_t i = share_begin; i < share_end; ++i)
      y[i] = 0.5f * x[i] * (1.0f + erf_rational::erf(x[i] * 0.70710678118654752440f));
  });
}

}  // namespace

void register_transformer_kernels(KernelRegistry& r) {
  using Compute = void (*)(KernelContext&);
  const std::pair<const char*, Compute> kernels[] = {{op_names::kLayerNorm, layer_norm},
                                                     {op_names::kGelu, gelu}};
  for (const auto& [op, compute] : kernels)
    r.add(simple_kernel(op, DType::f32, "portable", compute, kPriority));
}

}  // namespace sf
