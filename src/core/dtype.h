// Element types a tensor can hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sf {

enum class DType : uint8_t { f32, i32, i64, u8, i8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
// Parses "f32", "float32", "i32", "int32", ...; throws sf::Error on an unknown name.
DType parse_dtype(std::string_view name);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }

}  // namespace sf
