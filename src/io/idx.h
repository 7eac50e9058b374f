// Reading IDX files, the format of MNIST and Fashion-MNIST.
//
// An IDX file is a 4-byte magic number 0x00 0x00 <type> <ndims>, then ndims big-endian u32
// dimensions, then the elements in row-major order (big-endian for multi-byte types). Files
// may be gzip-compressed (detected by the magic bytes 1f 8b, not by the name).
//
// Everything in the header is checked against the data actually present before the tensor is
// allocated, so a corrupt or hostile header gives a one-line sf::Error, never a huge
// allocation. Supported element types: 0x08 u8, 0x09 i8, 0x0C i32, 0x0D f32; 0x0B i16 and
// 0x0E f64 are rejected as unsupported.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace sf {

// The largest element data read_idx accepts (2 GiB): far above any IDX data set in use, and
// low enough that a gzip bomb or a bad header cannot exhaust memory.
inline constexpr uint64_t kMaxIdxDataBytes = uint64_t{2} << 30;

// Reads `path` (raw or gzip) into a tensor of the file's element type and shape. Throws
// sf::Error naming the file on any problem: cannot open, bad magic, unsupported type, bad
// dimensions, truncated data, trailing data, or corrupt gzip data.
Tensor read_idx(const std::string& path);

}  // namespace sf
