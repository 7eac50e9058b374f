// LayerNorm and Gelu in portable C++ (impl "portable"): what CPUs without AVX-512 (and aarch64)
// run instead of the reference kernels, which sum in double and call std::erf per element.
// Rows are summed in float, two passes; erf is erf_rational's approximation, as in the AVX-512
// kernels (transformer_kernels_avx512.cc), which rank above these where the CPU has AVX-512.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "kernels/erf_rational.h"
#include "kernels/kernel.h"
#include "kernels/register.h"
#include "ops/op_names.h"

namespace sf {

namespace {

constexpr int kPriority = 5;
constexpr int64_t kParallelMin = 1 << 14;  // elements; below this one thread is quicker

void layer_norm(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t channels = x.dim(-1);
  const int64_t rows = channels == 0 ? 0 : x.numel() / channels;
  const float* px = x.data<float>();
  const float* gamma = ctx.inputs[1].data<float>();
  const float* beta = ctx.inputs[2].data<float>();
  float* y = ctx.outputs[0].data<float>();
  const float epsilon = static_cast<float>(ctx.node.attrs.get_float("epsilon"));
  const float scale = channels == 0 ? 0.0f : 1.0f / static_cast<float>(channels);
#pragma omp parallel for if (rows * channels >= kParallelMin) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * channels;
    float* yr = y + r * channels;
    float sum = 0.0f;
    for (int64_t c = 0; c < channels; ++c) sum += xr[c];
    const float mean = sum * scale;
    float sq = 0.0f;
    for (int64_t c = 0; c < channels; ++c) sq += (xr[c] - mean) * (xr[c] - mean);
    const float inv = 1.0f / std::sqrt(sq * scale + epsilon);
    for (int64_t c = 0; c < channels; ++c) yr[c] = (xr[c] - mean) * (inv * gamma[c]) + beta[c];
  }
}

void gelu(KernelContext& ctx) {
  const float* x = ctx.inputs[0].data<float>();
  float* y = ctx.outputs[0].data<float>();
  const int64_t n = ctx.inputs[0].numel();
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    y[i] = 0.5f * x[i] * (1.0f + erf_rational::erf(x[i] * 0.70710678118654752440f));
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
