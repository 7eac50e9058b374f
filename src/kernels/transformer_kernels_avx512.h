// The AVX-512 kernels of the ops transformer encoders fuse into (LayerNorm, Gelu); x86-64 builds
// only, called after checking cpu_features().avx512f.
#pragma once

#include <cstdint>

namespace sf {

// y[i] = erf(x[i]) by the rational approximation the Gelu kernel uses (exposed for its test
// against std::erf).
void erf_avx512(const float* x, float* y, int64_t n);

}  // namespace sf
