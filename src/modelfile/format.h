// Constants and helpers shared by the .sfm writer and reader (internal to src/modelfile).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/little_endian.h"

namespace sf::modelfile {

inline constexpr char kMagic[8] = {'S', 'F', 'M', 'O', 'D', 'E', 'L', '\0'};
inline constexpr uint64_t kHeaderBytes = 48;
inline constexpr uint64_t kAlign = 64;
inline constexpr const char* kDenseEncoding = "dense";

// Version 1 is written whenever the metadata is stored as plain JSON, so that builds that read
// only version 1 still load those files; version 2 adds the flags field; version 3 adds the
// binary and ternary weight encodings, version 4 the bf16 one (each written only by files that
// hold them).
inline constexpr uint32_t kPlainMetadataVersion = 1;
inline constexpr uint32_t kFlagsVersion = 2;
inline constexpr uint32_t kDeflatedMetadataFlag = 1u << 0;  // metadata is one zlib stream
inline constexpr uint32_t kKnownFlags = kDeflatedMetadataFlag;

// Field offsets inside the fixed header.
inline constexpr size_t kVersionAt = 8;
inline constexpr size_t kFlagsAt = 12;  // reserved (ignored) in version 1
inline constexpr size_t kMetaOffsetAt = 16;
inline constexpr size_t kMetaSizeAt = 24;
inline constexpr size_t kDataOffsetAt = 32;
inline constexpr size_t kDataSizeAt = 40;

inline uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

using sf::get_le;
using sf::put_le;

}  // namespace sf::modelfile
