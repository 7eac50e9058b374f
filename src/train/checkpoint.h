// Checkpoints: named tensors plus an opaque metadata string (JSON written by the trainer).
//
// File format, version 1. All integers are little-endian.
//
//   offset  size  field
//   0       8     magic "SFCKPT\0\0"
//   8       4     u32 format version (1); readers reject versions they do not know
//   12      4     u32 reserved, 0
//   16      8     u64 metadata length M
//   24      M     metadata text (UTF-8 JSON; not interpreted here)
//   ...     8     u64 tensor count T
//   then T entries, in name order:
//           4     u32 name length L
//           L     name bytes
//           1     u8 dtype code: 1 f32, 2 i32, 3 i64, 4 u8, 5 i8
//           1     u8 rank R (0 to 8)
//           8*R   i64 dimensions
//           8     u64 data offset from the start of the file (a multiple of 64)
//           8     u64 data size in bytes (elements x dtype size)
//   zero padding, then each tensor's data at its offset (64-byte aligned, so the file could be
//   memory-mapped), zero padding between tensors
//   last 4 bytes: u32 CRC32 (zlib's crc32) of every byte before it
//
// save_checkpoint is atomic: it writes "<path>.tmp-<pid>", fsyncs it, renames it over <path>
// and fsyncs the folder, so a crash leaves either the old checkpoint or the new one, whole.
// load_checkpoint checks the CRC and every count, length, dtype, offset and size against the
// file size before allocating anything, and throws sf::Error ("<path>: corrupt checkpoint:
// ...") instead of trusting a damaged file.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"

namespace sf {

inline constexpr uint32_t kCheckpointVersion = 1;

struct Checkpoint {
  std::map<std::string, Tensor> tensors;
  std::string metadata_json;
};

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
Checkpoint load_checkpoint(const std::string& path);

}  // namespace sf
