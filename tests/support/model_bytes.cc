#include "support/model_bytes.h"

#include <zlib.h>

#include "core/error.h"

namespace sf::testing {

uint64_t get_u64(const std::string& file, size_t at) {
  uint64_t value = 0;
  for (size_t i = 0; i < 8; ++i)
    value |= uint64_t{static_cast<unsigned char>(file.at(at + i))} << (8 * i);
  return value;
}

void put_u64(std::string& file, size_t at, uint64_t value) {
  for (size_t i = 0; i < 8; ++i) file.at(at + i) = static_cast<char>(value >> (8 * i));
}

void put_u32(std::string& file, size_t at, uint32_t value) {
  for (size_t i = 0; i < 4; ++i) file.at(at + i) = static_cast<char>(value >> (8 * i));
}

std::string zlib_deflate(const std::string& bytes) {
  uLongf size = compressBound(bytes.size());
  std::string out(size, '\0');
  SF_CHECK(compress2(reinterpret_cast<Bytef*>(out.data()), &size,
                     reinterpret_cast<const Bytef*>(bytes.data()), bytes.size(),
                     Z_BEST_COMPRESSION) == Z_OK,
           "compress2 failed");
  out.resize(size);
  return out;
}

std::string zlib_inflate(const std::string& stream) {
  // Test metadata is small; doubling the guess until it fits keeps this simple.
  for (uLongf capacity = 4096;; capacity *= 2) {
    std::string out(capacity, '\0');
    uLongf size = capacity;
    const int status = uncompress(reinterpret_cast<Bytef*>(out.data()), &size,
                                  reinterpret_cast<const Bytef*>(stream.data()), stream.size());
    if (status == Z_OK) {
      out.resize(size);
      return out;
    }
    SF_CHECK(status == Z_BUF_ERROR && capacity < (uLongf{1} << 30), "uncompress failed ({})",
             status);
  }
}

std::string metadata_text(const std::string& file) {
  std::string section = file.substr(get_u64(file, 16), get_u64(file, 24));
  const uint64_t version_and_flags = get_u64(file, 8);
  const bool deflated = (version_and_flags & 0xffffffff) >= 2 && ((version_and_flags >> 32) & 1);
  return deflated ? zlib_inflate(section) : section;
}

std::string with_metadata(const std::string& file, const std::string& text) {
  const std::string data = file.substr(get_u64(file, 32), get_u64(file, 40));
  const uint64_t data_offset = (48 + text.size() + 63) / 64 * 64;
  std::string out = file.substr(0, 48) + text;
  out.resize(data_offset, '\0');
  out += data;
  put_u32(out, 8, 1);
  put_u32(out, 12, 0);
  put_u64(out, 24, text.size());
  put_u64(out, 32, data_offset);
  return out;
}

std::string edit_meta(const std::string& file, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json meta = nlohmann::json::parse(metadata_text(file));
  edit(meta);
  return with_metadata(file, meta.dump());
}

}  // namespace sf::testing
