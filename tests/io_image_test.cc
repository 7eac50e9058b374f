#include <gtest/gtest.h>
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "io/image.h"
#include "support/temp_files.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::TempDir;
using testing::read_file_bytes;
using testing::write_file_bytes;

using namespace std::string_literals;

std::string le(uint32_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}

// A 24-bit uncompressed BMP: bottom-up rows of BGR padded to 4 bytes.
std::string make_bmp24(int w, int h, const std::vector<uint8_t>& rgb) {
  const int row = (w * 3 + 3) / 4 * 4;
  std::string pixels;
  for (int y = h - 1; y >= 0; --y) {
    std::string r;
    for (int x = 0; x < w; ++x) {
      const uint8_t* p = &rgb[static_cast<size_t>((y * w + x) * 3)];
      r += {static_cast<char>(p[2]), static_cast<char>(p[1]), static_cast<char>(p[0])};
    }
    r.resize(static_cast<size_t>(row), '\0');
    pixels += r;
  }
  std::string info = le(40, 4) + le(static_cast<uint32_t>(w), 4) + le(static_cast<uint32_t>(h), 4) +
                     le(1, 2) + le(24, 2) + le(0, 4) + le(static_cast<uint32_t>(pixels.size()), 4) +
                     le(2835, 4) + le(2835, 4) + le(0, 4) + le(0, 4);
  std::string file_header =
      "BM" + le(static_cast<uint32_t>(14 + 40 + pixels.size()), 4) + le(0, 4) + le(14 + 40, 4);
  return file_header + info + pixels;
}

Image make_image(int64_t w, int64_t h, int64_t c, std::vector<uint8_t> pixels) {
  Image img;
  img.width = w;
  img.height = h;
  img.channels = c;
  img.pixels = std::move(pixels);
  return img;
}

using testing::error_of;

TEST(IoImage, PngRoundTripIsExact) {
  TempDir dir;
  std::vector<uint8_t> gray(5 * 3);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<uint8_t>(i * 17);
  write_png(dir.file("digit.png"), gray.data(), 5, 3);
  EXPECT_EQ(read_file_bytes(dir.file("digit.png")).substr(1, 3), "PNG");
  Image img = decode_image(dir.file("digit.png"));
  EXPECT_EQ(img.width, 5);
  EXPECT_EQ(img.height, 3);
  EXPECT_EQ(img.channels, 1);
  EXPECT_EQ(img.pixels, gray);
}

TEST(IoImage, DecodesHandWrittenPgmAndPpm) {
  TempDir dir;
  write_file_bytes(dir.file("a.pgm"), "P5\n# a comment\n3 2\n255\n\x00\x10\x20\x30\x40\xff"s);
  Image gray = decode_image(dir.file("a.pgm"));
  EXPECT_EQ(gray.width, 3);
  EXPECT_EQ(gray.height, 2);
  EXPECT_EQ(gray.channels, 1);
  EXPECT_EQ(gray.pixels, (std::vector<uint8_t>{0x00, 0x10, 0x20, 0x30, 0x40, 0xff}));

  write_file_bytes(dir.file("b.ppm"), "P6 2 1 255\n\x01\x02\x03\xfa\xfb\xfc"s);
  Image rgb = decode_image(dir.file("b.ppm"));
  EXPECT_EQ(rgb.channels, 3);
  EXPECT_EQ(rgb.pixels, (std::vector<uint8_t>{1, 2, 3, 250, 251, 252}));
}

TEST(IoImage, DecodesHandWrittenBmp) {
  TempDir dir;
  // 3 pixels wide so that rows need padding; top row red, green, blue.
  std::vector<uint8_t> rgb = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 40, 50, 60, 70, 80, 90};
  write_file_bytes(dir.file("c.bmp"), make_bmp24(3, 2, rgb));
  Image img = decode_image(dir.file("c.bmp"));
  EXPECT_EQ(img.width, 3);
  EXPECT_EQ(img.height, 2);
  EXPECT_EQ(img.channels, 3);
  EXPECT_EQ(img.pixels, rgb);
}

TEST(IoImage, DecodesJpegApproximately) {
  TempDir dir;
  std::vector<uint8_t> rgb(16 * 16 * 3);
  for (size_t i = 0; i < rgb.size(); i += 3) {
    rgb[i] = 200;
    rgb[i + 1] = 100;
    rgb[i + 2] = 50;
  }
  ASSERT_NE(stbi_write_jpg(dir.file("d.jpg").c_str(), 16, 16, 3, rgb.data(), 95), 0);
  Image img = decode_image(dir.file("d.jpg"));
  EXPECT_EQ(img.width, 16);
  EXPECT_EQ(img.channels, 3);
  ASSERT_EQ(img.pixels.size(), rgb.size());
  for (size_t i = 0; i < rgb.size(); ++i) EXPECT_NEAR(img.pixels[i], rgb[i], 4) << "byte " << i;
}

TEST(IoImage, ErrorsNameTheFile) {
  TempDir dir;
  std::string missing = dir.file("missing.png");
  std::string e = error_of([&] { decode_image(missing); });
  EXPECT_NE(e.find(missing + ": cannot open"), std::string::npos) << e;

  write_file_bytes(dir.file("notes.txt"), "just some text, not pixels\n");
  e = error_of([&] { decode_image(dir.file("notes.txt")); });
  EXPECT_NE(e.find(dir.file("notes.txt") + ": not an image ("), std::string::npos) << e;

  e = error_of([&] { decode_image(dir.file("")); });
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;

  // A PNG cut in half passes the header check and fails in the decoder.
  std::vector<uint8_t> gray(64 * 64, 7);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<uint8_t>(i * 31);
  write_png(dir.file("whole.png"), gray.data(), 64, 64);
  std::string png = read_file_bytes(dir.file("whole.png"));
  write_file_bytes(dir.file("cut.png"), png.substr(0, png.size() / 2));
  e = error_of([&] { decode_image(dir.file("cut.png")); });
  EXPECT_NE(e.find(dir.file("cut.png") + ": "), std::string::npos) << e;
}

std::string be(uint32_t v, int bytes) {
  std::string s;
  for (int i = bytes - 1; i >= 0; --i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}

TEST(IoImage, RefusesFormatsStbKnowsButWeDoNotTake) {
  TempDir dir;
  // 2x2 Radiance HDR, flat RGBE pixels (rows under 8 pixels are never run-length coded).
  const std::string hdr = "#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 2 +X 2\n"s +
                          std::string(4 * 4, '\x80');
  // 2x2 RGB Photoshop file: header, three empty sections, raw planar pixels.
  const std::string psd = "8BPS"s + be(1, 2) + std::string(6, '\0') + be(3, 2) + be(2, 4) +
                          be(2, 4) + be(8, 2) + be(3, 2) + be(0, 4) + be(0, 4) + be(0, 4) +
                          be(0, 2) + std::string(3 * 4, '\x40');
  for (const auto& [name, bytes, format] :
       {std::tuple{"x.hdr", hdr, "Radiance HDR"}, std::tuple{"x.psd", psd, "Photoshop (PSD)"}}) {
    const std::string path = dir.file(name);
    write_file_bytes(path, bytes);
    // stb would decode it: the refusal is ours.
    int w = 0, h = 0, c = 0;
    ASSERT_EQ(stbi_info(path.c_str(), &w, &h, &c), 1) << name;
    EXPECT_EQ(w, 2) << name;
    const std::string e = error_of([&] { decode_image(path); });
    EXPECT_EQ(e, path + ": " + format +
                     " images are not supported; use PNG, JPEG, BMP, GIF, TGA or PGM/PPM")
        << name;
  }
}

TEST(IoImage, RejectsHugeImagesBeforeDecoding) {
  TempDir dir;
  // Headers only: decoding these would need gigabytes; the check must come first.
  write_file_bytes(dir.file("wide.pgm"), "P5\n20000 1\n255\n" + std::string(16, 'x'));
  std::string e = error_of([&] { decode_image(dir.file("wide.pgm")); });
  EXPECT_NE(e.find("20000x1 pixels; the limit is 16384"), std::string::npos) << e;

  write_file_bytes(dir.file("big.ppm"), "P6\n16000 16000\n255\n" + std::string(16, 'x'));
  e = error_of([&] { decode_image(dir.file("big.ppm")); });
  EXPECT_NE(e.find("16000x16000x3"), std::string::npos) << e;
  EXPECT_NE(e.find("limit"), std::string::npos) << e;
}

// stb allocates and returns, padded, the whole image a truncated file's header declares; the
// header must be checked against what the file can hold first. A fuzzer's 1.3 KB BMP declared
// 9007x8299 RGB (224 MB).
TEST(IoImage, RejectsFilesTooSmallForTheirHeaders) {
  TempDir dir;
  const std::string info = le(40, 4) + le(3000, 4) + le(2000, 4) + le(1, 2) + le(24, 2) +
                           le(0, 4) + le(0, 4) + le(2835, 4) + le(2835, 4) + le(0, 4) + le(0, 4);
  write_file_bytes(dir.file("cut.bmp"),
                   "BM" + le(0, 4) + le(0, 4) + le(14 + 40, 4) + info + std::string(100, 'x'));
  std::string e = error_of([&] { decode_image(dir.file("cut.bmp")); });
  EXPECT_NE(e.find(dir.file("cut.bmp") + ": truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("needs a file of at least 18000000 bytes"), std::string::npos) << e;

  // A PNG's pixels compress by at most 33,024:1; 8000x8000 cannot come from a few dozen bytes.
  std::vector<uint8_t> gray(4 * 4, 9);
  write_png(dir.file("small.png"), gray.data(), 4, 4);
  std::string png = read_file_bytes(dir.file("small.png"));
  const std::string side = {0, 0, static_cast<char>(8000 >> 8), static_cast<char>(8000 & 0xff)};
  png.replace(16, 4, side);  // IHDR width
  png.replace(20, 4, side);  // IHDR height
  write_file_bytes(dir.file("claims.png"), png);
  e = error_of([&] { decode_image(dir.file("claims.png")); });
  EXPECT_NE(e.find(dir.file("claims.png") + ": truncated: the header says 8000x8000x1"),
            std::string::npos)
      << e;

  // What compresses well still decodes: 2048x2048 of one value.
  std::vector<uint8_t> flat(2048 * 2048, 0);
  write_png(dir.file("flat.png"), flat.data(), 2048, 2048);
  EXPECT_EQ(decode_image(dir.file("flat.png")).pixels, flat);
}

TEST(IoImage, SameSizeTensorIsNormalisedNhwc) {
  Image img = make_image(2, 2, 1, {0, 255, 51, 102});
  Tensor t = image_to_tensor(img, 2, 2, 1, 127.5f, 127.5f);
  EXPECT_EQ(t.shape(), (Shape{1, 2, 2, 1}));
  const float* v = t.data<float>();
  EXPECT_FLOAT_EQ(v[0], -1.0f);
  EXPECT_FLOAT_EQ(v[1], 1.0f);
  EXPECT_FLOAT_EQ(v[2], (51 - 127.5f) / 127.5f);
  EXPECT_FLOAT_EQ(v[3], (102 - 127.5f) / 127.5f);

  Tensor raw = image_to_tensor(img, 2, 2, 1, 0.0f, 255.0f);
  EXPECT_FLOAT_EQ(raw.data<float>()[1], 1.0f);
}

TEST(IoImage, ConvertsChannels) {
  // Gray to RGB replicates.
  Tensor rgb = image_to_tensor(make_image(1, 1, 1, {80}), 1, 1, 3, 0.0f, 1.0f);
  EXPECT_EQ(rgb.shape(), (Shape{1, 1, 1, 3}));
  for (int k = 0; k < 3; ++k) EXPECT_FLOAT_EQ(rgb.data<float>()[k], 80.0f);

  // RGB to gray is luminance.
  Tensor gray = image_to_tensor(make_image(2, 1, 3, {255, 0, 0, 10, 20, 30}), 2, 1, 1, 0.0f, 1.0f);
  EXPECT_NEAR(gray.data<float>()[0], 0.299f * 255, 1e-3);
  EXPECT_NEAR(gray.data<float>()[1], 0.299f * 10 + 0.587f * 20 + 0.114f * 30, 1e-3);

  // RGBA to RGB and gray+alpha to gray drop alpha; RGBA to gray drops alpha, then luminance.
  Image rgba = make_image(1, 1, 4, {1, 2, 3, 200});
  Tensor no_alpha = image_to_tensor(rgba, 1, 1, 3, 0.0f, 1.0f);
  EXPECT_EQ(std::vector<float>(no_alpha.data<float>(), no_alpha.data<float>() + 3),
            (std::vector<float>{1, 2, 3}));
  EXPECT_NEAR(image_to_tensor(rgba, 1, 1, 1, 0.0f, 1.0f).data<float>()[0],
              0.299f * 1 + 0.587f * 2 + 0.114f * 3, 1e-4);
  EXPECT_FLOAT_EQ(
      image_to_tensor(make_image(1, 1, 2, {9, 200}), 1, 1, 1, 0.0f, 1.0f).data<float>()[0], 9.0f);
  Tensor ga_rgb = image_to_tensor(make_image(1, 1, 2, {9, 200}), 1, 1, 3, 0.0f, 1.0f);
  EXPECT_FLOAT_EQ(ga_rgb.data<float>()[2], 9.0f);

  // The image's own count keeps alpha.
  Tensor keep = image_to_tensor(rgba, 1, 1, 4, 0.0f, 1.0f);
  EXPECT_FLOAT_EQ(keep.data<float>()[3], 200.0f);
}

// Debian's stb_image_resize aborts the process on an assertion for about one shrink ratio in six
// (270x270 or 300x200 to 224x224, 36x36 to 28x28); every size pair must resize, and a constant
// image must stay constant (the weights of each target pixel sum to one).
TEST(IoImage, ResizesBetweenEverySizePair) {
  for (int64_t from = 1; from <= 40; ++from)
    for (int64_t to = 1; to <= 40; ++to) {
      Image flat = make_image(from, 3, 1, std::vector<uint8_t>(static_cast<size_t>(from * 3), 200));
      Tensor t = image_to_tensor(flat, to, 2, 1, 0.0f, 1.0f);
      for (int64_t i = 0; i < t.numel(); ++i)
        ASSERT_NEAR(t.data<float>()[i], 200.0f, 2e-3) << from << " -> " << to;
    }
  for (auto [w, h, to] : {std::tuple<int64_t, int64_t, int64_t>{270, 270, 224}, {300, 200, 224},
                          {36, 36, 28}}) {
    std::vector<uint8_t> pixels(static_cast<size_t>(w * h * 3));
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
    Tensor t = image_to_tensor(make_image(w, h, 3, pixels), to, to, 3, 0.0f, 1.0f);
    EXPECT_EQ(t.shape(), (Shape{1, to, to, 3}));
    for (int64_t i = 0; i < t.numel(); ++i) {
      ASSERT_GE(t.data<float>()[i], 0.0f);
      ASSERT_LE(t.data<float>()[i], 255.0f);
    }
  }
}

TEST(IoImage, ResizesBilinearly) {
  // Upsampling 2 -> 4 samples at input x = -0.25, 0.25, 0.75, 1.25 (edges clamped).
  Tensor up = image_to_tensor(make_image(2, 1, 1, {0, 100}), 4, 1, 1, 0.0f, 1.0f);
  EXPECT_EQ(up.shape(), (Shape{1, 1, 4, 1}));
  const float expected[] = {0.0f, 25.0f, 75.0f, 100.0f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(up.data<float>()[i], expected[i], 1e-3) << i;

  // A constant image stays constant at any size, in every channel.
  Image flat = make_image(8, 6, 3, std::vector<uint8_t>(8 * 6 * 3, 77));
  for (auto [w, h] : {std::pair<int64_t, int64_t>{3, 3}, {13, 5}, {28, 28}}) {
    Tensor t = image_to_tensor(flat, w, h, 3, 77.0f, 2.0f);
    EXPECT_EQ(t.shape(), (Shape{1, h, w, 3}));
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_NEAR(t.data<float>()[i], 0.0f, 1e-4) << i;
  }

  // Shrinking averages what a target pixel covers: 4 -> 2 weighs the inputs 1/2, 3/8, 1/8
  // (and the mirror image), the first input counted twice as the clamped edge.
  Tensor down = image_to_tensor(make_image(4, 1, 1, {0, 10, 20, 30}), 2, 1, 1, 0.0f, 1.0f);
  EXPECT_NEAR(down.data<float>()[0], 6.25f, 1e-4);
  EXPECT_NEAR(down.data<float>()[1], 23.75f, 1e-4);

  // Gray replicated to RGB after resizing gives identical channels.
  Image ramp =
      make_image(4, 4, 1, {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150});
  Tensor g = image_to_tensor(ramp, 7, 3, 1, 0.0f, 1.0f);
  Tensor c = image_to_tensor(ramp, 7, 3, 3, 0.0f, 1.0f);
  for (int64_t i = 0; i < g.numel(); ++i)
    for (int k = 0; k < 3; ++k) ASSERT_FLOAT_EQ(c.data<float>()[i * 3 + k], g.data<float>()[i]);
}

TEST(IoImage, RejectsBadConversions) {
  Image rgb = make_image(2, 2, 3, std::vector<uint8_t>(12, 1));
  std::string e = error_of([&] { image_to_tensor(rgb, 2, 2, 2, 0.0f, 1.0f); });
  EXPECT_NE(e.find("cannot convert a 3-channel image to 2 channels"), std::string::npos) << e;
  e = error_of([&] { image_to_tensor(rgb, 2, 2, 4, 0.0f, 1.0f); });
  EXPECT_NE(e.find("to 4 channels"), std::string::npos) << e;
  e = error_of([&] { image_to_tensor(rgb, 0, 2, 3, 0.0f, 1.0f); });
  EXPECT_NE(e.find("target size 0x2"), std::string::npos) << e;
  e = error_of([&] { image_to_tensor(rgb, 2, 2, 3, 0.0f, 0.0f); });
  EXPECT_NE(e.find("std"), std::string::npos) << e;
  Image short_pixels = make_image(2, 2, 3, std::vector<uint8_t>(5, 1));
  e = error_of([&] { image_to_tensor(short_pixels, 2, 2, 3, 0.0f, 1.0f); });
  EXPECT_NE(e.find("holds 5 bytes"), std::string::npos) << e;
}

TEST(IoImage, WritePngErrors) {
  TempDir dir;
  uint8_t px = 0;
  std::string bad = dir.file("no/such/folder/x.png");
  std::string e = error_of([&] { write_png(bad, &px, 1, 1); });
  EXPECT_NE(e.find(bad + ": cannot write PNG"), std::string::npos) << e;
  e = error_of([&] { write_png(dir.file("x.png"), &px, 0, 1); });
  EXPECT_NE(e.find("sides must be"), std::string::npos) << e;
}

}  // namespace
}  // namespace sf
