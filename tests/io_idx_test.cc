#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "io/dataset.h"
#include "io/idx.h"
#include "support/temp_files.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::TempDir;
using testing::read_file_bytes;
using testing::write_file_bytes;

namespace fs = std::filesystem;

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string idx_header(uint8_t type, const std::vector<uint32_t>& dims) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) s += be32(d);
  return s;
}

std::string u8_idx(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& values) {
  return idx_header(0x08, dims) + std::string(values.begin(), values.end());
}

void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(gz);
}

using testing::error_of;

long peak_rss_kb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST(IoIdxTest, ReadsRawU8) {
  TempDir dir;
  write_file_bytes(dir.file("a.idx"), u8_idx({2, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 255}));
  Tensor t = read_idx(dir.file("a.idx"));
  EXPECT_EQ(t.dtype(), DType::u8);
  EXPECT_EQ(t.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(t.data<uint8_t>()[4], 4);
  EXPECT_EQ(t.data<uint8_t>()[11], 255);
}

TEST(IoIdxTest, ReadsGzipDetectedByMagicNotName) {
  TempDir dir;
  write_gzip(dir.file("labels"), u8_idx({5}, {7, 2, 1, 0, 4}));
  Tensor t = read_idx(dir.file("labels"));
  EXPECT_EQ(t.shape(), (Shape{5}));
  EXPECT_EQ(t.data<uint8_t>()[0], 7);
  EXPECT_EQ(t.data<uint8_t>()[4], 4);
}

TEST(IoIdxTest, ReadsBigEndianI32F32AndI8) {
  TempDir dir;
  float f = -1.5f;
  uint32_t fbits;
  std::memcpy(&fbits, &f, 4);
  write_file_bytes(dir.file("i.idx"), idx_header(0x0C, {2}) + be32(1) + be32(0xfffffffe));
  write_gzip(dir.file("f.idx.gz"), idx_header(0x0D, {1, 1}) + be32(fbits));
  write_file_bytes(dir.file("b.idx"), idx_header(0x09, {2}) + std::string{'\x7f', '\x80'});
  Tensor i = read_idx(dir.file("i.idx"));
  ASSERT_EQ(i.dtype(), DType::i32);
  EXPECT_EQ(i.data<int32_t>()[0], 1);
  EXPECT_EQ(i.data<int32_t>()[1], -2);
  Tensor ft = read_idx(dir.file("f.idx.gz"));
  ASSERT_EQ(ft.dtype(), DType::f32);
  EXPECT_EQ(ft.shape(), (Shape{1, 1}));
  EXPECT_EQ(ft.data<float>()[0], -1.5f);
  Tensor b = read_idx(dir.file("b.idx"));
  ASSERT_EQ(b.dtype(), DType::i8);
  EXPECT_EQ(b.data<int8_t>()[1], -128);
}

TEST(IoIdxTest, MissingFileNamesThePath) {
  TempDir dir;
  std::string path = dir.file("nope-idx3-ubyte");
  EXPECT_EQ(error_of([&] { read_idx(path); }), path + ": cannot open: No such file or directory");
}

TEST(IoIdxTest, TruncatedRawFile) {
  TempDir dir;
  std::string path = dir.file("train-images-idx3-ubyte");
  write_file_bytes(path, idx_header(0x08, {60000, 28, 28}) + std::string(1000, '\0'));
  EXPECT_EQ(error_of([&] { read_idx(path); }),
            path +
                ": truncated: header says 60000x28x28 (47040000 bytes) but the file has 1000 bytes "
                "of data");
}

TEST(IoIdxTest, TruncatedHeader) {
  TempDir dir;
  write_file_bytes(dir.file("h"), idx_header(0x08, {3, 4}).substr(0, 9));
  EXPECT_EQ(error_of([&] { read_idx(dir.file("h")); }),
            dir.file("h") + ": truncated: file ends inside the IDX header (9 of 12 bytes)");
  write_file_bytes(dir.file("empty"), "");
  EXPECT_EQ(error_of([&] { read_idx(dir.file("empty")); }),
            dir.file("empty") + ": empty file: not an IDX file");
}

TEST(IoIdxTest, TruncatedGzipData) {
  TempDir dir;
  std::string path = dir.file("short.gz");
  write_gzip(path, idx_header(0x08, {10, 2}) + std::string(7, '\1'));
  EXPECT_EQ(error_of([&] { read_idx(path); }),
            path +
                ": truncated: header says 10x2 (20 bytes) but the file has 7 bytes of data "
                "(decompressed)");
}

TEST(IoIdxTest, CutGzipStreamIsAnError) {
  TempDir dir;
  std::string whole = dir.file("whole.gz");
  std::vector<uint8_t> values(4000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>(i * 7919 % 251);
  write_gzip(whole, u8_idx({4000}, values));
  std::string bytes = read_file_bytes(whole);
  std::string cut = dir.file("cut.gz");
  write_file_bytes(cut, bytes.substr(0, bytes.size() - 12));
  std::string message = error_of([&] { read_idx(cut); });
  EXPECT_EQ(message.rfind(cut + ": ", 0), 0u) << message;
  EXPECT_NE(message, "(no error)");
}

TEST(IoIdxTest, TrailingBytesAreAnError) {
  TempDir dir;
  write_file_bytes(dir.file("t"), u8_idx({2}, {1, 2}) + "xyz");
  EXPECT_EQ(error_of([&] { read_idx(dir.file("t")); }),
            dir.file("t") +
                ": header says 2 (2 bytes) but the file has 5 bytes of data (3 "
                "trailing bytes)");
  write_gzip(dir.file("t.gz"), u8_idx({2}, {1, 2}) + "xyz");
  EXPECT_NE(error_of([&] { read_idx(dir.file("t.gz")); }).find("trailing bytes"),
            std::string::npos);
}

TEST(IoIdxTest, BadMagic) {
  TempDir dir;
  std::string path = dir.file("x.idx");
  write_file_bytes(path, be32(0x12345678) + std::string(16, '\0'));
  EXPECT_EQ(error_of([&] { read_idx(path); }),
            path + ": bad magic 0x12345678: not an IDX file (expected 0x0000080N)");
}

TEST(IoIdxTest, UnsupportedAndUnknownTypes) {
  TempDir dir;
  write_file_bytes(dir.file("i16"), idx_header(0x0B, {1}) + "ab");
  EXPECT_EQ(error_of([&] { read_idx(dir.file("i16")); }),
            dir.file("i16") +
                ": unsupported IDX element type 0x0B (i16); this build reads 0x08 u8, 0x09 i8, "
                "0x0C i32 and 0x0D f32");
  write_file_bytes(dir.file("ff"), idx_header(0xFF, {1}) + "a");
  EXPECT_NE(error_of([&] { read_idx(dir.file("ff")); }).find("unknown IDX element type 0xff"),
            std::string::npos);
}

TEST(IoIdxTest, BadDimensions) {
  TempDir dir;
  write_file_bytes(dir.file("d0"), idx_header(0x08, {}));
  EXPECT_EQ(error_of([&] { read_idx(dir.file("d0")); }),
            dir.file("d0") + ": IDX header has 0 dimensions (expected 1 to 4)");
  write_file_bytes(dir.file("d5"), idx_header(0x08, {1, 1, 1, 1, 1}) + "a");
  EXPECT_EQ(error_of([&] { read_idx(dir.file("d5")); }),
            dir.file("d5") + ": IDX header has 5 dimensions (expected 1 to 4)");
  write_file_bytes(dir.file("zero"), idx_header(0x08, {3, 0}));
  EXPECT_EQ(error_of([&] { read_idx(dir.file("zero")); }),
            dir.file("zero") +
                ": IDX header dimension 2 (of 2) is 0; every dimension must be at least 1");
}

TEST(IoIdxTest, HugeHeaderInSmallFileFailsWithoutAllocating) {
  TempDir dir;
  long rss_before = peak_rss_kb();
  // Over the cap: rejected from the header alone.
  write_file_bytes(dir.file("huge"),
                   idx_header(0x0D, {0xffffffff, 0xffffffff, 0xffffffff, 2}) + "abc");
  EXPECT_NE(error_of([&] { read_idx(dir.file("huge")); }).find("more than the 2 GiB limit"),
            std::string::npos);
  // Under the cap (1.5 GiB), but the data is not there: raw and gzip both fail early.
  std::string claim = idx_header(0x08, {3, 1024, 512, 1024}) + std::string(100, '\0');
  write_file_bytes(dir.file("big.raw"), claim);
  write_gzip(dir.file("big.gz"), claim);
  EXPECT_NE(error_of([&] { read_idx(dir.file("big.raw")); }).find("truncated"), std::string::npos);
  // The gzip stream is refused before inflating: 100-odd compressed bytes cannot hold 1.5 GiB.
  EXPECT_NE(error_of([&] { read_idx(dir.file("big.gz")); }).find("cannot hold"),
            std::string::npos);
  // A 1.5 GiB zero-filled allocation would have raised the peak far above this.
  EXPECT_LT(peak_rss_kb() - rss_before, 256 * 1024);
}

// Writes an MNIST-style folder: `n` images of h x w and `labels` (gzipped when `gzip`).
void write_split(const std::string& dir, const std::string& prefix, uint32_t n, uint32_t h,
                 uint32_t w, const std::vector<uint8_t>& labels, bool gzip) {
  std::vector<uint8_t> pixels(static_cast<size_t>(n) * h * w);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i % 256);
  std::string suffix = gzip ? ".gz" : "";
  auto write = gzip ? write_gzip : write_file_bytes;
  write(dir + "/" + prefix + "-images-idx3-ubyte" + suffix, u8_idx({n, h, w}, pixels));
  write(dir + "/" + prefix + "-labels-idx1-ubyte" + suffix,
        u8_idx({static_cast<uint32_t>(labels.size())}, labels));
}

TEST(IoDatasetLoadTest, LoadsAFolderOfRawAndGzipFiles) {
  TempDir dir;
  write_split(dir.str(), "train", 4, 3, 2, {0, 9, 3, 3}, /*gzip=*/true);
  write_split(dir.str(), "t10k", 2, 3, 2, {1, 2}, /*gzip=*/false);
  DataSplit split = load_dataset(dir.str());
  EXPECT_EQ(split.train.size(), 4);
  EXPECT_EQ(split.test.size(), 2);
  EXPECT_EQ(split.train.classes, 10);
  ASSERT_EQ(split.train.images.shape(), (Shape{4, 3, 2, 1}));
  // Kept as bytes; an example reads as pixel / 255.
  ASSERT_EQ(split.train.images.dtype(), DType::u8);
  EXPECT_EQ(split.train.images.data<uint8_t>()[23], 23);
  std::vector<float> last(6);
  copy_example(split.train, 3, {}, 0, 0, last.data());
  EXPECT_EQ(last[0], 18 / 255.0f);
  EXPECT_EQ(last[5], 23 / 255.0f);
  EXPECT_EQ(example_image(split.train, 3).pixels, (std::vector<uint8_t>{18, 19, 20, 21, 22, 23}));
  ASSERT_EQ(split.train.labels.dtype(), DType::i32);
  EXPECT_EQ(split.train.labels.data<int32_t>()[1], 9);
  EXPECT_EQ(split.test.labels.data<int32_t>()[1], 2);

  Dataset two = take(split.train, 2);
  EXPECT_EQ(two.size(), 2);
  EXPECT_EQ(two.images.shape(), (Shape{2, 3, 2, 1}));
  EXPECT_EQ(two.labels.data<int32_t>()[1], 9);
  EXPECT_EQ(take(split.train, 100).size(), 4);
  EXPECT_NE(two.images.raw(), split.train.images.raw());  // a copy

  // rows() is a view: examples 1..2 over the same memory.
  Dataset middle = rows(split.train, 1, 3);
  EXPECT_EQ(middle.images.shape(), (Shape{2, 3, 2, 1}));
  EXPECT_EQ(middle.images.data<uint8_t>(), split.train.images.data<uint8_t>() + 6);
  EXPECT_EQ(middle.labels.data<int32_t>()[0], 9);
  EXPECT_EQ(rows(split.train, 4, 4).size(), 0);
  EXPECT_NE(error_of([&] { rows(split.train, 2, 5); }).find("rows [2, 5) of a tensor [4,3,2,1]"),
            std::string::npos);
}

TEST(IoDatasetLoadTest, CountMismatchNamesBothCounts) {
  TempDir dir;
  write_split(dir.str(), "train", 4, 2, 2, {0, 1, 2}, false);
  write_split(dir.str(), "t10k", 1, 2, 2, {1}, false);
  std::string images = dir.file("train-images-idx3-ubyte");
  std::string labels = dir.file("train-labels-idx1-ubyte");
  EXPECT_EQ(error_of([&] { load_dataset(dir.str()); }),
            images + ": 4 images but 3 labels (" + labels + ")");
}

TEST(IoDatasetLoadTest, LabelOutOfRange) {
  TempDir dir;
  write_split(dir.str(), "train", 2, 2, 2, {0, 10}, false);
  write_split(dir.str(), "t10k", 1, 2, 2, {1}, false);
  EXPECT_EQ(error_of([&] { load_dataset(dir.str()); }),
            dir.file("train-labels-idx1-ubyte") +
                ": label 10 at index 1 is out of range (expected 0 to 9)");
}

TEST(IoDatasetLoadTest, MissingFileAndUnknownSpec) {
  TempDir dir;
  write_split(dir.str(), "train", 2, 2, 2, {0, 1}, false);
  EXPECT_NE(error_of([&] { load_dataset(dir.str()); }).find("missing t10k-images-idx3-ubyte"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { load_dataset("cifar-11"); }),
            "dataset 'cifar-11': not 'mnist', 'fashion-mnist' or a folder of MNIST-style IDX "
            "files");
}

TEST(IoDatasetLoadTest, DataDirEnvironmentVariableComesFirst) {
  TempDir dir;
  fs::create_directories(dir.file("mnist"));
  write_split(dir.file("mnist"), "train", 3, 2, 2, {4, 5, 6}, false);
  write_split(dir.file("mnist"), "t10k", 1, 2, 2, {7}, false);
  const char* old = std::getenv("SLIMFLOW_DATA_DIR");
  std::string saved = old ? old : "";
  setenv("SLIMFLOW_DATA_DIR", dir.str().c_str(), 1);
  DataSplit split = load_dataset("mnist");
  if (old != nullptr) {
    setenv("SLIMFLOW_DATA_DIR", saved.c_str(), 1);
  } else {
    unsetenv("SLIMFLOW_DATA_DIR");
  }
  EXPECT_EQ(split.train.size(), 3);
  EXPECT_EQ(split.test.labels.data<int32_t>()[0], 7);
}

// Loads a named data set, skipping the test when it is not installed.
bool load_or_skip(const std::string& name, DataSplit* split) {
  try {
    *split = load_dataset(name);
    return true;
  } catch (const Error& e) {
    if (std::string(e.what()).find("not found") == std::string::npos) throw;
    return false;
  }
}

TEST(IoDatasetLoadTest, RealMnistWhenInstalled) {
  DataSplit split;
  if (!load_or_skip("mnist", &split)) GTEST_SKIP() << "MNIST is not installed";
  EXPECT_EQ(split.train.images.shape(), (Shape{60000, 28, 28, 1}));
  EXPECT_EQ(split.test.images.shape(), (Shape{10000, 28, 28, 1}));
  EXPECT_EQ(split.train.labels.data<int32_t>()[0], 5);
  EXPECT_EQ(split.test.labels.data<int32_t>()[0], 7);
}

// Reads the smaller real gzip files only: the full load is what RealMnistWhenInstalled covers.
TEST(IoDatasetLoadTest, RealFashionMnistFilesWhenInstalled) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  if (!fs::exists(dir + "t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  Tensor images = read_idx(dir + "t10k-images-idx3-ubyte.gz");
  Tensor labels = read_idx(dir + "train-labels-idx1-ubyte.gz");
  EXPECT_EQ(images.shape(), (Shape{10000, 28, 28}));
  EXPECT_EQ(labels.shape(), (Shape{60000}));
  EXPECT_EQ(labels.data<uint8_t>()[0], 9);  // an ankle boot
}

}  // namespace
}  // namespace sf
