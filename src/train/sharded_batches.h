// The batches one rank of a data-parallel job trains on. Every rank computes the same order of
// each epoch (BatchIterator's, from the shared seed and the epoch alone); a step consumes the
// next `batch x world` examples of that order, and rank r takes the r-th `batch` of them. So
// the ranks' shards of a step are disjoint, their union is the batch one process would take
// with `batch x world`, and the position is just the number of examples the whole job has
// consumed in the epoch: a run resumed with another number of ranks continues from there,
// without repeating or skipping an example. Examples left over at the end of an epoch (fewer
// than `batch x world`) are not used, as with one process's drop_last.
#pragma once

#include <cstdint>
#include <vector>

#include "io/dataset.h"

namespace sf {

class ShardedBatches {
 public:
  ShardedBatches(const Dataset& data, int64_t batch, uint64_t seed, int rank, int world,
                 const Augmentation& augment = {});

  int64_t batch() const { return batch_; }
  int64_t global_batch() const { return batch_ * world_; }
  // Steps in a whole epoch.
  int64_t steps_per_epoch() const { return data_.size() / global_batch(); }

  // Positions at `offset` examples into `epoch`'s order (what the job has consumed of it).
  void seek(int64_t epoch, int64_t offset);
  // Copies this rank's part of the next step into `images` / `labels` (as BatchIterator::next);
  // false when the epoch has no full step left.
  bool next(Tensor& images, Tensor& labels);

  int64_t epoch() const { return epoch_; }
  // Examples of the epoch consumed by all ranks together.
  int64_t offset() const { return offset_; }
  // Steps of this epoch done, counting a resumed run's offset as whole steps.
  int64_t step_in_epoch() const { return offset_ / global_batch(); }
  // The example indices this rank's next batch will hold (empty at the epoch's end).
  std::vector<int64_t> next_indices() const;
  // The example indices of the batch the last successful next() returned.
  const std::vector<int64_t>& batch_indices() const { return batch_indices_; }

 private:
  Dataset data_;
  BatchIterator order_source_;
  Augmentation augment_;
  uint64_t seed_;
  int64_t batch_;
  int rank_;
  int world_;
  int64_t epoch_ = 0;
  int64_t offset_ = 0;
  std::vector<int64_t> batch_indices_;
};

}  // namespace sf
