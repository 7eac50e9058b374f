// Building small ONNX models with the protobuf API in tests, and running what the importer
// makes of them.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "modelfile/model_file.h"

namespace sf::testing {

onnx::ModelProto new_onnx_model(int opset = 13);
// dims: -1 is a dynamic dimension.
void add_input(onnx::ModelProto& m, const std::string& name, const Shape& dims,
               int elem_type = onnx::TensorProto::FLOAT);
void add_output(onnx::ModelProto& m, const std::string& name,
                int elem_type = onnx::TensorProto::FLOAT);
onnx::NodeProto* add_node(onnx::ModelProto& m, const std::string& op,
                          const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs, const std::string& name = "");
void set_int(onnx::NodeProto* n, const std::string& name, int64_t v);
void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v);
void set_string(onnx::NodeProto* n, const std::string& name, const std::string& v);
// An initializer of raw little-endian values of ONNX element type `elem_type`.
template <typename T>
void add_raw_init(onnx::ModelProto& m, const std::string& name, const Shape& dims,
                  const std::vector<T>& values, int elem_type) {
  onnx::TensorProto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(elem_type);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)));
}
inline void add_init(onnx::ModelProto& m, const std::string& name, const Shape& dims,
                     const std::vector<float>& values) {
  add_raw_init(m, name, dims, values, onnx::TensorProto::FLOAT);
}
void add_init_i64(onnx::ModelProto& m, const std::string& name, const Shape& dims,
                  const std::vector<int64_t>& values);

// Uniform in [-1, 1).
std::vector<float> random_values(size_t n, uint32_t seed);
// Writes the serialized model to `path`; returns `path`.
std::string write_onnx_model(const onnx::ModelProto& m, const std::string& path);
int count_ops(const ModelFile& model, const std::string& op);
// Output 0 for input 0 = x (a clone).
Tensor run_model(const ModelFile& model, const Tensor& x);

}  // namespace sf::testing
