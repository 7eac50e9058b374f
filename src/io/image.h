// Reading images (PNG, JPEG, BMP, GIF, TGA, PGM/PPM) and turning them into network inputs;
// writing grayscale PNGs (test digits for the README demo).
//
// Decoding uses Debian's libstb (resizing does not: io/image_resize.h says why). The header's
// width, height and channel count are read first and checked against kMaxImageSide and
// kMaxImageBytes, so a hostile or corrupt header gives a one-line sf::Error instead of a huge
// allocation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace sf {

// Largest accepted width or height, and largest decoded size (width * height * channels).
inline constexpr int64_t kMaxImageSide = 16384;
inline constexpr int64_t kMaxImageBytes = int64_t{256} << 20;
// The most a compressed image's decoded pixels may outnumber its file's bytes: deflate's 1032:1
// (PNG) on 1-bit pixels decoded to 4 bytes each; the other formats compress less.
inline constexpr int64_t kMaxImageCompression = 1032 * 32;

// 8-bit pixels, row-major, channels interleaved (HWC). channels: 1 gray, 2 gray+alpha, 3 RGB,
// 4 RGBA. 16-bit files are reduced to 8 bits.
struct Image {
  int64_t width = 0;
  int64_t height = 0;
  int64_t channels = 0;
  std::vector<uint8_t> pixels;  // width * height * channels bytes
};

// Decodes `path` with the channel count stored in the file. Throws sf::Error "<path>: ..." when
// the file cannot be opened, is not an image ("<path>: not an image (<stb's reason>)"), is a
// format stb knows but we refuse (PSD, PIC, HDR), is larger than the limits above, or is too
// small for the pixels its header declares.
Image decode_image(const std::string& path);

// Converts `img` to f32 [1, height, width, channels] (NHWC) with values (pixel - mean) / std,
// where pixels are 0..255. Resizing is bilinear (a triangle filter, which on shrinking also
// averages the pixels a target pixel covers; io/image_resize.h); edges are clamped.
// Channels: alpha is dropped when the target count differs from the image's; gray -> RGB
// replicates; RGB -> gray is luminance (0.299 R + 0.587 G + 0.114 B, as PIL's convert("L")).
// `channels` must be 1, 3 or the image's own count. Throws sf::Error on bad arguments.
Tensor image_to_tensor(const Image& img, int64_t width, int64_t height, int64_t channels,
                       float mean, float std);

// An f32 image batch [N,H,W,C] as [N,C,H,W], for models whose input is NCHW and cannot take
// NHWC images directly (transforms/image_input.h).
Tensor nhwc_to_nchw(const Tensor& nhwc);

// Writes an 8-bit grayscale PNG (`width` * `height` bytes, row-major). Throws sf::Error
// "<path>: ..." when the write fails.
void write_png(const std::string& path, const uint8_t* gray, int64_t width, int64_t height);

}  // namespace sf
