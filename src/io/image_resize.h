// Resizing float images (HWC, channels interleaved) with a triangle filter: bilinear
// interpolation when enlarging; when shrinking the filter widens by the shrink factor, so each
// output pixel also averages the input pixels it covers. Pixel centres sit at i + 0.5 on both
// grids, and the image's edge pixels extend beyond it (clamped).
//
// This is the filter of stb_image_resize's STBIR_FILTER_TRIANGLE, written here because Debian's
// libstb (git 2022-09-08) aborts on an assertion for about one shrink ratio in six (a 270x270
// image to 224x224, 36x36 to 28x28): its weights' float sum overshoots its own bound.
#pragma once

#include <cstdint>

namespace sf {

// Writes `out_width` x `out_height` pixels of `channels` floats to `dst` from the `width` x
// `height` image `src`. All sizes must be positive (callers check them).
void resize_triangle(const float* src, int64_t width, int64_t height, int64_t channels,
                     float* dst, int64_t out_width, int64_t out_height);

}  // namespace sf
