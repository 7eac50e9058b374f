// Integrity of a model file's weight data: save_model records the CRC-32 of the data section in
// the metadata ("data_crc32"); verify_weights recomputes it. Loading never does (it stays
// mmap-fast); `slimflow inspect --verify` does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace sf {

struct WeightsCheck {
  std::optional<uint32_t> recorded;  // absent in files written before checksums existed
  uint32_t actual = 0;
  uint64_t data_bytes = 0;
  bool ok() const { return recorded && *recorded == actual; }
};

// Validates the header and metadata like load_model, then checksums the data section.
WeightsCheck verify_weights(const std::string& path);

}  // namespace sf
