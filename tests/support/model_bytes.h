// Byte-level access to saved .sfm files, for tests that corrupt or edit them: the metadata
// JSON (inflated when the file stores it deflated) and rewritten copies.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace sf::testing {

uint64_t get_u64(const std::string& file, size_t at);
void put_u64(std::string& file, size_t at, uint64_t value);
void put_u32(std::string& file, size_t at, uint32_t value);

// zlib (RFC 1950) streams, independent of the model writer and reader.
std::string zlib_deflate(const std::string& bytes);
std::string zlib_inflate(const std::string& stream);

// The metadata JSON of a saved file, inflated when its header flags it as deflated.
std::string metadata_text(const std::string& file);

// The file with `text` as plain-JSON metadata (format version 1, flags 0) and the same data
// section, byte for byte, at the next multiple of 64.
std::string with_metadata(const std::string& file, const std::string& text);

// Rewrites a saved file's metadata through `edit` (the result stores it as plain JSON).
std::string edit_meta(const std::string& file, const std::function<void(nlohmann::json&)>& edit);

}  // namespace sf::testing
