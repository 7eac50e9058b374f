// Writes a few valid .sfm files into the folder given as argv[1]: the fuzzer's starting corpus,
// with deflated metadata (format version 2, as save_model writes these models) and plain JSON
// (version 1), so that mutations reach both the inflater and the JSON validation.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "modelfile/model_file.h"
#include "ops/ops.h"
#include "codec/weight_codec.h"
#include "support/model_bytes.h"

namespace {

sf::Tensor ramp(sf::Shape shape) {
  sf::Tensor t(sf::DType::f32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.01f * static_cast<float>(i % 97);
  return t;
}

sf::ModelFile mlp() {
  sf::ModelFile m;
  sf::Graph& g = m.graph;
  sf::Output x = sf::ops::placeholder(g, sf::DType::f32, {2, 4}, "x");
  sf::Output h = sf::ops::matmul(g, x, sf::ops::constant(g, ramp({4, 3}), "w"), false, false, "mm");
  h = sf::ops::bias_add(g, h, sf::ops::constant(g, ramp({3}), "b"), "bias");
  sf::ops::softmax(g, sf::ops::relu(g, h, "relu"), "y");
  m.inputs = {"x"};
  m.outputs = {"y"};
  m.metadata = {{"producer", "make_seeds"}, {"labels", "a,b,c"}};
  return m;
}

sf::ModelFile convnet() {
  sf::ModelFile m;
  sf::Graph& g = m.graph;
  sf::Output x = sf::ops::placeholder(g, sf::DType::f32, {1, 8, 8, 2}, "x");
  sf::ops::Conv2DOptions conv;
  conv.padding = "SAME";
  sf::Output h = sf::ops::conv2d(g, x, sf::ops::constant(g, ramp({3, 3, 2, 4}), "k"), conv, "c");
  h = sf::ops::max_pool(g, sf::ops::relu(g, h), {}, "pool");
  h = sf::ops::reshape(g, h, {-1, 64}, "flat");
  h = sf::ops::concat(g, {h, h}, 1, "cat");
  sf::ops::reduce_mean(g, sf::ops::slice(g, h, 1, 3, 70, "s"), {1}, false, "y");
  m.inputs = {"x"};
  m.outputs = {"y"};
  m.metadata = {{"source", "make_seeds"}};
  return m;
}

// Weights stored encoded, so that the fuzzer starts from valid linear, k-means, f16 and bf16
// entries.
sf::ModelFile with_encoded_weights(sf::ModelFile m, const std::string& node,
                                   sf::quant::EncodedTensor encoded) {
  m.encoded_weights[node] = std::move(encoded);
  return m;
}

const sf::Tensor& value_of(const sf::ModelFile& m, const std::string& node) {
  return m.graph.node(m.graph.id_of(node)).attrs.get_tensor("value");
}

// Saves `model` as `name`.sfm (deflated metadata) and `name`-plain.sfm (the same file with
// plain-JSON metadata, format version 1).
void save_both_versions(const std::string& dir, const std::string& name,
                        const sf::ModelFile& model) {
  const std::string path = dir + "/" + name + ".sfm";
  sf::save_model(path, model);
  std::stringstream deflated;
  deflated << std::ifstream(path, std::ios::binary).rdbuf();
  const std::string file = deflated.str();
  // Header bytes 8..15: u32 format_version 2, then u32 flags with bit 0 (deflated metadata).
  if (sf::testing::get_u64(file, 8) != (uint64_t{1} << 32 | 2))
    sf::fail("{}: expected format version 2 with deflated metadata", path);
  const std::string plain = sf::testing::with_metadata(file, sf::testing::metadata_text(file));
  std::ofstream out(dir + "/" + name + "-plain.sfm", std::ios::binary | std::ios::trunc);
  out.write(plain.data(), static_cast<std::streamsize>(plain.size()));
  if (!out.flush()) sf::fail("{}/{}-plain.sfm: cannot write", dir, name);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  try {
    const std::string dir = argv[1];
    save_both_versions(dir, "mlp", mlp());
    save_both_versions(dir, "convnet", convnet());
    const sf::ModelFile m = mlp(), c = convnet();
    sf::save_model(dir + "/mlp-linear.sfm",
                   with_encoded_weights(m, "w", sf::quant::encode_linear(value_of(m, "w"), 3, 1)));
    sf::save_model(dir + "/convnet-kmeans.sfm",
                   with_encoded_weights(c, "k", sf::quant::encode_kmeans(value_of(c, "k"), 2)));
    sf::save_model(dir + "/mlp-f16.sfm",
                   with_encoded_weights(m, "b", sf::quant::encode_f16(value_of(m, "b"))));
    sf::ModelFile bf16 = with_encoded_weights(m, "w", sf::quant::encode_bf16(value_of(m, "w")));
    bf16.metadata["precision"] = "bf16";  // as `quantize --mode bf16` marks it
    sf::save_model(dir + "/mlp-bf16.sfm", bf16);
  } catch (const sf::Error& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
