// Little-endian integers in byte buffers: the byte order of every binary file format slimflow
// reads or writes (.sfm, checkpoints, .npy headers, image headers), whatever the host's.
#pragma once

#include <cstddef>
#include <type_traits>

namespace sf {

template <typename T>
T get_le(const unsigned char* in) {
  std::make_unsigned_t<T> value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<std::make_unsigned_t<T>>(in[i]) << (8 * i);
  return static_cast<T>(value);
}

template <typename T>
void put_le(unsigned char* out, T value) {
  const auto u = static_cast<std::make_unsigned_t<T>>(value);
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<unsigned char>(u >> (8 * i));
}

}  // namespace sf
