// The shared limits (core/limits.h) and where they bite: element counts without overflow, the
// memory budget on tensor storage, bounded window geometry, and stale-temporary cleanup.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "core/limits.h"
#include "core/tensor.h"
#include "io/atomic_file.h"
#include "ops/conv_geometry.h"
#include "support/temp_files.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

TEST(LimitsTest, ElementCountsNeverOverflow) {
  EXPECT_EQ(limits::checked_num_elements({2, 3, 4}, "t"), 24);
  EXPECT_EQ(limits::checked_num_elements({}, "t"), 1);
  // A zero dimension counts as 1 in the bound, so no partial product can overflow either.
  EXPECT_EQ(limits::checked_num_elements({0, int64_t{1} << 30}, "t"), 0);
  testing::expect_error([] { limits::checked_num_elements({0, int64_t{1} << 62}, "x"); },
                        "has more than");
  testing::expect_error([] { limits::checked_num_elements({int64_t{1} << 62, int64_t{1} << 62}, "x"); },
                        "x [4611686018427387904,4611686018427387904] has more than");
  testing::expect_error([] { limits::checked_num_elements({1, int64_t{1} << 31, int64_t{1} << 31, 3}, "x"); },
                        "has more than 1099511627776 elements");
  testing::expect_error([] { limits::checked_num_elements(Shape(17, 1), "x"); }, "rank 17");
  testing::expect_error([] { limits::checked_num_elements({2, -1}, "x"); }, "negative");
}

TEST(LimitsTest, ParsesByteSizes) {
  EXPECT_EQ(limits::parse_byte_size("512M", "f"), uint64_t{512} << 20);
  EXPECT_EQ(limits::parse_byte_size("2G", "f"), uint64_t{2} << 30);
  EXPECT_EQ(limits::parse_byte_size("1.5GiB", "f"), uint64_t{3} << 29);
  EXPECT_EQ(limits::parse_byte_size("4096", "f"), 4096u);
  testing::expect_error([] { limits::parse_byte_size("lots", "--max-memory"); }, "--max-memory 'lots'");
  testing::expect_error([] { limits::parse_byte_size("5X", "--max-memory"); }, "unknown unit");
  testing::expect_error([] { limits::parse_byte_size("-1G", "--max-memory"); }, "positive");
}

TEST(LimitsTest, TensorStorageStaysWithinTheMemoryBudget) {
  const uint64_t before = limits::memory_budget();
  limits::set_memory_budget(uint64_t{64} << 20);
  Tensor small(DType::f32, {1024, 1024});  // 4 MiB: fits
  testing::expect_error([] { Tensor big(DType::f32, {1 << 14, 1 << 14}); },
                        "needs 1.0 GiB, more than the memory budget of 64.0 MiB");
  limits::set_memory_budget(before);
}

// Small storages come from malloc and are zeroed by hand; from 2 MiB up they are mapped pages.
// Either way they are zeroed, aligned, writable to the last byte, and give their bytes back to
// the budget when freed: 40 rounds of 13 MiB pass a 64 MiB budget only if each is returned.
TEST(LimitsTest, StoragesOfEverySizeAreZeroedAlignedAndReturnedToTheBudget) {
  const uint64_t before = limits::memory_budget();
  limits::set_memory_budget(uint64_t{64} << 20);
  const size_t mib = size_t{1} << 20;
  for (int round = 0; round < 40; ++round)
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, 2 * mib - 1, 2 * mib, 2 * mib + 1,
                         13 * mib + 7}) {
      std::shared_ptr<Storage> s = Storage::allocate(bytes);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(s->data()) % kTensorAlignment, 0u);
      const auto* b = static_cast<const unsigned char*>(s->data());
      for (size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(b[i], 0) << bytes << " bytes, at " << i;
      if (bytes > 0) {
        ASSERT_EQ(b[bytes - 1], 0);
        std::memset(s->data(), 0xab, bytes);
      }
    }
  limits::set_memory_budget(before);
}

TEST(LimitsTest, WindowPaddingIsBounded) {
  WindowAttrs a{.window = {3, 3}, .strides = {1, 1}, .dilations = {36, 36}, .padding = "SAME",
                .pads = {0, 0, 0, 0}};
  Window2D g;
  // DeepLab's atrous rate 36 on a 33x33 map: legitimate.
  EXPECT_EQ(window_2d(33, 33, 3, 3, a, &g), "");
  EXPECT_EQ(g.h.out, 33);
  a.dilations = {1 << 20, 1 << 20};
  EXPECT_NE(window_2d(28, 28, 3, 3, a, &g).find("exceeds 32768"), std::string::npos);
  a.dilations = {int64_t{1} << 62, 1};
  EXPECT_NE(window_2d(28, 28, 3, 3, a, &g).find("spans more than"), std::string::npos);
  a.dilations = {1, 1};
  a.strides = {int64_t{1} << 62, 1};
  EXPECT_EQ(window_2d(28, 28, 3, 3, a, &g), "");
  EXPECT_EQ(g.h.out, 1);
  a.strides = {1, 1};
  a.padding = "EXPLICIT";
  a.pads = {int64_t{1} << 40, 0, 0, 0};
  EXPECT_NE(window_2d(28, 28, 3, 3, a, &g).find("pads"), std::string::npos);
}

TEST(LimitsTest, ThreadsAreBounded) {
  limits::check_threads(0, "t");
  limits::check_threads(limits::kMaxThreads, "t");
  testing::expect_error([] { limits::check_threads(100000, "--threads"); },
                        "--threads: 100000 threads requested");
  testing::expect_error([] { limits::check_threads(-5, "--threads"); }, "-5 threads");
}

TEST(AtomicFileTest, RemovesStaleTemporariesOfDeadWriters) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sf-stale-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string target = (dir / "model.sfm").string();
  // pid 999999999 does not exist; our own pid does; another target's temporary is not ours.
  const std::string dead = target + ".tmp-999999999-0";
  const std::string alive = target + ".tmp-" + std::to_string(::getpid()) + "-77";
  const std::string other = (dir / "other.sfm.tmp-999999999-0").string();
  for (const std::string& p : {dead, alive, other}) std::ofstream(p) << "x";
  AtomicFile file(target, "model");
  file.write("abc", 3);
  file.commit();
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(alive));
  EXPECT_TRUE(std::filesystem::exists(other));
  std::filesystem::remove_all(dir);
}

TEST(AtomicFileTest, WritesPipesAndDevicesDirectlyAndReplacesWhatALinkNames) {
  const testing::TempDir dir("sf-atomic-kinds");
  // A FIFO opened for reading first (without blocking), so the writer's open does not wait;
  // "abc" fits the pipe's buffer. Renaming over it would leave a plain file and no bytes here.
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  {
    AtomicFile file(fifo, "model");
    file.write("abc", 3);
    file.commit();
  }
  char got[8] = {};
  EXPECT_EQ(::read(reader, got, sizeof(got)), 3);
  EXPECT_EQ(std::string(got, 3), "abc");
  ::close(reader);
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));

  // Through a link the file it names gets the new bytes; the link stays a link.
  const std::string real = dir.file("real.sfm"), link = dir.file("link.sfm");
  std::ofstream(real) << "old";
  std::filesystem::create_symlink(real, link);
  {
    AtomicFile file(link, "model");
    file.write("new", 3);
    file.commit();
  }
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  std::ifstream in(real);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "new");
  // A link to a file not there yet creates it, as the shell's `>` does.
  const std::string dangling = dir.file("dangling.sfm");
  std::filesystem::create_symlink("later.sfm", dangling);
  {
    AtomicFile file(dangling, "model");
    file.write("new", 3);
    file.commit();
  }
  EXPECT_TRUE(std::filesystem::is_symlink(dangling));
  EXPECT_EQ(std::filesystem::file_size(dir.file("later.sfm")), 3u);
  // Two links naming each other: an error, and both links stay (the rename would replace one).
  const std::string loop_a = dir.file("a.sfm"), loop_b = dir.file("b.sfm");
  std::filesystem::create_symlink("b.sfm", loop_a);
  std::filesystem::create_symlink("a.sfm", loop_b);
  testing::expect_error([&] { AtomicFile file(loop_a, "model"); },
                        loop_a + ": cannot write model: too many levels of symbolic links");
  EXPECT_EQ(std::filesystem::read_symlink(loop_a), "b.sfm");
  EXPECT_EQ(std::filesystem::read_symlink(loop_b), "a.sfm");

  testing::expect_error([&] { AtomicFile file(dir.str(), "model"); },
                        ": cannot write model: it is a folder");
}

// A check that refuses what was written leaves the target as it was, and no temporary; into a
// pipe, the bytes are staged and only a checked file reaches it.
TEST(AtomicFileTest, ACheckThatFailsLeavesTheTargetAndThePipeUntouched) {
  const testing::TempDir dir("sf-atomic-check");
  const auto refuse = [](const std::string& written) {
    std::ifstream in(written);
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    if (bytes != "good") fail("{}: holds '{}'", written, bytes);
  };
  const auto write = [&](const std::string& path, const std::string& bytes) {
    AtomicFile file(path, "model", refuse);
    file.write(bytes.data(), bytes.size());
    file.commit();
  };
  const std::string target = dir.file("model.sfm");
  std::ofstream(target) << "old";
  testing::expect_error([&] { write(target, "bad"); }, "holds 'bad'");
  std::ifstream in(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "old");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.str()), {}), 1);

  // Staged in TMPDIR, where a writer killed earlier left its file.
  const std::string fifo = dir.file("fifo"), killed = dir.file("slimflow-staged.tmp-999999999-0");
  std::ofstream(killed) << "x";
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string saved_tmpdir = tmpdir != nullptr ? tmpdir : "";
  ::setenv("TMPDIR", dir.str().c_str(), 1);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  testing::expect_error([&] { write(fifo, "bad"); }, "holds 'bad'");
  char got[8] = {};
  EXPECT_LE(::read(reader, got, sizeof(got)), 0);
  write(fifo, "good");
  EXPECT_EQ(::read(reader, got, sizeof(got)), 4);
  EXPECT_EQ(std::string(got, 4), "good");
  ::close(reader);
  if (tmpdir != nullptr)
    ::setenv("TMPDIR", saved_tmpdir.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  EXPECT_FALSE(std::filesystem::exists(killed));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.str()), {}), 2);  // + fifo

  testing::expect_error([&] { write(dir.file("no/such/model.sfm"), "good"); },
                        ": cannot write model: folder " + dir.file("no/such") + " does not exist");
}

}  // namespace
}  // namespace sf
