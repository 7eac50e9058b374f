// ONNX TensorProto <-> sf::Tensor, and the element types the importer accepts.
#include <cstring>
#include <fstream>
#include <sstream>

#include "onnx/context.h"

namespace sf {
namespace onnx_import {

const char* onnx_type_name(int elem_type) {
  switch (elem_type) {
    case onnx::TensorProto::FLOAT:
      return "float";
    case onnx::TensorProto::UINT8:
      return "uint8";
    case onnx::TensorProto::INT8:
      return "int8";
    case onnx::TensorProto::UINT16:
      return "uint16";
    case onnx::TensorProto::INT16:
      return "int16";
    case onnx::TensorProto::INT32:
      return "int32";
    case onnx::TensorProto::INT64:
      return "int64";
    case onnx::TensorProto::STRING:
      return "string";
    case onnx::TensorProto::BOOL:
      return "bool";
    case onnx::TensorProto::FLOAT16:
      return "float16";
    case onnx::TensorProto::DOUBLE:
      return "double";
    case onnx::TensorProto::UINT32:
      return "uint32";
    case onnx::TensorProto::UINT64:
      return "uint64";
    case onnx::TensorProto::BFLOAT16:
      return "bfloat16";
    default:
      return "unknown";
  }
}

DType dtype_from_onnx(int elem_type, const std::string& where) {
  switch (elem_type) {
    case onnx::TensorProto::FLOAT:
      return DType::f32;
    case onnx::TensorProto::INT32:
      return DType::i32;
    case onnx::TensorProto::INT64:
      return DType::i64;
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::BOOL:  // held as u8 0/1, what the comparison ops produce
      return DType::u8;
    case onnx::TensorProto::INT8:
      return DType::i8;
    default:
      throw OnnxUnsupported(fmt::format("{}: element type {} ({}) is not supported", where,
                                        onnx_type_name(elem_type), elem_type));
  }
}

namespace {

template <typename T, typename Field>
void copy_field(const Field& field, Tensor& t, const std::string& where) {
  if (field.size() != t.numel())
    fail("{}: {} values for shape {}", where, field.size(), shape_str(t.shape()));
  T* out = static_cast<T*>(t.raw());
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<T>(field.Get(i));
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& where_in) {
  const std::string where = p.name().empty() ? where_in : where_in + " '" + p.name() + "'";
  if (p.data_location() == onnx::TensorProto::EXTERNAL)
    throw OnnxUnsupported(fmt::format("{}: external tensor data is not supported", where));
  const DType dtype = dtype_from_onnx(p.data_type(), where);
  Shape shape(p.dims().begin(), p.dims().end());
  // Checks the data size before allocating, so a corrupt header cannot ask for terabytes.
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && count > (uint64_t{1} << 40) / static_cast<uint64_t>(d)))
      fail("{}: invalid dimensions {}", where, shape_str(shape));
    count *= static_cast<uint64_t>(d);
  }
  const uint64_t stored = p.has_raw_data()      ? p.raw_data().size() / dtype_size(dtype)
                          : dtype == DType::f32 ? static_cast<uint64_t>(p.float_data_size())
                          : dtype == DType::i64 ? static_cast<uint64_t>(p.int64_data_size())
                                                : static_cast<uint64_t>(p.int32_data_size());
  if (stored != count)
    fail("{}: {} values stored for {} {}", where, stored, dtype_name(dtype), shape_str(shape));
  Tensor t(dtype, shape);
  if (p.has_raw_data()) {
    if (p.raw_data().size() != t.bytes())
      fail("{}: {} bytes of data for {} {}", where, p.raw_data().size(), dtype_name(dtype),
           shape_str(shape));
    if (t.bytes() > 0) std::memcpy(t.raw(), p.raw_data().data(), t.bytes());
    return t;
  }
  switch (dtype) {
    case DType::f32:
      copy_field<float>(p.float_data(), t, where);
      break;
    case DType::i64:
      copy_field<int64_t>(p.int64_data(), t, where);
      break;
    case DType::i32:
      copy_field<int32_t>(p.int32_data(), t, where);
      break;
    case DType::u8:
      copy_field<uint8_t>(p.int32_data(), t, where);
      break;
    case DType::i8:
      copy_field<int8_t>(p.int32_data(), t, where);
      break;
  }
  return t;
}

}  // namespace onnx_import

Tensor read_onnx_tensor(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::stringstream bytes;
  bytes << in.rdbuf();
  onnx::TensorProto proto;
  if (!proto.ParseFromString(bytes.str()))
    fail("{}: not a valid ONNX tensor (protobuf parse failed)", path);
  return onnx_import::tensor_from_proto(proto, path);
}

}  // namespace sf
