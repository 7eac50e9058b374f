#include "modelfile/model_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "graph/op_registry.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/model_bytes.h"
#include "support/testing.h"
#include "support/temp_files.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::read_file_bytes;
using testing::write_file_bytes;

using json = nlohmann::json;

// Placeholder [2,4] -> MatMul(Const W [4,3]) -> BiasAdd(Const b [3]) -> Relu.
ModelFile small_model() {
  ModelFile m;
  Output x = ops::placeholder(m.graph, DType::f32, {2, 4}, "x");
  Output w = ops::constant(m.graph, testing::random_tensor({4, 3}, 7), "w");
  Output b = ops::constant(m.graph, testing::random_tensor({3}, 8), "b");
  Output h = ops::bias_add(m.graph, ops::matmul(m.graph, x, w, false, false, "mm"), b, "bias");
  ops::relu(m.graph, h, "y");
  m.inputs = {"x"};
  m.outputs = {"y"};
  m.metadata = {{"producer", "model_file_test"}, {"labels", "a,b,c"}};
  return m;
}

Tensor run_model(const ModelFile& m, const Tensor& input) {
  Session session(m.graph);
  Output x{m.graph.id_of(m.inputs[0]), 0};
  Output y{m.graph.id_of(m.outputs[0]), 0};
  return session.run({{x, input}}, {y})[0].clone();
}

using testing::edit_meta;
using testing::get_u64;
using testing::put_u32;
using testing::put_u64;

class ModelFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("model_file_test");
    path_ = dir_ + "/m.sfm";
    save_model(path_, small_model());
    bytes_ = read_file_bytes(path_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes `bytes` and expects load_model to throw an sf::Error containing `fragment`.
  void expect_rejected(const std::string& bytes, const std::string& fragment) {
    const std::string path = dir_ + "/bad.sfm";
    write_file_bytes(path, bytes);
    try {
      load_model(path);
      ADD_FAILURE() << "expected an error containing: " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  void expect_meta_rejected(const std::function<void(json&)>& edit, const std::string& fragment) {
    expect_rejected(edit_meta(bytes_, edit), fragment);
  }

  std::string dir_, path_, bytes_;
};

TEST_F(ModelFileTest, RoundTripGivesIdenticalOutputs) {
  ModelFile original = small_model();
  Tensor input = testing::random_tensor({2, 4}, 9);
  Tensor before = run_model(original, input);
  ModelFile loaded = load_model(path_);
  EXPECT_EQ(loaded.inputs, original.inputs);
  EXPECT_EQ(loaded.outputs, original.outputs);
  EXPECT_EQ(loaded.metadata, original.metadata);
  EXPECT_EQ(loaded.file_bytes, bytes_.size());
  ASSERT_EQ(loaded.graph.num_nodes(), original.graph.num_nodes());
  for (int i = 0; i < loaded.graph.num_nodes(); ++i) {
    EXPECT_EQ(loaded.graph.node(i).name, original.graph.node(i).name);
    EXPECT_EQ(loaded.graph.node(i).op, original.graph.node(i).op);
    EXPECT_EQ(loaded.graph.node(i).inputs, original.graph.node(i).inputs);
    EXPECT_EQ(loaded.graph.node(i).outputs, original.graph.node(i).outputs);
    EXPECT_EQ(loaded.graph.node(i).device, original.graph.node(i).device);
  }
  Tensor after = run_model(loaded, input);
  ASSERT_EQ(after.shape(), before.shape());
  EXPECT_EQ(std::memcmp(after.raw(), before.raw(), before.bytes()), 0);
  EXPECT_EQ(weight_bytes(loaded), (4 * 3 + 3) * sizeof(float));
  // The stored placeholder batch is not fixed: another batch size re-infers shapes.
  Tensor batch5 = run_model(loaded, testing::random_tensor({5, 4}, 10));
  EXPECT_EQ(batch5.shape(), (Shape{5, 3}));
}

// The [start, end) range and path of the mapping that holds `p`, from /proc/self/maps.
bool find_mapping(const void* p, std::string* file) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode >> path;
    uintptr_t lo = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    uintptr_t hi = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    if (addr >= lo && addr < hi) {
      *file = path;
      return true;
    }
  }
  return false;
}

bool file_is_mapped(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.ends_with(" " + path)) return true;
  return false;
}

TEST_F(ModelFileTest, WeightsBorrowTheMappingInPlace) {
  const std::string canonical = std::filesystem::canonical(path_).string();
  {
    ModelFile loaded = load_model(path_);
    for (const char* name : {"w", "b"}) {
      const Tensor& t = loaded.graph.node(loaded.graph.id_of(name)).attrs.get_tensor("value");
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % kTensorAlignment, 0u) << name;
      // One borrowed view per tensor, not a copy of the file.
      EXPECT_EQ(t.storage()->bytes(), t.bytes()) << name;
      std::string mapped_file;
      ASSERT_TRUE(find_mapping(t.raw(), &mapped_file)) << name;
      EXPECT_EQ(mapped_file, canonical) << name;
    }
    // Writes go to private copy-on-write pages, never to the file.
    Tensor w = loaded.graph.node(loaded.graph.id_of("w")).attrs.get_tensor("value");
    w.data<float>()[0] = 12345.0f;
    EXPECT_EQ(read_file_bytes(path_), bytes_);
  }
  // The mapping goes with the last tensor that borrows it.
  EXPECT_FALSE(file_is_mapped(canonical));
}

TEST_F(ModelFileTest, MappingOutlivesTheModelWhileATensorHoldsIt) {
  Tensor w;
  {
    ModelFile loaded = load_model(path_);
    w = loaded.graph.node(loaded.graph.id_of("w")).attrs.get_tensor("value");
  }
  ModelFile original = small_model();
  const Tensor& expected = original.graph.node(original.graph.id_of("w")).attrs.get_tensor("value");
  EXPECT_EQ(std::memcmp(w.raw(), expected.raw(), expected.bytes()), 0);
}

struct KindsRegistration {
  KindsRegistration() {
    OpRegistry::global().add(OpDef{.name = "ModelFileTestKinds",
                                   .version = 3,
                                   .attrs = {{"i", AttrKind::Int, std::nullopt},
                                             {"f", AttrKind::Float, std::nullopt},
                                             {"b", AttrKind::Bool, std::nullopt},
                                             {"s", AttrKind::String, std::nullopt},
                                             {"is", AttrKind::Ints, std::nullopt},
                                             {"fs", AttrKind::Floats, std::nullopt},
                                             {"t", AttrKind::Tensor, std::nullopt},
                                             {"empty", AttrKind::Tensor, std::nullopt},
                                             {"defaulted", AttrKind::Int, AttrValue{int64_t{42}}}},
                                   .infer = [](const InferContext&) -> std::vector<TensorType> {
                                     return {TensorType{DType::f32, {1}}};
                                   }});
  }
};

void register_kinds_op() { static KindsRegistration once; }

TEST_F(ModelFileTest, AllAttributeKindsRoundTrip) {
  register_kinds_op();
  const double inf = std::numeric_limits<double>::infinity();
  ModelFile m;
  Attrs attrs{{"i", int64_t{std::numeric_limits<int64_t>::min()}},
              {"f", 0.1},
              {"b", true},
              {"s", std::string("h\u00e9llo \"quoted\"\n")},
              {"is", std::vector<int64_t>{std::numeric_limits<int64_t>::max(), -1, 0}},
              {"fs", std::vector<double>{1e-310, -inf, inf, std::nan(""), -0.0}},
              {"t", Tensor::from_vector<int64_t>({2}, {-5, 1LL << 40})},
              {"empty", Tensor(DType::i8, {0, 3})}};
  m.graph.add_node("ModelFileTestKinds", {}, attrs, "k");
  m.outputs = {"k"};
  save_model(path_, m);
  ModelFile loaded = load_model(path_);
  const Attrs& a = loaded.graph.node(0).attrs;
  EXPECT_EQ(a.get_int("i"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(a.get_float("f"), 0.1);
  EXPECT_TRUE(a.get_bool("b"));
  EXPECT_EQ(a.get_string("s"), "h\u00e9llo \"quoted\"\n");
  EXPECT_EQ(a.get_ints("is"), (std::vector<int64_t>{std::numeric_limits<int64_t>::max(), -1, 0}));
  const auto& fs = a.get_floats("fs");
  ASSERT_EQ(fs.size(), 5u);
  EXPECT_EQ(fs[0], 1e-310);
  EXPECT_EQ(fs[1], -inf);
  EXPECT_EQ(fs[2], inf);
  EXPECT_TRUE(std::isnan(fs[3]));
  EXPECT_TRUE(std::signbit(fs[4]));
  const Tensor& t = a.get_tensor("t");
  EXPECT_EQ(t.dtype(), DType::i64);
  EXPECT_EQ(t.shape(), (Shape{2}));
  EXPECT_EQ(t.data<int64_t>()[0], -5);
  EXPECT_EQ(t.data<int64_t>()[1], 1LL << 40);
  EXPECT_EQ(a.get_tensor("empty").shape(), (Shape{0, 3}));
  EXPECT_EQ(a.get_tensor("empty").dtype(), DType::i8);
  EXPECT_EQ(a.get_int("defaulted"), 42);
  EXPECT_EQ(a.all().size(), 9u);
  EXPECT_EQ(weight_bytes(loaded), 16u);
}

TEST_F(ModelFileTest, OlderWriterGetsDefaultsForMissingAttributes) {
  register_kinds_op();
  ModelFile m;
  m.graph.add_node("ModelFileTestKinds", {},
                   {{"i", int64_t{1}},
                    {"f", 1.0},
                    {"b", false},
                    {"s", std::string()},
                    {"is", std::vector<int64_t>{}},
                    {"fs", std::vector<double>{}},
                    {"t", Tensor(DType::f32, {1})},
                    {"empty", Tensor(DType::f32, {0})}},
                   "k");
  save_model(path_, m);
  std::string file = edit_meta(read_file_bytes(path_), [](json& j) {
    j["nodes"][0]["attrs"].erase("defaulted");
    j["nodes"][0]["version"] = 2;
  });
  write_file_bytes(path_, file);
  EXPECT_EQ(load_model(path_).graph.node(0).attrs.get_int("defaulted"), 42);
}

TEST_F(ModelFileTest, RejectsBadHeaders) {
  std::string bad = bytes_;
  bad[0] = 'X';
  expect_rejected(bad, "not a slimflow model");
  expect_rejected("hello", "not a slimflow model");
  expect_rejected(bytes_.substr(0, 20), "truncated");
  bad = bytes_;
  put_u32(bad, 8, 9);
  expect_rejected(bad, "format version 9 is newer than this build reads (4)");
  bad = bytes_;
  put_u32(bad, 8, 0);
  expect_rejected(bad, "format version 0");
  bad = bytes_;
  put_u64(bad, 24, ~uint64_t{0});
  expect_rejected(bad, "metadata section");
  bad = bytes_;
  put_u64(bad, 16, 8);
  expect_rejected(bad, "metadata section");
  bad = bytes_;
  put_u64(bad, 40, get_u64(bad, 40) + 1);
  expect_rejected(bad, "data section");
  bad = bytes_;
  put_u64(bad, 32, ~uint64_t{0} - 63);
  expect_rejected(bad, "data section");
  bad = bytes_;
  put_u64(bad, 32, get_u64(bad, 32) - 32);
  put_u64(bad, 40, get_u64(bad, 40) + 32);
  expect_rejected(bad, "not a multiple of 64");
  bad = bytes_;
  put_u64(bad, 32, 64);
  put_u64(bad, 40, bytes_.size() - 64);
  expect_rejected(bad, "overlaps");
  bad = testing::with_metadata(bytes_, testing::metadata_text(bytes_));
  bad[48] = '#';
  expect_rejected(bad, "not valid JSON");
}

TEST_F(ModelFileTest, RejectsEmptyFilesDirectoriesAndMissingFiles) {
  expect_rejected("", "empty file");
  try {
    load_model(dir_);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir_ + ": is a directory, not a slimflow model");
  }
  EXPECT_THROW(load_model(dir_ + "/missing.sfm"), Error);
}

TEST_F(ModelFileTest, RejectsBadTensors) {
  // tensors: 0 = w (48 bytes at 0), 1 = b (12 bytes at 64).
  expect_meta_rejected([](json& j) { j["tensors"][1]["encoding"] = "csr"; },
                       "tensor 1 has encoding 'csr', which this build does not read");
  expect_meta_rejected([](json& j) { j["tensors"][1]["offset"] = 0; }, "tensors overlap");
  expect_meta_rejected([](json& j) { j["tensors"][1]["offset"] = 32; }, "multiple of 64");
  expect_meta_rejected([](json& j) { j["tensors"][1]["offset"] = 1 << 20; }, "runs past the end");
  expect_meta_rejected([](json& j) { j["tensors"][1]["bytes"] = 8; }, "needs 12");
  expect_meta_rejected([](json& j) { j["tensors"][1]["shape"] = {-3}; }, "negative dimension");
  expect_meta_rejected(
      [](json& j) {
        j["tensors"][1]["shape"] = {1LL << 32, 1LL << 32, 4};
      },
      "elements");
  expect_meta_rejected([](json& j) { j["tensors"][1]["shape"] = {~uint64_t{0}}; }, "out of range");
  expect_meta_rejected([](json& j) { j["tensors"][1]["dtype"] = "f16"; }, "unknown dtype 'f16'");
  expect_meta_rejected([](json& j) { j["tensors"][1].erase("bytes"); }, "tensor 1 has no 'bytes'");
  expect_meta_rejected([](json& j) { j["nodes"][1]["attrs"]["value"]["value"] = 7; },
                       "outside [0, 2)");
  // W stored as [3,4] instead of [4,3]: same bytes, but MatMul's shape function objects.
  expect_meta_rejected([](json& j) { j["tensors"][0]["shape"] = {3, 4}; }, "node 'mm' (MatMul)");
}

TEST_F(ModelFileTest, RejectsBadNodes) {
  // nodes: 0 x, 1 w, 2 b, 3 mm, 4 bias, 5 y.
  expect_meta_rejected([](json& j) { j["nodes"][3]["version"] = 2; },
                       "node 'mm': op MatMul version 2 is newer than this build supports (1)");
  expect_meta_rejected([](json& j) { j["nodes"][5]["op"] = "NoSuchOp"; }, "unknown op 'NoSuchOp'");
  expect_meta_rejected(
      [](json& j) {
        j["nodes"][3]["inputs"][0] = {4, 0};
      },
      "node 'mm' input 0 node index (must be an earlier node) is 4");
  expect_meta_rejected([](json& j) { j["nodes"][3]["inputs"][0] = {99, 0}; }, "is 99");
  expect_meta_rejected([](json& j) { j["nodes"][3]["inputs"][0] = {0, 1}; }, "output index");
  expect_meta_rejected([](json& j) { j["nodes"][3]["inputs"].erase(1); }, "expects 2 input(s)");
  expect_meta_rejected([](json& j) { j["nodes"][4]["name"] = "mm"; }, "name already used");
  expect_meta_rejected(
      [](json& j) {
        j["nodes"][3]["attrs"]["bogus"] = {{"kind", "int"}, {"value", 1}};
      },
      "unknown attribute 'bogus'");
  expect_meta_rejected([](json& j) { j["nodes"][3]["attrs"]["transpose_a"]["kind"] = "blob"; },
                       "unknown kind 'blob'");
  expect_meta_rejected([](json& j) { j["nodes"][3]["attrs"]["transpose_a"]["value"] = 1; },
                       "must be true or false");
  expect_meta_rejected(
      [](json& j) {
        j["nodes"][0]["attrs"]["shape"]["value"] = {2, -4};
      },
      "negative dimension");
  expect_meta_rejected(
      [](json& j) {
        j["nodes"][0]["attrs"]["shape"]["value"] = {1LL << 40, 1LL << 40};
      },
      "elements");
}

TEST_F(ModelFileTest, RejectsBadInputsAndOutputs) {
  expect_meta_rejected([](json& j) { j["inputs"] = {"nope"}; }, "input 'nope' is not a node");
  expect_meta_rejected([](json& j) { j["outputs"] = {"nope"}; }, "output 'nope' is not a node");
  expect_meta_rejected([](json& j) { j["inputs"] = {"y"}; },
                       "input 'y' is a Relu, not a Placeholder");
  expect_meta_rejected([](json& j) { j["metadata"]["n"] = 3; }, "metadata 'n' must be a string");
  expect_meta_rejected([](json& j) { j.erase("nodes"); }, "metadata has no 'nodes'");
}

TEST_F(ModelFileTest, SaveRejectsInconsistentModels) {
  ModelFile m = small_model();
  m.inputs = {"w"};
  EXPECT_THROW(save_model(path_, m), Error);
  m.inputs = {"x"};
  m.outputs = {"nope"};
  EXPECT_THROW(save_model(path_, m), Error);
  // A failed save leaves the old file and no temporary behind.
  EXPECT_EQ(read_file_bytes(path_), bytes_);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
}

TEST_F(ModelFileTest, EveryTruncationIsAnError) {
  const size_t step = std::max<size_t>(1, bytes_.size() / 300);
  int cuts = 0;
  for (size_t len = 0; len < bytes_.size(); len += (len < 128 ? 1 : step)) {
    write_file_bytes(path_, bytes_.substr(0, len));
    EXPECT_THROW(load_model(path_), Error) << "length " << len;
    ++cuts;
  }
  EXPECT_GT(cuts, 300);
}

TEST_F(ModelFileTest, RandomByteFlipsNeverCrash) {
  std::mt19937 rng(1234);
  int loaded = 0, rejected = 0;
  for (int i = 0; i < 400; ++i) {
    std::string bad = bytes_;
    // Half the flips hit the header and metadata, where they matter most.
    size_t limit = i % 2 ? bad.size() : get_u64(bytes_, 32);
    size_t at = std::uniform_int_distribution<size_t>(0, limit - 1)(rng);
    bad[at] = static_cast<char>(bad[at] ^ (1 << (rng() % 8)));
    try {
      ModelFile m = load_model_from_memory(bad.data(), bad.size(), nullptr, "flip");
      weight_bytes(m);
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(loaded, 0);
}

// --- format version 2: flags and deflated metadata ---

uint32_t header_u32(const std::string& file, size_t at) {
  return static_cast<uint32_t>(get_u64(file, at) & 0xffffffff);
}

// The file with `section` as its metadata section, flagged as deflated (format version 2).
std::string with_deflated_section(const std::string& file, const std::string& section) {
  std::string out = testing::with_metadata(file, section);
  put_u32(out, 8, 2);
  put_u32(out, 12, 1);
  return out;
}

void expect_same_graph(const ModelFile& loaded, const ModelFile& original) {
  EXPECT_EQ(loaded.inputs, original.inputs);
  EXPECT_EQ(loaded.outputs, original.outputs);
  EXPECT_EQ(loaded.metadata, original.metadata);
  ASSERT_EQ(loaded.graph.num_nodes(), original.graph.num_nodes());
  for (int i = 0; i < loaded.graph.num_nodes(); ++i) {
    EXPECT_EQ(loaded.graph.node(i).name, original.graph.node(i).name);
    EXPECT_EQ(loaded.graph.node(i).op, original.graph.node(i).op);
    EXPECT_EQ(loaded.graph.node(i).inputs, original.graph.node(i).inputs);
    EXPECT_EQ(loaded.graph.node(i).outputs, original.graph.node(i).outputs);
  }
}

TEST_F(ModelFileTest, MetadataThatShrinksTheFileIsDeflatedAsVersion2) {
  EXPECT_EQ(header_u32(bytes_, 8), 2u);
  EXPECT_EQ(header_u32(bytes_, 12), 1u);
  const std::string section = bytes_.substr(get_u64(bytes_, 16), get_u64(bytes_, 24));
  const std::string text = testing::zlib_inflate(section);
  EXPECT_EQ(section, testing::zlib_deflate(text));  // zlib level 9
  EXPECT_EQ(json::parse(text)["nodes"].size(), 6u);
  // Only the metadata section changed: the same data section starts earlier, still aligned.
  const std::string plain = testing::with_metadata(bytes_, text);
  EXPECT_LT(bytes_.size(), plain.size());
  EXPECT_EQ(get_u64(bytes_, 32) % 64, 0u);
  EXPECT_EQ(bytes_.substr(get_u64(bytes_, 32)), plain.substr(get_u64(plain, 32)));

  const ModelFile original = small_model();
  const Tensor input = testing::random_tensor({2, 4}, 9);
  const Tensor expected = run_model(original, input);
  for (const std::string& file : {bytes_, plain}) {
    write_file_bytes(path_, file);
    const ModelFile loaded = load_model(path_);
    expect_same_graph(loaded, original);
    const Tensor got = run_model(loaded, input);
    ASSERT_EQ(got.shape(), expected.shape());
    EXPECT_EQ(std::memcmp(got.raw(), expected.raw(), expected.bytes()), 0);
  }
}

TEST_F(ModelFileTest, MetadataThatWouldNotShrinkTheFileStaysVersion1) {
  // An empty model's JSON deflates a few bytes smaller, but the data section would still start
  // at byte 128, so the file is written as version 1 for older readers.
  ModelFile empty;
  save_model(path_, empty);
  const std::string file = read_file_bytes(path_);
  const std::string text = file.substr(48, get_u64(file, 24));
  ASSERT_LT(testing::zlib_deflate(text).size(), text.size());
  EXPECT_EQ((48 + testing::zlib_deflate(text).size() + 63) / 64, (48 + text.size() + 63) / 64);
  EXPECT_EQ(header_u32(file, 8), 1u);
  EXPECT_EQ(header_u32(file, 12), 0u);
  EXPECT_TRUE(json::parse(text)["nodes"].empty());
  EXPECT_EQ(load_model(path_).graph.num_nodes(), 0);
}

TEST_F(ModelFileTest, ReadsVersion1ReservedFieldAndVersion2WithoutFlags) {
  std::string plain = testing::with_metadata(bytes_, testing::metadata_text(bytes_));
  put_u32(plain, 12, 0xffffffff);  // reserved in version 1: ignored
  write_file_bytes(path_, plain);
  EXPECT_EQ(load_model(path_).graph.num_nodes(), 6);
  put_u32(plain, 8, 2);
  put_u32(plain, 12, 0);
  write_file_bytes(path_, plain);
  EXPECT_EQ(load_model(path_).graph.num_nodes(), 6);
}

TEST_F(ModelFileTest, RejectsUnknownFlags) {
  std::string bad = bytes_;
  put_u32(bad, 12, 0x5);
  expect_rejected(bad, "unknown flags 0x4 in format version 2");
  put_u32(bad, 12, 0x80000001);
  expect_rejected(bad, "unknown flags 0x80000000 in format version 2");
}

TEST_F(ModelFileTest, RejectsCorruptTruncatedOrPaddedDeflatedMetadata) {
  const std::string section = bytes_.substr(get_u64(bytes_, 16), get_u64(bytes_, 24));
  std::string bad = section;
  bad[0] = 0;
  expect_rejected(with_deflated_section(bytes_, bad),
                  "compressed metadata is not a valid zlib stream: incorrect header check");
  bad = section;
  bad.back() = static_cast<char>(bad.back() ^ 1);  // the Adler-32 of the JSON
  expect_rejected(with_deflated_section(bytes_, bad),
                  "compressed metadata is not a valid zlib stream: incorrect data check");
  for (size_t keep : {size_t{0}, size_t{2}, section.size() / 2, section.size() - 1})
    expect_rejected(with_deflated_section(bytes_, section.substr(0, keep)),
                    "compressed metadata is truncated");
  expect_rejected(
      with_deflated_section(bytes_, section + "xyz"),
      "compressed metadata has 3 bytes after the end of its zlib stream, expected none");
  // Plain JSON flagged as deflated.
  expect_rejected(with_deflated_section(bytes_, testing::metadata_text(bytes_)),
                  "compressed metadata is not a valid zlib stream");
  // A valid stream of something other than JSON is checked like any metadata.
  expect_rejected(with_deflated_section(bytes_, testing::zlib_deflate("[1, 2")), "not valid JSON");
}

TEST_F(ModelFileTest, InflatesMetadataUpToTheLimitAndNoFurther) {
  // Whitespace after the JSON object is valid JSON: metadata of exactly the limit loads.
  std::string text = testing::metadata_text(bytes_);
  text.resize(kMaxInflatedMetadataBytes, ' ');
  write_file_bytes(path_, with_deflated_section(bytes_, testing::zlib_deflate(text)));
  EXPECT_EQ(load_model(path_).graph.num_nodes(), 6);
  // One byte more is a bomb: about 65 KB that would inflate past the limit.
  text.push_back(' ');
  const std::string bomb = testing::zlib_deflate(text);
  EXPECT_LT(bomb.size(), size_t{100'000});
  expect_rejected(with_deflated_section(bytes_, bomb),
                  fmt::format("compressed metadata inflates to more than the {}-byte limit",
                              kMaxInflatedMetadataBytes));
}

}  // namespace
}  // namespace sf
