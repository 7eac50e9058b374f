#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "models/spec.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

std::string source(const std::string& relative) {
  return std::string(SLIMFLOW_SOURCE_DIR) + "/" + relative;
}

std::string error_of(const std::string& text) {
  try {
    parse_model_spec(text, "bad.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelSpecTest, ShippedSpecsBuild) {
  for (const char* name : {"deep-mnist", "lenet-300-100", "lenet5"}) {
    ModelSpec spec = load_model_spec(source(std::string("models/") + name + ".yaml"));
    Model model = build_model(spec, 64);
    EXPECT_EQ(model.graph.type(model.logits).shape, (Shape{64, 10})) << name;
  }
}

TEST(ModelSpecTest, DeepMnistHasTheTutorialShapes) {
  Model model = build_model(load_model_spec(source("models/deep-mnist.yaml")), 64);
  const Graph& g = model.graph;
  EXPECT_EQ(g.node(g.id_of("conv1/weights")).outputs[0].shape, (Shape{5, 5, 1, 32}));
  EXPECT_EQ(g.node(g.id_of("conv2/weights")).outputs[0].shape, (Shape{5, 5, 32, 64}));
  EXPECT_EQ(g.node(g.id_of("fc1/weights")).outputs[0].shape, (Shape{3136, 1024}));
  EXPECT_EQ(g.node(g.id_of("fc2/weights")).outputs[0].shape, (Shape{1024, 10}));
  EXPECT_EQ(model.parameters.size(), 8u);
}

const char* kHeader = "name: t\ninput: [28, 28, 1]\nclasses: 10\nlayers:\n";

TEST(ModelSpecTest, UnknownLayerTypeNamesTheLineAndKnownTypes) {
  std::string e = error_of(std::string(kHeader) + "  - {name: c, type: conv3d}\n");
  EXPECT_NE(e.find("bad.yaml:5: layer 'c': unknown type 'conv3d' (known: conv2d,"), std::string::npos)
      << e;
}

TEST(ModelSpecTest, TypoedKeyIsAnError) {
  std::string e = error_of(std::string(kHeader) +
                           "  - {name: conv1, type: conv2d, filter: 8, kernel: 3}\n");
  EXPECT_NE(e.find("layer 'conv1' (conv2d): unknown key 'filter' (known: filters,"),
            std::string::npos)
      << e;
}

TEST(ModelSpecTest, MismatchedShapesNameTheLayer) {
  std::string e = error_of(std::string(kHeader) + "  - {name: fc1, type: dense, units: 10}\n");
  EXPECT_NE(e.find("layer 'fc1' (dense): input is [1,28,28,1]"), std::string::npos) << e;
}

TEST(ModelSpecTest, WrongClassCountIsAnError) {
  std::string e = error_of(std::string(kHeader) +
                           "  - {type: flatten}\n  - {name: out, type: dense, units: 7}\n");
  EXPECT_NE(e.find("the last layer outputs [1,7], expected [batch, classes] = [1,10]"),
            std::string::npos)
      << e;
}

// Found by the data-file fuzzer: the fans of a 2e17 x 2e17 kernel overflowed int64 before the
// shape was checked.
TEST(ModelSpecTest, HugeKernelsAndMultipliersAreErrorsNotOverflows) {
  std::string e = error_of(std::string(kHeader) +
                           "  - {name: c, type: conv2d, filters: 32, kernel: 199999999999999999}\n");
  EXPECT_NE(e.find("layer 'c' (conv2d): weights [199999999999999999,199999999999999999,1,32] "
                   "have more than 1099511627776 elements"),
            std::string::npos)
      << e;
  e = error_of(std::string(kHeader) +
               "  - {name: d, type: depthwise_conv2d, kernel: 3, multiplier: 4611686018427387904}\n");
  EXPECT_NE(e.find("layer 'd' (depthwise_conv2d): multiplier must be 1..1099511627776 for 1 "
                   "input channels, got 4611686018427387904"),
            std::string::npos)
      << e;
}

// Pipes and /dev/stdin have no size to seek to; a spec is read up to the limit instead.
TEST(ModelSpecTest, ReadsFromAPipeAndRefusesSpecsOverOneMegabyte) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string text = std::string(kHeader) + "  - {type: flatten}\n  - {type: dense, units: 10}\n";
  ASSERT_EQ(write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fds[1]);
  const ModelSpec spec = load_model_spec("/proc/self/fd/" + std::to_string(fds[0]));
  close(fds[0]);
  EXPECT_EQ(spec.classes, 10);

  const std::string big = ::testing::TempDir() + "/big-spec.yaml";
  {
    std::ofstream out(big);
    out << kHeader << std::string(size_t{1} << 20, '#');
  }
  try {
    load_model_spec(big);
    ADD_FAILURE() << "a spec over 1 MB loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(big + ": a model spec of more than 1048576 bytes"),
              std::string::npos)
        << e.what();
  }
  std::remove(big.c_str());
}

TEST(ModelSpecTest, InvalidYamlNamesTheLine) {
  std::string e = error_of("name: [unclosed\n");
  EXPECT_NE(e.find("bad.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("invalid YAML"), std::string::npos) << e;
}

TEST(ModelSpecTest, ResidualInputsByName) {
  std::string text = std::string(kHeader) +
                     "  - {name: a, type: conv2d, filters: 4, kernel: 3, padding: same}\n"
                     "  - {name: b, type: conv2d, filters: 4, kernel: 3, padding: same}\n"
                     "  - {name: sum, type: add, inputs: [a, b]}\n"
                     "  - {name: gap, type: global_avg_pool}\n"
                     "  - {name: out, type: dense, units: 10}\n";
  EXPECT_EQ(error_of(text), "");
}

}  // namespace
}  // namespace sf
