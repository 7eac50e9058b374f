#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "io/dataset.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// N images [8, 8, 1], each with one bright pixel at (3, 4), and its index as label.
Dataset dots(int64_t n) {
  Dataset d;
  d.name = "dots";
  d.images = Tensor(DType::f32, {n, 8, 8, 1});
  d.labels = Tensor(DType::i32, {n});
  std::fill(d.images.data<float>(), d.images.data<float>() + d.images.numel(), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    d.images.data<float>()[i * 64 + 3 * 8 + 4] = 1.0f;
    d.labels.data<int32_t>()[i] = static_cast<int32_t>(i);
  }
  return d;
}

// Where the bright pixel of each image of a batch went ({-1, -1} when it fell off).
std::vector<std::pair<int, int>> dot_positions(const Tensor& images) {
  std::vector<std::pair<int, int>> out;
  for (int64_t b = 0; b < images.dim(0); ++b) {
    std::pair<int, int> at{-1, -1};
    float total = 0.0f;
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 8; ++x) {
        const float v = images.data<float>()[b * 64 + y * 8 + x];
        total += v;
        if (v == 1.0f) at = {y, x};
      }
    EXPECT_LE(total, 1.0f);  // nothing but the dot and zeros
    out.push_back(at);
  }
  return out;
}

std::vector<std::pair<int, int>> batch_positions(const Dataset& data, BatchOptions options,
                                                 int64_t epoch, int64_t batch) {
  BatchIterator it(data, options);
  it.seek(epoch, batch);
  Tensor images, labels;
  EXPECT_TRUE(it.next(images, labels));
  return dot_positions(images);
}

TEST(AugmentTest, ParsesShiftAndFlipAndRejectsTheRest) {
  EXPECT_FALSE(parse_augmentation("").any());
  EXPECT_FALSE(parse_augmentation("none").any());
  Augmentation a = parse_augmentation("shift:2,flip");
  EXPECT_EQ(a.shift, 2);
  EXPECT_TRUE(a.flip);
  EXPECT_EQ(augmentation_str(a), "shift:2,flip");
  EXPECT_EQ(augmentation_str(parse_augmentation("shift:3")), "shift:3");
  testing::expect_error([] { parse_augmentation("shift:"); }, "--augment 'shift:': shift:N needs N");
  testing::expect_error([] { parse_augmentation("shift:-1"); }, "shift:N needs N");
  testing::expect_error([] { parse_augmentation("shift:0"); }, "shift:N needs N");
  testing::expect_error([] { parse_augmentation("shift:99999999999999999999"); }, "shift:N needs N");
  testing::expect_error([] { parse_augmentation("rotate"); },
                        "--augment 'rotate': unknown augmentation 'rotate' (expected shift:N or flip)");
}

TEST(AugmentTest, ShiftsMoveImagesByAtMostNPixelsWithZerosFillingIn) {
  const Dataset data = dots(64);
  BatchOptions options{.batch_size = 64, .seed = 7, .shuffle = false,
                       .augment = parse_augmentation("shift:2")};
  std::set<std::pair<int, int>> seen;
  for (auto [y, x] : batch_positions(data, options, 0, 0)) {
    EXPECT_LE(std::abs(y - 3), 2);
    EXPECT_LE(std::abs(x - 4), 2);
    seen.insert({y, x});
  }
  EXPECT_GT(seen.size(), 10u);  // 25 possible moves, 64 draws
  // No augmentation: every dot stays.
  options.augment = {};
  for (auto at : batch_positions(data, options, 0, 0)) EXPECT_EQ(at, std::make_pair(3, 4));
}

TEST(AugmentTest, ShiftLargerThanTheImageLeavesZeros) {
  const Dataset data = dots(32);
  BatchOptions options{.batch_size = 32, .seed = 1, .shuffle = false,
                       .augment = parse_augmentation("shift:20")};
  int gone = 0;
  for (auto at : batch_positions(data, options, 0, 0)) gone += at.first < 0;
  EXPECT_GT(gone, 0);
}

TEST(AugmentTest, FlipMirrorsLeftRight) {
  const Dataset data = dots(64);
  BatchOptions options{.batch_size = 64, .seed = 3, .shuffle = false,
                       .augment = parse_augmentation("flip")};
  int flipped = 0;
  for (auto [y, x] : batch_positions(data, options, 0, 0)) {
    EXPECT_EQ(y, 3);
    EXPECT_TRUE(x == 4 || x == 3) << x;  // column 4 of 8 mirrors to 3
    flipped += x == 3;
  }
  EXPECT_GT(flipped, 10);
  EXPECT_LT(flipped, 54);
}

TEST(AugmentTest, DeterministicUnderTheSeedAndExactAfterSeeking) {
  const Dataset data = dots(64);
  BatchOptions options{.batch_size = 16, .seed = 11, .shuffle = true,
                       .augment = parse_augmentation("shift:2,flip")};
  // Walking from the start and seeking straight to (epoch 2, batch 3) give the same batch.
  BatchIterator walk(data, options);
  Tensor images, labels;
  for (int64_t e = 0; e < 2; ++e)
    while (walk.next(images, labels)) {
    }
  for (int b = 0; b < 4; ++b) ASSERT_TRUE(walk.next(images, labels));
  EXPECT_EQ(dot_positions(images), batch_positions(data, options, 2, 3));
  // Another epoch moves the same examples differently; another seed too.
  options.shuffle = false;
  EXPECT_NE(batch_positions(data, options, 0, 0), batch_positions(data, options, 1, 0));
  BatchOptions other = options;
  other.seed = 12;
  EXPECT_NE(batch_positions(data, options, 0, 0), batch_positions(data, other, 0, 0));
}

// Data sets of bytes (as IDX files load) give every reader the floats pixel / 255 gives, moved
// about as float data sets are.
TEST(AugmentTest, ByteImagesReadAsPixelOver255WithAndWithoutAugmentation) {
  const int64_t n = 6;
  Dataset floats = dots(n);
  Dataset bytes = floats;
  bytes.images = Tensor(DType::u8, {n, 8, 8, 1});
  for (int64_t i = 0; i < bytes.images.numel(); ++i) {
    const auto pixel = static_cast<uint8_t>((i * 37) % 256);
    bytes.images.data<uint8_t>()[i] = pixel;
    floats.images.data<float>()[i] = pixel / 255.0f;
  }
  for (const char* augment : {"none", "shift:2", "flip", "shift:3,flip"})
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      const BatchOptions options{
          .batch_size = 4, .seed = 7, .augment = parse_augmentation(augment)};
      BatchIterator from_floats(floats, options), from_bytes(bytes, options);
      from_floats.seek(epoch, 0);
      from_bytes.seek(epoch, 0);
      Tensor a, b, la, lb;
      while (from_floats.next(a, la)) {
        ASSERT_TRUE(from_bytes.next(b, lb));
        ASSERT_EQ(a.shape(), b.shape());
        EXPECT_TRUE(std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>()))
            << augment << ", epoch " << epoch;
      }
    }
  EXPECT_EQ(example_image(bytes, 1).pixels, example_image(floats, 1).pixels);
}

}  // namespace
}  // namespace sf
