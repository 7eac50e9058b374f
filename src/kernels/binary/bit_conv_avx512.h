// The AVX-512 VPOPCNTDQ direct XNOR conv (bit_conv.h); x86-64 builds only, called when
// cpu_features() reports avx512f, avx512vl and avx512_vpopcntdq.
#pragma once

#include "kernels/binary/bit_conv.h"
#include "ops/conv_geometry.h"

namespace sf::binary {

// Packs `rows` rows of `k` floats into `dwords` 32-bit words each (bit set where x > 0, the bits
// past k 0); says whether every value was exactly -1 or +1.
bool pack_sign_dwords_avx512(const float* x, int64_t rows, int64_t k, int64_t dwords, uint32_t* out);
// MaxPoolSignBits (ops/binary_ops.h): x f32 NHWC, `g` its pooling window; out [batch, out_h,
// out_w, dwords_for(channels)].
void max_pool_sign_bits_avx512(const float* x, int64_t batch, int64_t h, int64_t w,
                               int64_t channels, const Window2D& g, uint32_t* out);
// x: f32 NHWC [batch, h, w, in] into `image` (whose padding must already be 0 bits). Says
// whether every value was exactly -1 or +1 (otherwise the layer is not XNOR).
bool pack_image_avx512(const float* x, int64_t h, int64_t w, int64_t in, const PackedImage& image,
                       uint32_t* bits);
// y: f32 [batch, out_h, out_w, n]; the output pixels split over OpenMP's threads when `split`.
void xnor_conv_avx512(const PackedImage& image, const DirectConvWindow& window,
                      const TapWeights& weights, const ConvEpilogue& epilogue, float* y,
                      bool split);

}  // namespace sf::binary
