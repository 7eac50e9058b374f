// The data-file fuzzer's readers, by the kind its first byte selects; shared with its seed
// maker, which checks that every seed reads. Besides the data files: model specs (parsed and
// built) and training checkpoints.
#pragma once

#include <cstdint>
#include <string>

#include "io/bottleneck_cache.h"
#include "io/idx.h"
#include "io/image.h"
#include "io/npy.h"
#include "models/spec.h"
#include "train/checkpoint.h"

namespace sf::fuzz {

enum class DataFileKind : uint8_t { idx, npy, image, bottleneck_cache, model_spec, checkpoint };
inline constexpr uint8_t kDataFileKinds = 6;

inline DataFileKind kind_of(uint8_t first_byte) {
  return static_cast<DataFileKind>(first_byte % kDataFileKinds);
}

// The key the fuzzer opens bottleneck caches with; the seed cache is written for it.
inline BottleneckKey bottleneck_key() { return {0x5eed, "pool/avg", 3}; }

inline constexpr size_t kMaxResizedBytes = size_t{4} << 20;

// Reads `path` as `kind` and touches what was read. Throws sf::Error on a bad file.
inline void read_as(DataFileKind kind, const std::string& path) {
  switch (kind) {
    case DataFileKind::idx:
      (void)read_idx(path);
      break;
    case DataFileKind::npy:
      (void)read_npy(path);
      break;
    case DataFileKind::image: {
      const Image image = decode_image(path);
      // A large image that decodes is fine; resizing it only costs the fuzzer time.
      if (image.pixels.size() <= kMaxResizedBytes)
        (void)image_to_tensor(image, 7, 5, image.channels == 1 ? 1 : 3, 127.5f, 127.5f);
      break;
    }
    case DataFileKind::bottleneck_cache: {
      const BottleneckCache cache = BottleneckCache::open(path, bottleneck_key());
      float sum = 0.0f;
      for (uint64_t hash : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{0x1234}, ~uint64_t{0}})
        if (const float* row = cache.find(hash))
          for (int64_t i = 0; i < cache.key().dim; ++i) sum += row[i];
      volatile float keep = sum;
      (void)keep;
      break;
    }
    case DataFileKind::model_spec:
      (void)build_model(load_model_spec(path), 2);
      break;
    case DataFileKind::checkpoint:
      (void)load_checkpoint(path);
      break;
  }
}

}  // namespace sf::fuzz
