#include "support/onnx_models.h"

#include <fstream>
#include <random>

#include "runtime/session.h"

namespace sf::testing {

onnx::ModelProto new_onnx_model(int opset) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("slimflow_tests");
  onnx::OperatorSetIdProto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

void add_input(onnx::ModelProto& m, const std::string& name, const Shape& dims, int elem_type) {
  onnx::ValueInfoProto* v = m.mutable_graph()->add_input();
  v->set_name(name);
  onnx::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  for (int64_t d : dims) {
    onnx::TensorShapeProto::Dimension* dim = t->mutable_shape()->add_dim();
    if (d < 0)
      dim->set_dim_param("N");
    else
      dim->set_dim_value(d);
  }
}

void add_output(onnx::ModelProto& m, const std::string& name, int elem_type) {
  onnx::ValueInfoProto* v = m.mutable_graph()->add_output();
  v->set_name(name);
  v->mutable_type()->mutable_tensor_type()->set_elem_type(elem_type);
}

onnx::NodeProto* add_node(onnx::ModelProto& m, const std::string& op,
                          const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs, const std::string& name) {
  onnx::NodeProto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const std::string& i : inputs) n->add_input(i);
  for (const std::string& o : outputs) n->add_output(o);
  return n;
}

void set_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void set_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

void add_init_i64(onnx::ModelProto& m, const std::string& name, const Shape& dims,
                  const std::vector<int64_t>& values) {
  onnx::TensorProto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t v : values) t->add_int64_data(v);
}

std::string write_onnx_model(const onnx::ModelProto& m, const std::string& path) {
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

int count_ops(const ModelFile& model, const std::string& op) {
  int n = 0;
  for (const Node& node : model.graph.nodes()) n += node.op == op;
  return n;
}

Tensor run_model(const ModelFile& model, const Tensor& x) {
  Session s(model.graph);
  std::vector<Tensor> out = s.run({{Output{model.graph.id_of(model.inputs.at(0)), 0}, x}},
                                  {Output{model.graph.id_of(model.outputs.at(0)), 0}});
  return out.at(0).clone();
}

}  // namespace sf::testing
