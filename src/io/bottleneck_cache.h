// The bottleneck cache of transfer learning (`slimflow retrain`): each image's output at one
// node of a base model, computed once and kept in ONE memory-mapped file, so later runs train a
// new head without running the base model again.
//
// The file is keyed by the base model's content hash, the node's name and the row length; each
// row by the content hash of the image it came from (so a renamed image still hits, an edited
// one misses). A file made for another key is stale: nothing in it is used.
//
//   offset  size  field (little-endian)
//        0     8  magic "SFBNECK1"
//        8     8  u64 model_hash
//       16     8  u64 dim (floats per row)
//       24     8  u64 count (rows)
//       32     8  u64 node name length L (at most kMaxNodeNameBytes)
//       40     L  node name
//   then, at the next multiple of 64: count u64 image hashes, strictly ascending
//   then, at the next multiple of 64: count * dim f32 rows, in the order of the hashes
//
// Files are written whole through AtomicFile: a process killed while writing leaves the
// previous file (or none), never a torn one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sf {

struct BottleneckKey {
  uint64_t model_hash = 0;
  std::string node;
  int64_t dim = 0;
};

inline constexpr size_t kMaxNodeNameBytes = 4096;

class BottleneckCache {
 public:
  // An empty cache for `key`.
  explicit BottleneckCache(BottleneckKey key) : key_(std::move(key)) {}
  // Maps `path` when it exists and was made for `key`. Otherwise the cache is empty and
  // stale_reason() says why ("" when there was no file): a file made for another model, node or
  // row length, or one that is not a well-formed cache, is ignored, never trusted.
  static BottleneckCache open(const std::string& path, const BottleneckKey& key);

  const BottleneckKey& key() const { return key_; }
  const std::string& stale_reason() const { return stale_reason_; }
  int64_t size() const { return static_cast<int64_t>(count_); }
  // The row of the image with this content hash, or nullptr.
  const float* find(uint64_t image_hash) const;

 private:
  BottleneckKey key_;
  std::string stale_reason_;
  std::shared_ptr<void> mapping_;
  const uint64_t* hashes_ = nullptr;
  const float* rows_ = nullptr;
  uint64_t count_ = 0;
};

// Writes the cache for `key` holding `hashes` (any order, no repeats), whose rows `row(i)`
// (key.dim floats each) gives, atomically to `path`.
void write_bottleneck_cache(const std::string& path, const BottleneckKey& key,
                            const std::vector<uint64_t>& hashes,
                            const std::function<const float*(size_t)>& row);

}  // namespace sf
