#include "train/sharded_batches.h"


#include "core/error.h"

namespace sf {

ShardedBatches::ShardedBatches(const Dataset& data, int64_t batch, uint64_t seed, int rank,
                               int world, const Augmentation& augment)
    : data_(data),
      order_source_(data, BatchOptions{.batch_size = 1, .seed = seed, .shuffle = true}),
      augment_(augment),
      seed_(seed),
      batch_(batch),
      rank_(rank),
      world_(world) {
  if (batch <= 0) fail("train: --batch must be positive, got {}", batch);
  if (world <= 0 || rank < 0 || rank >= world)
    fail("train: rank {} of a {}-rank job does not exist", rank, world);
  if (data.size() < global_batch())
    fail("train: a step of {} ranks x batch {} needs {} examples, the data has {}", world, batch,
         global_batch(), data.size());
  seek(0, 0);
}

void ShardedBatches::seek(int64_t epoch, int64_t offset) {
  if (epoch < 0 || offset < 0 || offset > data_.size())
    fail("cannot seek to epoch {} example {}: an epoch has {} examples", epoch, offset,
         data_.size());
  if (epoch != order_source_.epoch()) order_source_.seek(epoch, 0);
  epoch_ = epoch;
  offset_ = offset;
}

std::vector<int64_t> ShardedBatches::next_indices() const {
  if (offset_ + global_batch() > data_.size()) return {};
  const auto& order = order_source_.order();
  const auto begin = order.begin() + offset_ + rank_ * batch_;
  return {begin, begin + batch_};
}

bool ShardedBatches::next(Tensor& images, Tensor& labels) {
  std::vector<int64_t> indices = next_indices();
  if (indices.empty()) {
    seek(epoch_ + 1, 0);
    return false;
  }
  Shape image_shape(data_.images.shape());
  image_shape[0] = batch_;
  if (!images.defined() || images.shape() != image_shape) images = Tensor(DType::f32, image_shape);
  if (!labels.defined() || labels.shape() != Shape{batch_}) labels = Tensor(DType::i32, {batch_});
  const size_t example_floats = static_cast<size_t>(data_.images.numel() / data_.size());
  const int32_t* label_src = data_.labels.data<int32_t>();
  float* dst = images.data<float>();
  int32_t* label_dst = labels.data<int32_t>();
  for (size_t r = 0; r < indices.size(); ++r) {
    copy_example(data_, indices[r], augment_, seed_, epoch_, dst + r * example_floats);
    label_dst[r] = label_src[indices[r]];
  }
  batch_indices_ = std::move(indices);
  offset_ += global_batch();
  return true;
}

}  // namespace sf
