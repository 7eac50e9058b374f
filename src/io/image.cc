#include "io/image.h"

#include <stb/stb_image.h>
#include <stb/stb_image_write.h>
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

#include "core/little_endian.h"
#include "io/image_resize.h"

namespace sf {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

struct StbiFree {
  void operator()(unsigned char* p) const { stbi_image_free(p); }
};

const char* stb_reason() {
  const char* reason = stbi_failure_reason();
  return reason != nullptr ? reason : "unknown reason";
}

// The source pixels as floats with the alpha channel dropped (when the target count differs)
// and RGB reduced to luminance (when the target is gray), so that resizing touches no more
// channels than it must. Returns the channel count of `out`.
int64_t to_float_channels(const Image& img, int64_t target, std::vector<float>& out) {
  const int64_t n = img.width * img.height;
  const uint8_t* p = img.pixels.data();
  const int64_t c = img.channels;
  if (target == c) {
    out.assign(p, p + n * c);
    return c;
  }
  const int64_t color = (c == 2 || c == 4) ? c - 1 : c;  // without alpha
  if (target == 1 && color == 3) {
    out.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* px = p + i * c;
      out[static_cast<size_t>(i)] = 0.299f * px[0] + 0.587f * px[1] + 0.114f * px[2];
    }
    return 1;
  }
  out.resize(static_cast<size_t>(n * color));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < color; ++k) out[static_cast<size_t>(i * color + k)] = p[i * c + k];
  return color;
}

// The fewest bytes a file holding a w x h image of `decoded` bytes can have. Binary PNM and BMP
// (stb reads no run-length BMP) store pixels raw: a row per line of the image, BMP's padded to
// 4 bytes. The other formats compress, PNG by at most deflate's 1032:1 from pixels of as little
// as one bit that decode to up to 4 bytes (1-bit palette entries of RGBA colours): 33,024:1.
int64_t least_file_bytes(const unsigned char* header, size_t got, int64_t w, int64_t h,
                         int64_t decoded) {
  if (got >= 2 && header[0] == 'P' && (header[1] == '5' || header[1] == '6')) return decoded;
  if (got >= 34 && header[0] == 'B' && header[1] == 'M') {
    // OS/2's 12-byte info header has 16-bit sizes and no compression field.
    const bool os2 = get_le<uint32_t>(header + 14) == 12;
    const int64_t bits_per_pixel = get_le<uint16_t>(header + (os2 ? 24 : 28));
    const uint32_t compression = os2 ? 0 : get_le<uint32_t>(header + 30);
    if (compression == 0 || compression == 3)  // BI_RGB, BI_BITFIELDS
      return (w * bits_per_pixel + 31) / 32 * 4 * h;
  }
  return decoded / kMaxImageCompression;
}

// The name of a format stb_image decodes that we do not take, or nullptr. Photoshop, Softimage
// PIC and Radiance HDR are not image formats users feed a network, are not documented as
// inputs, and their stb decoders are the ones with the longest record of memory bugs.
const char* refused_format(const unsigned char* header, size_t got) {
  auto starts_with = [&](std::string_view magic) {
    return got >= magic.size() && std::memcmp(header, magic.data(), magic.size()) == 0;
  };
  if (starts_with("8BPS")) return "Photoshop (PSD)";
  if (starts_with("\x53\x80\xF6\x34")) return "Softimage PIC";
  if (starts_with("#?RADIANCE") || starts_with("#?RGBE")) return "Radiance HDR";
  return nullptr;
}

}  // namespace

Image decode_image(const std::string& path) {
  File file(std::fopen(path.c_str(), "rb"));
  if (!file) fail("{}: cannot open: {}", path, std::strerror(errno));
  // fopen succeeds on a folder; reading it would then report a confusing "unknown image type".
  struct stat st {};
  if (::fstat(fileno(file.get()), &st) != 0)
    fail("{}: cannot stat: {}", path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail("{}: cannot open: {}", path, std::strerror(EISDIR));

  unsigned char header[34] = {};
  const size_t header_bytes = std::fread(header, 1, sizeof(header), file.get());
  std::rewind(file.get());
  if (const char* format = refused_format(header, header_bytes))
    fail("{}: {} images are not supported; use PNG, JPEG, BMP, GIF, TGA or PGM/PPM", path, format);

  int w = 0, h = 0, c = 0;
  // stbi_info reads only the header and rewinds, so the limits are checked before decoding.
  if (stbi_info_from_file(file.get(), &w, &h, &c) == 0)
    fail("{}: not an image ({})", path, stb_reason());
  if (w <= 0 || h <= 0 || c < 1 || c > 4)
    fail("{}: not an image (bad header: {}x{} pixels, {} channels)", path, w, h, c);
  if (w > kMaxImageSide || h > kMaxImageSide)
    fail("{}: image is {}x{} pixels; the limit is {} per side", path, w, h, kMaxImageSide);
  const int64_t bytes = int64_t{w} * h * c;
  if (bytes > kMaxImageBytes)
    fail("{}: image is {}x{}x{} ({} bytes decoded); the limit is {} bytes", path, w, h, c, bytes,
         kMaxImageBytes);

  // A header that declares more pixels than the file can hold is truncated or hostile; stb
  // would still allocate the whole image and return it padded.
  const int64_t file_bytes = static_cast<int64_t>(st.st_size);
  const int64_t at_least = least_file_bytes(header, header_bytes, w, h, bytes);
  if (file_bytes < at_least)
    fail("{}: truncated: the header says {}x{}x{} ({} bytes of pixels), which needs a file of at "
         "least {} bytes, but the file has {} bytes",
         path, w, h, c, bytes, at_least, file_bytes);
  std::rewind(file.get());

  int dw = 0, dh = 0, dc = 0;
  std::unique_ptr<unsigned char, StbiFree> data(stbi_load_from_file(file.get(), &dw, &dh, &dc, 0));
  if (!data) {
    const std::string reason = stb_reason();
    fail("{}: cannot decode image ({})", path,
         reason.empty() ? "the decoder gave no reason; the file may be truncated" : reason);
  }
  // The header was read twice; a mismatch means a decoder bug, not a user error, but never
  // read past the buffer because of it.
  if (dw != w || dh != h || dc != c)
    fail("{}: cannot decode image (header says {}x{}x{}, decoder gave {}x{}x{})", path, w, h, c, dw,
         dh, dc);
  Image img;
  img.width = w;
  img.height = h;
  img.channels = c;
  img.pixels.assign(data.get(), data.get() + bytes);
  return img;
}

Tensor image_to_tensor(const Image& img, int64_t width, int64_t height, int64_t channels,
                       float mean, float std) {
  if (img.width <= 0 || img.height <= 0 || img.width > kMaxImageSide ||
      img.height > kMaxImageSide || img.channels < 1 || img.channels > 4)
    fail("image_to_tensor: bad image: {}x{} pixels, {} channels", img.width, img.height,
         img.channels);
  if (img.pixels.size() != static_cast<size_t>(img.width * img.height * img.channels))
    fail("image_to_tensor: image holds {} bytes, expected {}x{}x{}", img.pixels.size(), img.width,
         img.height, img.channels);
  if (width <= 0 || height <= 0 || width > kMaxImageSide || height > kMaxImageSide)
    fail("image_to_tensor: target size {}x{} is outside 1..{}", width, height, kMaxImageSide);
  if (channels != 1 && channels != 3 && channels != img.channels)
    fail("image_to_tensor: cannot convert a {}-channel image to {} channels (expected 1, 3 or {})",
         img.channels, channels, img.channels);
  if (!std::isfinite(mean) || !std::isfinite(std) || std == 0.0f)
    fail("image_to_tensor: mean {} and std {} must be finite and std non-zero", mean, std);

  std::vector<float> src;
  const int64_t c = to_float_channels(img, channels, src);
  std::vector<float> resized;
  const std::vector<float>* pixels = &src;
  if (width != img.width || height != img.height) {
    resized.resize(static_cast<size_t>(width * height * c));
    // A kept alpha channel is resized like any other, not premultiplied.
    resize_triangle(src.data(), img.width, img.height, c, resized.data(), width, height);
    pixels = &resized;
  }

  Tensor out(DType::f32, {1, height, width, channels});
  float* dst = out.data<float>();
  const int64_t n = width * height;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < channels; ++k) {
      // c is 1 when gray is replicated to RGB, so every k reads the same source value.
      float v = (*pixels)[static_cast<size_t>(i * c + (c == 1 ? 0 : k))];
      dst[i * channels + k] = (v - mean) / std;
    }
  return out;
}

Tensor nhwc_to_nchw(const Tensor& nhwc) {
  SF_CHECK(nhwc.rank() == 4 && nhwc.dtype() == DType::f32,
           "nhwc_to_nchw: {}{} is not an f32 image batch", dtype_name(nhwc.dtype()),
           shape_str(nhwc.shape()));
  const int64_t n = nhwc.dim(0), h = nhwc.dim(1), w = nhwc.dim(2), c = nhwc.dim(3);
  Tensor out(DType::f32, {n, c, h, w});
  const float* src = nhwc.data<float>();
  float* dst = out.data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        for (int64_t k = 0; k < c; ++k)
          dst[((b * c + k) * h + y) * w + x] = src[((b * h + y) * w + x) * c + k];
  return out;
}

void write_png(const std::string& path, const uint8_t* gray, int64_t width, int64_t height) {
  if (gray == nullptr || width <= 0 || height <= 0 || width > kMaxImageSide ||
      height > kMaxImageSide)
    fail("{}: cannot write PNG of {}x{} pixels (sides must be 1..{})", path, width, height,
         kMaxImageSide);
  errno = 0;
  int ok = stbi_write_png(path.c_str(), static_cast<int>(width), static_cast<int>(height), 1, gray,
                          static_cast<int>(width));
  if (ok == 0)
    fail("{}: cannot write PNG: {}", path, errno != 0 ? std::strerror(errno) : "write failed");
}

}  // namespace sf
