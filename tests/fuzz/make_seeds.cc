// Writes a few valid .sfm files into the folder given as argv[1]: the fuzzer's starting corpus.
#include <cstdio>
#include <string>

#include "modelfile/model_file.h"
#include "ops/ops.h"

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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  try {
    const std::string dir = argv[1];
    sf::save_model(dir + "/mlp.sfm", mlp());
    sf::save_model(dir + "/convnet.sfm", convnet());
  } catch (const sf::Error& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
