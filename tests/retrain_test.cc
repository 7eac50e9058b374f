// Transfer learning: the split of images by name, the bottleneck cache file, and `slimflow
// retrain` end to end on tiny generated images and a tiny base model.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "io/bottleneck_cache.h"
#include "io/image.h"
#include "io/image_folder.h"
#include "modelfile/model_file.h"
#include "ops/ops.h"
#include "support/cli.h"
#include "support/temp_files.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

namespace fs = std::filesystem;
using testing::expect_one_line_error;
using testing::run_cli;

const char* const kLabels[] = {"left", "right", "top"};

// A `side` x `side` gray image of label k (a bright left, right or top half) with noise.
void write_example(const std::string& path, int label, uint32_t seed, int64_t w = 12, int64_t h = 10) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> noise(0, 60);
  std::vector<uint8_t> px(static_cast<size_t>(w * h));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const bool bright = label == 0 ? x < w / 2 : label == 1 ? x >= w / 2 : y < h / 2;
      px[static_cast<size_t>(y * w + x)] = static_cast<uint8_t>((bright ? 190 : 0) + noise(rng));
    }
  write_png(path, px.data(), w, h);
}

void write_folder(const std::string& root, int per_label, int first = 0) {
  for (int k = 0; k < 3; ++k) {
    fs::create_directories(fs::path(root) / kLabels[k]);
    for (int i = first; i < first + per_label; ++i)
      write_example((fs::path(root) / kLabels[k] / ("img" + std::to_string(i) + ".png")).string(), k,
                    static_cast<uint32_t>(100 * k + i));
  }
}

// input [1,8,8,1] -> flatten -> dense 16 + relu ("features") -> dense 3 -> probabilities.
std::string write_base(const std::string& path, uint32_t seed) {
  ModelFile model;
  Graph& g = model.graph;
  Output x = ops::placeholder(g, DType::f32, {1, 8, 8, 1}, "input");
  Output flat = ops::flatten(g, x, 1, "flatten");
  Output features = ops::relu(
      g, ops::matmul(g, flat, ops::constant(g, testing::random_tensor({64, 16}, seed)), false, false, "fc1"),
      "features");
  Output logits = ops::matmul(g, features, ops::constant(g, testing::random_tensor({16, 3}, seed + 1)),
                              false, false, "fc2");
  ops::softmax(g, logits, "probabilities");
  model.inputs = {"input"};
  model.outputs = {"probabilities"};
  save_model(path, model);
  return path;
}

// An IDX data set of 8x8 images of the three patterns: `train` and `test` images.
void write_idx_set(const std::string& dir, int train, int test) {
  auto write = [&](const std::string& prefix, int count, uint32_t seed) {
    std::ofstream images(dir + "/" + prefix + "-images-idx3-ubyte", std::ios::binary);
    std::ofstream labels(dir + "/" + prefix + "-labels-idx1-ubyte", std::ios::binary);
    const unsigned char n = static_cast<unsigned char>(count);
    const unsigned char image_header[] = {0, 0, 8, 3, 0, 0, 0, n, 0, 0, 0, 8, 0, 0, 0, 8};
    const unsigned char label_header[] = {0, 0, 8, 1, 0, 0, 0, n};
    images.write(reinterpret_cast<const char*>(image_header), sizeof image_header);
    labels.write(reinterpret_cast<const char*>(label_header), sizeof label_header);
    for (int i = 0; i < count; ++i) {
      const std::string png = dir + "/tmp.png";
      write_example(png, i % 3, seed + static_cast<uint32_t>(i), 8, 8);
      const Image img = decode_image(png);
      images.write(reinterpret_cast<const char*>(img.pixels.data()), 64);
      labels.put(static_cast<char>(i % 3));
    }
    fs::remove(dir + "/tmp.png");
  };
  write("train", train, 1000);
  write("t10k", test, 2000);
}

nlohmann::json last_json(const std::string& out) {
  const std::vector<std::string> lines = testing::non_empty_lines(out);
  EXPECT_FALSE(lines.empty());
  return lines.empty() ? nlohmann::json() : nlohmann::json::parse(lines.back());
}

TEST(ImageSplit, DependsOnTheNameAloneSoAddingImagesMovesNoOldOne) {
  const std::string dir = testing::make_temp_dir("sf-split");
  write_folder(dir, 20);
  auto splits = [&] {
    std::map<std::string, Split> s;
    for (const LabeledImage& img : list_image_folder(dir).images)
      s[img.name] = split_of(img.name, 20.0, 20.0);
    return s;
  };
  const std::map<std::string, Split> before = splits();
  ASSERT_EQ(before.size(), 60u);
  write_folder(dir, 30, 20);
  const std::map<std::string, Split> after = splits();
  ASSERT_EQ(after.size(), 150u);
  for (const auto& [name, split] : before) EXPECT_EQ(after.at(name), split) << name;
  // The shares are the requested ones, roughly.
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 10000; ++i) ++counts[static_cast<int>(split_of("x/" + std::to_string(i), 20, 10))];
  EXPECT_NEAR(counts[static_cast<int>(Split::kTrain)], 7000, 300);
  EXPECT_NEAR(counts[static_cast<int>(Split::kValidation)], 2000, 300);
  EXPECT_NEAR(counts[static_cast<int>(Split::kTest)], 1000, 300);
  testing::expect_error([] { split_of("a", 60, 40); }, "leave nothing to train on");
  fs::remove_all(dir);
}

TEST(ImageFolderList, RejectsMissingEmptyAndLabelFreeFolders) {
  const std::string dir = testing::make_temp_dir("sf-folder");
  testing::expect_error([&] { list_image_folder(dir + "/missing"); }, "no such image folder");
  testing::expect_error([&] { list_image_folder(dir); }, "0 label subfolders");
  write_folder(dir, 2);
  fs::create_directories(dir + "/empty");
  std::ofstream(dir + "/empty/notes.txt") << "no images here";
  testing::expect_error([&] { list_image_folder(dir); }, "label folder 'empty' holds no image");
  fs::remove_all(dir);
}

TEST(BottleneckCacheFile, RoundTripsAndIgnoresFilesForAnotherKeyOrTorn) {
  const std::string dir = testing::make_temp_dir("sf-bcache");
  const std::string path = dir + "/cache";
  const BottleneckKey key{.model_hash = 42, .node = "features", .dim = 3};
  const std::vector<uint64_t> hashes = {7, 3, 11};
  const std::vector<float> rows = {7, 7, 7, 3, 3, 3, 11, 11, 11};
  write_bottleneck_cache(path, key, hashes, [&](size_t i) { return rows.data() + 3 * i; });
  {
    const BottleneckCache cache = BottleneckCache::open(path, key);
    EXPECT_EQ(cache.stale_reason(), "");
    ASSERT_EQ(cache.size(), 3);
    for (uint64_t h : hashes) {
      ASSERT_NE(cache.find(h), nullptr);
      EXPECT_EQ(cache.find(h)[2], static_cast<float>(h));
    }
    EXPECT_EQ(cache.find(5), nullptr);
  }

  EXPECT_EQ(BottleneckCache::open(dir + "/none", key).stale_reason(), "");
  EXPECT_EQ(BottleneckCache::open(dir + "/none", key).size(), 0);
  BottleneckKey other = key;
  other.model_hash = 43;
  EXPECT_NE(BottleneckCache::open(path, other).stale_reason().find("another base model"),
            std::string::npos);
  other = key;
  other.node = "fc1";
  EXPECT_NE(BottleneckCache::open(path, other).stale_reason().find("node 'features'"),
            std::string::npos);

  // A writer that dies part-way (here: an exception while rows are written) leaves the old file.
  EXPECT_THROW(write_bottleneck_cache(path, key, {1, 2, 3},
                                      [&](size_t i) -> const float* {
                                        if (i == 1) throw std::runtime_error("killed");
                                        return rows.data();
                                      }),
               std::runtime_error);
  EXPECT_EQ(BottleneckCache::open(path, key).size(), 3);
  EXPECT_NE(BottleneckCache::open(path, key).find(11), nullptr);

  // Torn or foreign bytes are never trusted.
  const auto size = fs::file_size(path);
  fs::resize_file(path, size - 5);
  EXPECT_NE(BottleneckCache::open(path, key).stale_reason().find("truncated"), std::string::npos);
  EXPECT_EQ(BottleneckCache::open(path, key).size(), 0);
  std::ofstream(path, std::ios::binary) << "garbage";
  EXPECT_NE(BottleneckCache::open(path, key).stale_reason(), "");
  fs::remove_all(dir);
}

TEST(BottleneckCacheFile, AProcessKilledWhileWritingLeavesTheOldFile) {
  const std::string dir = testing::make_temp_dir("sf-bcache-kill");
  const std::string path = dir + "/cache";
  const BottleneckKey key{.model_hash = 1, .node = "n", .dim = 1024};
  const std::vector<float> row(1024, 0.5f);
  write_bottleneck_cache(path, key, {1, 2}, [&](size_t) { return row.data(); });
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Dies by SIGKILL with half of a bigger cache written.
    std::vector<uint64_t> more(200);
    for (size_t i = 0; i < more.size(); ++i) more[i] = i + 10;
    write_bottleneck_cache(path, key, more, [&](size_t i) {
      if (i == 100) ::kill(::getpid(), SIGKILL);
      return row.data();
    });
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  {
    const BottleneckCache cache = BottleneckCache::open(path, key);
    EXPECT_EQ(cache.stale_reason(), "");
    EXPECT_EQ(cache.size(), 2);
  }
  // The killed writer's temporary goes with the next write.
  auto temporaries = [&] {
    int n = 0;
    for (const fs::directory_entry& e : fs::directory_iterator(dir))
      n += e.path().filename().string().find(".tmp-") != std::string::npos;
    return n;
  };
  EXPECT_EQ(temporaries(), 1);
  write_bottleneck_cache(path, key, {3}, [&](size_t) { return row.data(); });
  EXPECT_EQ(temporaries(), 0);
  EXPECT_EQ(BottleneckCache::open(path, key).size(), 1);
  fs::remove_all(dir);
}

class RetrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("sf-retrain");
    images_ = dir_ + "/images";
    write_folder(images_, 10);
    base_ = write_base(dir_ + "/base.sfm", 5);
  }
  void TearDown() override { fs::remove_all(dir_); }

  nlohmann::json retrain(const std::string& out, const std::string& extra = "") {
    const testing::CliResult r =
        run_cli("retrain --base " + base_ + " --bottleneck features --images " + images_ +
                    " --cache " + dir_ + "/bottlenecks.cache --out " + dir_ + "/" + out +
                    " --epochs 50 --lr 0.02 --seed 1 --threads 1 --json --quiet --overwrite " + extra,
                false);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return last_json(r.out);
  }

  std::string dir_, images_, base_;
};

TEST_F(RetrainCli, CacheIsReusedAndRebuiltOnlyForWhatChanged) {
  nlohmann::json first = retrain("a");
  EXPECT_EQ(first["images"], 30);
  EXPECT_EQ(first["bottlenecks_computed"], 30);
  EXPECT_GT(first["base_model_runs"].get<int64_t>(), 0);

  // Another run on the same images: the base model never runs.
  nlohmann::json second = retrain("b", "--hidden 8");
  EXPECT_EQ(second["bottlenecks_computed"], 0);
  EXPECT_EQ(second["bottlenecks_reused"], 30);
  EXPECT_EQ(second["base_model_runs"], 0);

  // One image edited, one added: two rows computed.
  write_example(images_ + "/left/img0.png", 0, 9999);
  write_example(images_ + "/top/new.png", 2, 4242);
  nlohmann::json third = retrain("c");
  EXPECT_EQ(third["bottlenecks_computed"], 2);
  EXPECT_EQ(third["bottlenecks_reused"], 29);

  // Another base model: everything again.
  write_base(base_, 6);
  nlohmann::json fourth = retrain("d");
  EXPECT_EQ(fourth["bottlenecks_computed"], 31);
  EXPECT_EQ(fourth["bottlenecks_reused"], 0);
}

TEST_F(RetrainCli, TakesAnIdxDataSetKeepingItsTestSplit) {
  const std::string idx = dir_ + "/idx";
  fs::create_directories(idx);
  write_idx_set(idx, 30, 9);
  const std::string args = "retrain --base " + base_ + " --bottleneck features --data " + idx +
                           " --out " + dir_ + "/idx-run --epochs 5 --threads 1 --json --overwrite";
  const testing::CliResult first = run_cli(args);  // with the progress lines on stderr
  ASSERT_EQ(first.exit_code, 0) << first.out;
  EXPECT_NE(first.out.find("bottlenecks 39/39 (100%)"), std::string::npos) << first.out;
  const nlohmann::json summary = last_json(run_cli(args, false).out);
  EXPECT_EQ(summary["images"], 39);
  EXPECT_EQ(summary["test"], 9);
  EXPECT_EQ(summary["bottlenecks_computed"], 0);
  EXPECT_EQ(summary["bottlenecks_reused"], 39);
  EXPECT_EQ(load_model(dir_ + "/idx-run/model.sfm").metadata.at("labels"),
            R"(["0","1","2","3","4","5","6","7","8","9"])");
}

TEST_F(RetrainCli, FrozenModelClassifiesWithItsStoredLabelsAndPreprocessing) {
  nlohmann::json summary = retrain("run");
  const std::string model = dir_ + "/run/model.sfm";
  ASSERT_TRUE(fs::exists(model));
  const ModelFile file = load_model(model);
  EXPECT_EQ(file.metadata.at("labels"), R"(["left","right","top"])");
  EXPECT_EQ(file.metadata.at("input_std"), "255");
  EXPECT_EQ(file.metadata.at("input_channel_order"), "gray");
  EXPECT_EQ(file.metadata.at("input_width"), "8");
  // eval finds the same test split in the folder, and the labels by name.
  int64_t test_images = 0;
  for (const LabeledImage& img : list_image_folder(images_).images)
    test_images += split_of(img.name, 10, 10) == Split::kTest;
  const testing::CliResult ev =
      run_cli("eval --model " + model + " --images " + images_ + " --json --threads 1", false);
  ASSERT_EQ(ev.exit_code, 0) << ev.out;
  EXPECT_EQ(last_json(ev.out)["count"], test_images);
  EXPECT_EQ(summary["test"], test_images);
  // A new 16x16 image of each label, resized by classify as retrain resized its images.
  for (int k = 0; k < 3; ++k) {
    const std::string image = dir_ + "/query" + std::to_string(k) + ".png";
    write_example(image, k, 777 + static_cast<uint32_t>(k), 16, 16);
    const testing::CliResult r = run_cli("classify --model " + model + " --image " + image + " --top 1", false);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out.rfind(std::string(kLabels[k]) + " (" + std::to_string(k) + "): ", 0), 0u) << r.out;
  }
}

TEST_F(RetrainCli, FineTuneTrainsTheBaseWeightsAfterTheNodeAndKeepsTheOthers) {
  nlohmann::json summary = retrain("ft", "--fine-tune-from flatten --fine-tune-batch 8 --fine-tune-lr 0.001");
  ASSERT_TRUE(summary.contains("fine_tune")) << summary.dump();
  // fc1's weights [64, 16] and the head's dense layer [16, 3] + [3].
  EXPECT_EQ(summary["fine_tune"]["weights"], 64 * 16 + 16 * 3 + 3);
  EXPECT_GT(summary["fine_tune"]["steps"].get<int64_t>(), 0);
  const ModelFile base = load_model(base_);
  const ModelFile tuned = load_model(dir_ + "/ft/model.sfm");
  auto weights_of = [](const ModelFile& m, const std::string& reader) {
    return m.graph.node(m.graph.node(m.graph.id_of(reader)).inputs.at(1).node).attrs.get_tensor("value");
  };
  EXPECT_NE(testing::values<float>(weights_of(base, "fc1")), testing::values<float>(weights_of(tuned, "fc1")));
  const testing::CliResult r =
      run_cli("classify --model " + dir_ + "/ft/model.sfm --image " + images_ + "/top/img1.png --top 1", false);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  expect_one_line_error("retrain --base " + base_ + " --bottleneck features --images " + images_ +
                            " --out " + dir_ + "/ft2 --quiet --fine-tune-from nowhere",
                        {base_, "--fine-tune-from", "no node named 'nowhere'"});
  expect_one_line_error("retrain --base " + base_ + " --bottleneck features --images " + images_ +
                            " --out " + dir_ + "/ft2 --quiet --fine-tune-from fc2",
                        {"--fine-tune-from 'fc2' is not on the way to node 'features'"});
}

TEST_F(RetrainCli, AnInt8BaseComputesTheBottlenecksInInt8) {
  const std::string base8 = dir_ + "/base8.sfm";
  const testing::CliResult q = run_cli("quantize " + base_ + " --mode eightbit --out " + base8);
  ASSERT_EQ(q.exit_code, 0) << q.out;
  const testing::CliResult r = run_cli("retrain --base " + base8 + " --bottleneck fc1 --images " + images_ +
                                           " --out " + dir_ + "/r8 --epochs 3 --threads 1 --json --quiet",
                                       false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(last_json(r.out)["bottlenecks_computed"], 30);
  // The deployed model reads the int8 layer's result through a Dequantize.
  const ModelFile model = load_model(dir_ + "/r8/model.sfm");
  EXPECT_GE(model.graph.find("fc1/dequantize"), 0);
  EXPECT_EQ(model.graph.node(model.graph.id_of("fc1/quantized")).op, "Requantize");
  // Its integer layers cannot fine-tune: said before any work.
  const testing::CliResult ft = run_cli("retrain --base " + base8 + " --bottleneck fc1 --images " +
                                        images_ + " --out " + dir_ + "/r8ft --fine-tune-from input");
  EXPECT_NE(ft.exit_code, 0);
  const std::vector<std::string> lines = testing::non_empty_lines(ft.out);
  ASSERT_EQ(lines.size(), 1u) << ft.out;
  EXPECT_NE(lines[0].find("after it cannot train (no gradient)"), std::string::npos) << ft.out;
}

TEST_F(RetrainCli, CacheSurvivesAKillAndTheNextRunCompletesIt) {
  // Killed at some point of its work (before, while or after writing the cache): whatever it
  // left must read as a valid cache or none, and the next run must finish the job.
  const std::string cache = dir_ + "/bottlenecks.cache";
  testing::run_shell("timeout -s KILL 0.3 " + std::string(SLIMFLOW_CLI) + " retrain --base " + base_ +
                     " --bottleneck features --images " + images_ + " --cache " + cache +
                     " --out " + dir_ + "/killed --threads 1 --quiet");
  const BottleneckCache left =
      BottleneckCache::open(cache, BottleneckKey{.model_hash = hash_file(base_), .node = "features", .dim = 16});
  EXPECT_EQ(left.stale_reason(), "");
  nlohmann::json next = retrain("after");
  EXPECT_EQ(next["bottlenecks_computed"].get<int64_t>() + next["bottlenecks_reused"].get<int64_t>(), 30);
  for (const fs::directory_entry& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST_F(RetrainCli, BadInputIsOneLineError) {
  const std::string common = " --cache " + dir_ + "/c --out " + dir_ + "/bad --quiet";
  expect_one_line_error("retrain --base " + base_ + " --bottleneck features --images " + dir_ +
                            "/missing" + common,
                        {dir_ + "/missing", "no such image folder"});
  expect_one_line_error("retrain --base " + base_ + " --bottleneck nothing --images " + images_ + common,
                        {base_, "no node named 'nothing'"});
  expect_one_line_error("retrain --base " + dir_ + "/none.sfm --bottleneck features --images " +
                            images_ + common,
                        {"none.sfm", "no such base model"});
  fs::create_directories(images_ + "/empty");
  expect_one_line_error("retrain --base " + base_ + " --bottleneck features --images " + images_ + common,
                        {"label folder 'empty' holds no image"});
  fs::remove(images_ + "/empty");
  std::ofstream(images_ + "/top/broken.png") << "not a png at all";
  expect_one_line_error("retrain --base " + base_ + " --bottleneck features --images " + images_ + common,
                        {"broken.png", "not an image"});
  fs::remove(images_ + "/top/broken.png");
  // Named by the flag, not by the head spec retrain writes from it.
  expect_one_line_error("retrain --base " + base_ + " --bottleneck features --images " + images_ +
                            common + " --hidden 4000000000000",
                        {"--hidden 4000000000000", "more than the limit of"});
}

}  // namespace
}  // namespace sf
