#include "core/dtype.h"

#include "core/error.h"

namespace sf {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::i8: return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::i8: return "i8";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "float") return DType::f32;
  if (name == "i32" || name == "int32") return DType::i32;
  if (name == "i64" || name == "int64") return DType::i64;
  if (name == "u8" || name == "uint8") return DType::u8;
  if (name == "i8" || name == "int8") return DType::i8;
  fail("unknown dtype '{}' (expected f32, i32, i64, u8 or i8)", name);
}

}  // namespace sf
