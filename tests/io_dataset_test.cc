#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "io/dataset.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

// `n` examples of 2x2x1 whose pixels all equal the example's index, labelled index % 10.
Dataset make_dataset(int64_t n) {
  Dataset data;
  data.name = "synthetic";
  data.images = Tensor(DType::f32, {n, 2, 2, 1});
  data.labels = Tensor(DType::i32, {n});
  for (int64_t i = 0; i < n; ++i) {
    for (int p = 0; p < 4; ++p) data.images.data<float>()[i * 4 + p] = static_cast<float>(i);
    data.labels.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  }
  return data;
}

// The example indices of one epoch's batches, checking that images and labels agree.
std::vector<std::vector<int64_t>> run_epoch(BatchIterator& it) {
  std::vector<std::vector<int64_t>> batches;
  Tensor images, labels;
  while (it.next(images, labels)) {
    std::vector<int64_t> batch;
    for (int64_t r = 0; r < labels.dim(0); ++r) {
      auto index = static_cast<int64_t>(images.data<float>()[r * 4]);
      EXPECT_EQ(images.data<float>()[r * 4 + 3], static_cast<float>(index));
      EXPECT_EQ(labels.data<int32_t>()[r], index % 10);
      batch.push_back(index);
    }
    batches.push_back(batch);
  }
  return batches;
}

TEST(IoBatchIteratorTest, CoversEveryExampleOncePerEpoch) {
  Dataset data = make_dataset(10);
  BatchIterator it(data, {.batch_size = 3, .seed = 42});
  EXPECT_EQ(it.batches_per_epoch(), 4);
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto batches = run_epoch(it);
    ASSERT_EQ(batches.size(), 4u);
    EXPECT_EQ(batches.back().size(), 1u);  // the partial last batch
    std::multiset<int64_t> seen;
    for (const auto& batch : batches) seen.insert(batch.begin(), batch.end());
    EXPECT_EQ(seen.size(), 10u);
    for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(seen.count(i), 1u) << "example " << i;
  }
  EXPECT_EQ(it.epoch(), 3);
}

TEST(IoBatchIteratorTest, DeterministicForASeedAndDifferentAcrossEpochs) {
  Dataset data = make_dataset(50);
  BatchIterator a(data, {.batch_size = 8, .seed = 7});
  BatchIterator b(data, {.batch_size = 8, .seed = 7});
  BatchIterator c(data, {.batch_size = 8, .seed = 8});
  auto a0 = run_epoch(a), b0 = run_epoch(b), c0 = run_epoch(c);
  EXPECT_EQ(a0, b0);
  EXPECT_NE(a0, c0);
  auto a1 = run_epoch(a);
  EXPECT_NE(a0, a1);  // each epoch has its own order
  EXPECT_EQ(a1, run_epoch(b));
}

TEST(IoBatchIteratorTest, NoShuffleIsFileOrder) {
  Dataset data = make_dataset(5);
  BatchIterator it(data, {.batch_size = 2, .seed = 3, .shuffle = false});
  auto batches = run_epoch(it);
  EXPECT_EQ(batches, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4}}));
}

TEST(IoBatchIteratorTest, SeekResumesIdentically) {
  Dataset data = make_dataset(23);
  BatchOptions options{.batch_size = 4, .seed = 99};
  BatchIterator original(data, options);
  run_epoch(original);
  Tensor images, labels;
  ASSERT_TRUE(original.next(images, labels));
  ASSERT_TRUE(original.next(images, labels));
  EXPECT_EQ(original.epoch(), 1);
  EXPECT_EQ(original.batch_index(), 2);
  auto rest = run_epoch(original);
  auto following = run_epoch(original);

  BatchIterator resumed(data, options);
  resumed.seek(1, 2);
  EXPECT_EQ(run_epoch(resumed), rest);
  EXPECT_EQ(run_epoch(resumed), following);

  EXPECT_THROW(resumed.seek(0, resumed.batches_per_epoch() + 1), Error);
  EXPECT_THROW(resumed.seek(-1, 0), Error);
}

TEST(IoBatchIteratorTest, DropLastSkipsThePartialBatch) {
  Dataset data = make_dataset(10);
  BatchIterator it(data, {.batch_size = 3, .seed = 1, .drop_last = true});
  EXPECT_EQ(it.batches_per_epoch(), 3);
  auto batches = run_epoch(it);
  ASSERT_EQ(batches.size(), 3u);
  std::set<int64_t> seen;
  for (const auto& batch : batches) {
    EXPECT_EQ(batch.size(), 3u);
    seen.insert(batch.begin(), batch.end());
  }
  EXPECT_EQ(seen.size(), 9u);
  BatchIterator tiny(data, {.batch_size = 11, .drop_last = true});
  EXPECT_EQ(tiny.batches_per_epoch(), 0);
  Tensor images, labels;
  EXPECT_FALSE(tiny.next(images, labels));
}

TEST(IoBatchIteratorTest, ReusesTheCallersStorage) {
  Dataset data = make_dataset(7);
  BatchIterator it(data, {.batch_size = 3});
  Tensor images(DType::f32, {3, 2, 2, 1}), labels(DType::i32, {3});
  void* image_bytes = images.raw();
  void* label_bytes = labels.raw();
  int batches = 0;
  while (it.next(images, labels)) {
    ++batches;
    EXPECT_EQ(images.raw(), image_bytes);
    EXPECT_EQ(labels.raw(), label_bytes);
    EXPECT_EQ(images.shape(), (Shape{batches == 3 ? 1 : 3, 2, 2, 1}));
  }
  EXPECT_EQ(batches, 3);
  ASSERT_TRUE(it.next(images, labels));  // a full batch again after the short one
  EXPECT_EQ(images.shape(), (Shape{3, 2, 2, 1}));
  EXPECT_EQ(images.raw(), image_bytes);

  Tensor small(DType::f32, {2, 2, 2, 1});
  EXPECT_THROW(it.next(small, labels), Error);
}

TEST(IoBatchIteratorTest, RejectsBadBatchSize) {
  Dataset data = make_dataset(3);
  EXPECT_THROW(BatchIterator(data, {.batch_size = 0}), Error);
}

}  // namespace
}  // namespace sf
