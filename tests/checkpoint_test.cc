#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "support/temp_files.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = dir_.file("model.sfckpt"); }

  static Checkpoint sample() {
    Checkpoint c;
    c.metadata_json = R"({"step": 1200, "model": "deep-mnist"})";
    c.tensors["conv1/w"] = Tensor::from_vector<float>({2, 3}, {1.5f, -2, 0, 3.25f, 1e-8f, -0.0f});
    c.tensors["step"] = Tensor::from_vector<int64_t>({}, {int64_t{1} << 40});
    c.tensors["counts"] = Tensor::from_vector<int32_t>({4}, {-1, 0, 7, 2147483647});
    c.tensors["mask"] = Tensor::from_vector<uint8_t>({5}, {0, 1, 255, 3, 4});
    c.tensors["q"] = Tensor::from_vector<int8_t>({1, 2}, {-128, 127});
    c.tensors["empty"] = Tensor(DType::f32, {0, 3});
    return c;
  }

  std::string read_bytes() const { return testing::read_file_bytes(path_); }
  void write_bytes(const std::string& bytes) const { testing::write_file_bytes(path_, bytes); }
  // Rewrites the trailing CRC so that only the structural checks can catch a change.
  static void fix_crc(std::string& bytes) {
    uLong crc =
        crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size() - 4));
    for (int i = 0; i < 4; ++i) bytes[bytes.size() - 4 + i] = static_cast<char>(crc >> (8 * i));
  }
  std::string load_error() const {
    try {
      load_checkpoint(path_);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }

  testing::TempDir dir_{"slimflow-ckpt"};
  std::string path_;
};

TEST_F(CheckpointTest, RoundTripsTensorsAndMetadata) {
  Checkpoint saved = sample();
  save_checkpoint(path_, saved);
  Checkpoint loaded = load_checkpoint(path_);
  EXPECT_EQ(loaded.metadata_json, saved.metadata_json);
  ASSERT_EQ(loaded.tensors.size(), saved.tensors.size());
  for (const auto& [name, tensor] : saved.tensors) {
    ASSERT_TRUE(loaded.tensors.count(name)) << name;
    const Tensor& got = loaded.tensors.at(name);
    EXPECT_EQ(got.dtype(), tensor.dtype()) << name;
    EXPECT_EQ(got.shape(), tensor.shape()) << name;
    ASSERT_EQ(got.bytes(), tensor.bytes()) << name;
    EXPECT_EQ(std::memcmp(got.raw(), tensor.raw(), tensor.bytes()), 0) << name;
  }
  std::string bytes = read_bytes();
  EXPECT_EQ(bytes.substr(0, 8), std::string("SFCKPT\0\0", 8));
}

TEST_F(CheckpointTest, EmptyCheckpointRoundTrips) {
  save_checkpoint(path_, Checkpoint{});
  Checkpoint loaded = load_checkpoint(path_);
  EXPECT_TRUE(loaded.tensors.empty());
  EXPECT_EQ(loaded.metadata_json, "");
}

TEST_F(CheckpointTest, NoTemporaryFileRemains) {
  save_checkpoint(path_, sample());
  save_checkpoint(path_, sample());
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_.str()))
    names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"model.sfckpt"});
}

TEST_F(CheckpointTest, SavingOverAnExistingCheckpointReplacesIt) {
  save_checkpoint(path_, sample());
  Checkpoint second;
  second.metadata_json = "{\"step\": 2}";
  second.tensors["only"] = Tensor::from_vector<float>({1}, {42.0f});
  save_checkpoint(path_, second);
  Checkpoint loaded = load_checkpoint(path_);
  EXPECT_EQ(loaded.metadata_json, "{\"step\": 2}");
  ASSERT_EQ(loaded.tensors.size(), 1u);
  EXPECT_EQ(loaded.tensors.at("only").data<float>()[0], 42.0f);
}

TEST_F(CheckpointTest, FailedSaveKeepsTheOldCheckpoint) {
  save_checkpoint(path_, sample());
  Checkpoint bad;
  bad.tensors["undefined"] = Tensor();
  EXPECT_THROW(save_checkpoint(path_, bad), Error);
  EXPECT_EQ(load_checkpoint(path_).tensors.size(), sample().tensors.size());
  std::string missing_dir = dir_.file("no/such/dir/x.sfckpt");
  try {
    save_checkpoint(missing_dir, sample());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(missing_dir + ": cannot write checkpoint: ", 0), 0u)
        << e.what();
  }
}

TEST_F(CheckpointTest, TruncatedFileIsCorrupt) {
  save_checkpoint(path_, sample());
  std::string bytes = read_bytes();
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{30}, size_t{0}}) {
    write_bytes(bytes.substr(0, keep));
    std::string message = load_error();
    EXPECT_EQ(message.rfind(path_ + ": corrupt checkpoint: ", 0), 0u)
        << "kept " << keep << ": " << message;
  }
}

TEST_F(CheckpointTest, FlippedByteFailsTheCrc) {
  save_checkpoint(path_, sample());
  std::string bytes = read_bytes();
  bytes[bytes.size() - 8] ^= 0x10;  // inside the last tensor's data
  write_bytes(bytes);
  std::string message = load_error();
  EXPECT_EQ(message.rfind(path_ + ": corrupt checkpoint: CRC32 mismatch", 0), 0u) << message;
}

TEST_F(CheckpointTest, UnknownVersionIsRejected) {
  save_checkpoint(path_, sample());
  std::string bytes = read_bytes();
  bytes[8] = 7;
  write_bytes(bytes);
  EXPECT_EQ(load_error(),
            path_ + ": checkpoint format version 7 is not supported (this build reads 1)");
}

TEST_F(CheckpointTest, NotACheckpoint) {
  write_bytes(std::string(100, 'x'));
  EXPECT_EQ(load_error(),
            path_ + ": not a slimflow checkpoint (the file does not start with \"SFCKPT\")");
  fs::remove(path_);
  EXPECT_EQ(load_error(), path_ + ": cannot open checkpoint: No such file or directory");
}

TEST_F(CheckpointTest, StructuralChecksCatchBadHeadersWithAValidCrc) {
  Checkpoint c;
  c.metadata_json = "{}";
  c.tensors["w"] = Tensor::from_vector<float>({2}, {1, 2});
  save_checkpoint(path_, c);
  const std::string good = read_bytes();
  // Layout: magic 8, version 4, reserved 4, metadata length 8, "{}" 2, count 8 at offset 26,
  // name length 4 at 34, "w" at 38, dtype at 39, rank at 40, dim at 41, offset at 49, size 57.
  auto expect_corrupt = [&](size_t at, uint64_t value, int width, const std::string& what) {
    std::string bytes = good;
    for (int i = 0; i < width; ++i) bytes[at + i] = static_cast<char>(value >> (8 * i));
    fix_crc(bytes);
    write_bytes(bytes);
    std::string message = load_error();
    EXPECT_EQ(message.rfind(path_ + ": corrupt checkpoint: ", 0), 0u) << what << ": " << message;
  };
  expect_corrupt(16, uint64_t{1} << 62, 8, "huge metadata length");
  expect_corrupt(26, uint64_t{1} << 40, 8, "huge tensor count");
  expect_corrupt(34, 0xffffffff, 4, "huge name length");
  expect_corrupt(39, 9, 1, "unknown dtype");
  expect_corrupt(40, 200, 1, "huge rank");
  expect_corrupt(41, uint64_t{1} << 61, 8, "huge dimension");
  expect_corrupt(49, 1 << 20, 8, "offset past the end");
  expect_corrupt(49, 65, 8, "unaligned offset");
  expect_corrupt(57, 4, 8, "size that does not match the shape");
  // And the unmodified bytes still load.
  write_bytes(good);
  EXPECT_EQ(load_checkpoint(path_).tensors.at("w").data<float>()[1], 2.0f);
}

}  // namespace
}  // namespace sf
