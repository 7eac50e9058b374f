// The XNOR conv without im2col: each output pixel's window is read straight from the packed
// input image, tap by tap, and the 32-bit lanes of a vector hold 16 output channels.
//
// The input image is packed once per call, one pixel after another, each pixel's channels in
// `dwords` 32-bit words (bit c % 32 of dword c / 32 set where x > 0; the bits past the channel
// count 0), with the conv's zero padding as pixels of zero bits around it, so that every tap of
// every window is a plain load. A padded tap's bits read as -1, and the layer's border
// corrections (binary_kernels.cc) add back what it took, exactly as on the im2col path.
//
// Per tap, dword d of the window's pixel is broadcast and XORed with dword d of 16 channels'
// weights at a time; the mismatch counts accumulate per lane, several pixels and up to 64
// channels in registers, and the epilogue (border, scale, bias, activation) writes the output
// directly, so the products never go through memory.
//
// The channels of a pixel are padded to a multiple of 32 bits, so the layer takes this path
// when that wastes little (`direct_conv_fits`); small channel counts keep the im2col path.
#pragma once

#include <cstdint>
#include <vector>

#include "codec/binary_weights.h"

namespace sf::binary {

inline int64_t dwords_for(int64_t bits) { return (bits + 31) / 32; }

// At most a quarter of each pixel's packed bits are padding.
inline bool direct_conv_fits(int64_t in_channels) {
  return 32 * dwords_for(in_channels) * 3 <= in_channels * 4;
}

// Binary levels of an HWIO filter [taps * in, n] (tap-major), per tap and dword:
// bits[((t * dwords + d) * vectors + v) * 16 + lane] holds input channels [32 d, 32 d + 32) of
// output channel 16 v + lane (0 past n and past the input channels).
struct TapWeights {
  int64_t taps = 0, in = 0, n = 0, dwords = 0, vectors = 0;
  std::vector<uint32_t> bits;
};
TapWeights pack_tap_weights(const quant::SignedLevels& levels, int64_t taps, int64_t in, int64_t n);

// The padded packed image and the conv's window, in padded coordinates: output (y, x) tap (i, j)
// reads pixel (y * stride_h + i * dilation_h, x * stride_w + j * dilation_w).
struct PackedImage {
  int64_t batch = 0, height = 0, width = 0, dwords = 0;  // height, width: padded
  int64_t pad_top = 0, pad_left = 0;
  const uint32_t* bits = nullptr;  // [batch][height][width][dwords]
};
struct DirectConvWindow {
  int64_t out_h = 0, out_w = 0, kh = 0, kw = 0, stride_h = 1, stride_w = 1, dilation_h = 1,
          dilation_w = 1;
};

// What the epilogue applies: y = clamp((dot + border[pixel][o]) * scale[o] + bias[o], lo, hi),
// the same float steps as the other paths, so that the outputs are equal exactly.
struct ConvEpilogue {
  const int32_t* border = nullptr;  // [out_h * out_w][n]
  const float* scale = nullptr;
  const float* bias = nullptr;
  float lo = 0.0f, hi = 0.0f;
};

}  // namespace sf::binary
