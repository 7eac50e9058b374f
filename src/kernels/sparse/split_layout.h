// The input layout of the sparse conv kernels (fp32 sparse_conv_kernel.cc, int8
// int8_sparse_conv_kernel.cc): each image rewritten once per call into a padded, channel-major
// layout that is also split by stride phase. Plane (ci, rh, rw) holds the padded pixels (h, w)
// with h % sh == rh and w % sw == rw, at row h / sh and column w / sw. In that layout the inputs
// a tap (kh, kw, ci) meets along an output row are contiguous for every stride and dilation, and
// so are whole output images if each output row is computed Qw (the plane width) long and the
// spare columns dropped. Each nonzero tap then becomes one offset into the layout, and an output
// channel is one sum of scaled contiguous runs over the whole image.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/tensor.h"
#include "cpu/parallel_for.h"
#include "ops/conv_geometry.h"

namespace sf::sparse {

struct SplitLayout {
  int64_t channels = 0;
  int64_t sh = 1, sw = 1;  // strides: phases per axis
  int64_t qh = 0, qw = 0;  // rows and columns of one plane
  int64_t out_h = 0, out_w = 0;

  SplitLayout(const Window2D& g, int64_t c, int64_t kh, int64_t kw)
      : channels(c), sh(g.h.stride), sw(g.w.stride), out_h(g.h.out), out_w(g.w.out) {
    qh = out_h + (kh - 1) * g.h.dilation / sh;
    qw = out_w + (kw - 1) * g.w.dilation / sw;
  }
  int64_t plane() const { return qh * qw; }
  int64_t image() const { return channels * sh * sw * plane(); }
  // One output channel computed with Qw-long rows; the last row stops at out_w.
  int64_t run_length() const { return (out_h - 1) * qw + out_w; }
  // Where in the image output pixel (oh, ow) of a channel's run is.
  int64_t run_index(int64_t oh, int64_t ow) const { return oh * qw + ow; }

  int64_t tap_offset(int64_t kh, int64_t kw, int64_t ci, const Window2D& g) const {
    const int64_t h = kh * g.h.dilation, w = kw * g.w.dilation;
    return ((ci * sh + h % sh) * sw + w % sw) * plane() + (h / sh) * qw + w / sw;
  }

  // Writes image `b` of NHWC `x_tensor` into `out` in this layout, padding with `pad` (0 for
  // f32; the input zero point for u8, whose code stands for real zero). Walks the planes phase
  // by phase, so that no position needs a division by the stride.
  template <typename T>
  void split_image(const Tensor& x_tensor, int64_t b, const Window2D& g, T pad, T* out) const {
    const int64_t h_in = x_tensor.shape()[1], w_in = x_tensor.shape()[2];
    const int64_t c = channels, top = g.h.pad_before, left = g.w.pad_before;
    const int64_t plane_size = plane(), channel_step = sh * sw * plane_size;
    const T* x = x_tensor.data<T>() + b * h_in * w_in * c;
    std::fill(out, out + image(), pad);
    parallel_for(0, sh * qh, image() > 16384, [&](int64_t share_begin, int64_t share_end) {
      for (int64_t flat = share_begin; flat < share_end; ++flat) {
        const int64_t rh = flat / qh;
        const int64_t i = flat % qh;
        {
          const int64_t h = i * sh + rh - top;
          if (h < 0 || h >= h_in) continue;
          for (int64_t rw = 0; rw < sw; ++rw) {
            T* row = out + (rh * sw + rw) * plane_size + i * qw;
            for (int64_t j = 0; j < qw; ++j) {
              const int64_t w = j * sw + rw - left;
              if (w < 0 || w >= w_in) continue;
              const T* src = x + (h * w_in + w) * c;
              for (int64_t ci = 0; ci < c; ++ci) row[ci * channel_step + j] = src[ci];
            }
          }
        }
      }
    });
  }
};

}  // namespace sf::sparse
