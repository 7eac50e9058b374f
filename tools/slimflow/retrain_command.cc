// `slimflow retrain`: transfer learning. Each image's output at a node of a base model (its
// "bottleneck") is computed once into a memory-mapped cache (io/bottleneck_cache.h); a new
// dense + softmax head trains on the cache, and the result runs the base model up to the node
// and the head after it, with its labels and preprocessing in its metadata.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>

#include "commands.h"
#include "core/limits.h"
#include "io/atomic_file.h"
#include "io/bottleneck_cache.h"
#include "io/dataset.h"
#include "io/image.h"
#include "io/image_folder.h"
#include "model_io.h"
#include "progress.h"
#include "train/freeze_run.h"
#include "train/retrain_model.h"
#include "train/training_run.h"
#include "train_flags.h"

namespace sf::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Rows computed since the last write are lost if the process dies: write every so often.
constexpr double kCacheWriteSeconds = 30.0;
constexpr int64_t kBaseBatch = 64;

struct Example {
  std::string name;  // what the split hashes
  int32_t label = 0;
  uint64_t hash = 0;  // of the image's content
  Split split = Split::kTrain;
  std::string path;     // a folder's image file; empty for an IDX example
  int64_t index = -1;   // an IDX example's row in `idx`
  bool idx_test = false;
};

struct Examples {
  std::vector<std::string> labels;
  std::vector<Example> list;
  DataSplit idx;  // IDX data sets only
};

uint64_t image_hash(const Image& img) {
  const int64_t dims[3] = {img.width, img.height, img.channels};
  return hash_bytes(img.pixels.data(), img.pixels.size(), hash_bytes(dims, sizeof dims));
}

Examples list_examples(const std::string& images, const std::string& data, double validation,
                       double test) {
  Examples ex;
  if (!images.empty()) {
    ImageFolder folder = list_image_folder(images);
    ex.labels = std::move(folder.labels);
    for (LabeledImage& img : folder.images)
      ex.list.push_back({.name = img.name,
                         .label = img.label,
                         .hash = hash_file(img.path),
                         .split = split_of(img.name, validation, test),
                         .path = std::move(img.path)});
    return ex;
  }
  // An IDX data set keeps its own test split; its training images split by name.
  ex.idx = load_dataset(data);
  for (int64_t k = 0; k < ex.idx.train.classes; ++k) ex.labels.push_back(std::to_string(k));
  auto add = [&](const Dataset& d, bool is_test) {
    for (int64_t i = 0; i < d.size(); ++i) {
      Example e{.name = fmt::format("{}/{}", is_test ? "test" : "train", i),
                .label = d.labels.data<int32_t>()[i],
                .hash = image_hash(example_image(d, i)),
                .index = i,
                .idx_test = is_test};
      e.split = is_test ? Split::kTest : split_of(e.name, validation, 0.0);
      ex.list.push_back(std::move(e));
    }
  };
  add(ex.idx.train, false);
  add(ex.idx.test, true);
  return ex;
}

// The base model as it takes images, and the bottleneck node's output.
struct Base {
  ModelToRun model;
  ImagePort port;
  Output node;
  int64_t dim = 0;
  Shape hwc;
  float mean = 0.0f, std = 255.0f;
};

Base open_base(const std::string& path, const std::string& node_name) {
  if (!fs::is_regular_file(path))
    fail("{}: no such base model file (a .sfm or .onnx; freeze a run first)", path);
  Base base;
  base.model = open_model_to_run(path);
  const ModelFile& file = base.model.file;
  if (file.inputs.size() != 1) fail("{}: the base model must have one input", path);
  base.hwc = image_input_hwc(file);
  if (base.hwc.empty())
    fail("{}: input '{}' is {}, not an image batch", path, file.inputs[0],
         shape_str(base.model.input_type(0).shape));
  try {
    base.node = float_output(base.model.file.graph, node_name);
  } catch (const Error& e) {
    fail("{}: --bottleneck: {}", path, e.what());
  }
  const TensorType& type = file.graph.type(base.node);
  if (type.dtype != DType::f32 || type.shape.empty() || type.shape[0] != 1)
    fail("{}: --bottleneck '{}' gives {} {}; expected float values per example", path, node_name,
         dtype_name(type.dtype), shape_str(type.shape));
  base.dim = num_elements(type.shape);
  base.mean = static_cast<float>(metadata_number(file, "input_mean", 0.0));
  base.std = static_cast<float>(metadata_number(file, "input_std", 255.0));
  if (!std::isfinite(base.std) || base.std == 0.0f)
    fail("{}: its metadata input_std {} must be finite and non-zero", path, base.std);
  base.port = take_nhwc_images(base.model);
  return base;
}

// One example as the base model takes it: [1, H, W, C] f32.
Tensor base_input(const Base& base, const Examples& ex, const Example& e) {
  const Image img = e.path.empty() ? example_image(e.idx_test ? ex.idx.test : ex.idx.train, e.index)
                                   : decode_image(e.path);
  const int64_t channels = base.hwc[2];
  if (channels != 1 && channels != 3 && channels != img.channels)
    fail("{}: {}-channel image; the base model takes {} channels", e.path.empty() ? e.name : e.path,
         img.channels, channels);
  return image_to_tensor(img, base.hwc[1], base.hwc[0], channels, base.mean, base.std);
}

// "bottlenecks 1200/6000 (20%) 3:05 left" on stderr: live on a terminal, every 15 s otherwise.
class CacheProgress {
 public:
  explicit CacheProgress(bool quiet) : quiet_(quiet), tty_(isatty(fileno(stderr)) != 0) {}
  void update(int64_t done, int64_t total) {
    if (quiet_) return;
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (since < (tty_ ? 0.25 : 15.0) && done < total) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double left = done > 0 ? elapsed * static_cast<double>(total - done) / static_cast<double>(done) : 0;
    std::fprintf(stderr, "%sbottlenecks %lld/%lld (%.0f%%) %.0f img/s, %s left%s", tty_ ? "\r" : "",
                 static_cast<long long>(done), static_cast<long long>(total),
                 100.0 * static_cast<double>(done) / static_cast<double>(std::max<int64_t>(total, 1)),
                 elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0,
                 format_duration(left).c_str(), tty_ ? "   " : "\n");
    if (tty_ && done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  bool quiet_, tty_;
  Clock::time_point start_ = Clock::now(), last_{};
};

struct CacheStats {
  int64_t reused = 0, computed = 0, base_runs = 0;
  double seconds = 0.0;
  uint64_t file_bytes = 0;
};

// Brings the cache at `path` up to date for every example, running the base model only on
// images whose content hash it lacks, and returns it mapped.
BottleneckCache update_cache(const std::string& path, const BottleneckKey& key, Base& base,
                             const Examples& ex, int threads, bool quiet, CacheStats& stats) {
  const auto start = Clock::now();
  BottleneckCache old = BottleneckCache::open(path, key);
  if (!old.stale_reason().empty() && !quiet)
    std::fprintf(stderr, "%s: not used (%s); rebuilding it\n", path.c_str(),
                 old.stale_reason().c_str());
  // Unique content hashes: the rows the cache must hold, in first-seen order.
  std::vector<uint64_t> hashes;
  std::vector<const Example*> missing;
  {
    std::vector<uint64_t> seen;
    for (const Example& e : ex.list) seen.push_back(e.hash);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    std::vector<bool> queued(seen.size(), false);
    for (const Example& e : ex.list) {
      const size_t at = static_cast<size_t>(std::lower_bound(seen.begin(), seen.end(), e.hash) - seen.begin());
      if (queued[at]) continue;
      queued[at] = true;
      hashes.push_back(e.hash);
      if (old.find(e.hash)) ++stats.reused;
      else missing.push_back(&e);
    }
  }
  if (missing.empty() && old.size() == static_cast<int64_t>(hashes.size())) {
    stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    stats.file_bytes = fs::file_size(path);
    return old;
  }
  // New rows, in the order of `missing`.
  std::vector<uint64_t> new_hashes;
  std::vector<float> new_rows;
  auto write = [&] {
    std::vector<uint64_t> all;
    std::vector<const float*> rows;
    for (uint64_t h : hashes)
      if (const float* r = old.find(h)) all.push_back(h), rows.push_back(r);
    for (size_t i = 0; i < new_hashes.size(); ++i)
      all.push_back(new_hashes[i]),
          rows.push_back(new_rows.data() + i * static_cast<size_t>(key.dim));
    write_bottleneck_cache(path, key, all, [&](size_t i) { return rows[i]; });
  };
  if (!missing.empty()) {
    if (!quiet)
      std::fprintf(stderr, "bottlenecks: %lld cached, %lld to compute at '%s' (cache %s)\n",
                 static_cast<long long>(stats.reused), static_cast<long long>(missing.size()),
                 key.node.c_str(), path.c_str());
    Session session(base.model.file.graph, SessionOptions{.threads = threads});
    CacheProgress progress(quiet);
    const int64_t total = static_cast<int64_t>(missing.size());
    auto last_write = Clock::now();
    const int64_t row_floats = base.hwc[0] * base.hwc[1] * base.hwc[2];
    for (int64_t at = 0; at < total; at += kBaseBatch) {
      const int64_t n = std::min(kBaseBatch, total - at);
      Tensor batch = Tensor(DType::f32, {n, base.hwc[0], base.hwc[1], base.hwc[2]});
      for (int64_t i = 0; i < n; ++i) {
        Tensor one = base_input(base, ex, *missing[static_cast<size_t>(at + i)]);
        std::copy_n(one.data<float>(), row_floats, batch.data<float>() + i * row_floats);
      }
      if (base.port.nchw) batch = nhwc_to_nchw(batch);
      Tensor out = session.run({{base.port.port, batch}}, {base.node})[0];
      ++stats.base_runs;
      if (out.numel() != n * key.dim)
        fail("--bottleneck '{}': {} values for a batch of {}, expected {} per image", key.node,
             out.numel(), n, key.dim);
      new_rows.insert(new_rows.end(), out.data<float>(), out.data<float>() + out.numel());
      for (int64_t i = 0; i < n; ++i) new_hashes.push_back(missing[static_cast<size_t>(at + i)]->hash);
      stats.computed += n;
      progress.update(at + n, total);
      if (std::chrono::duration<double>(Clock::now() - last_write).count() > kCacheWriteSeconds &&
          at + n < total) {
        write();
        last_write = Clock::now();
      }
    }
  }
  write();
  BottleneckCache cache = BottleneckCache::open(path, key);
  SF_CHECK(cache.stale_reason().empty() && cache.size() == static_cast<int64_t>(hashes.size()),
           "{}: the bottleneck cache just written does not read back", path);
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stats.file_bytes = fs::file_size(path);
  return cache;
}

// The examples of `split` as a data set of bottlenecks [N, 1, 1, dim], read from the cache.
Dataset bottleneck_set(const Examples& ex, const BottleneckCache& cache, Split split,
                       const std::string& name) {
  std::vector<const Example*> chosen;
  for (const Example& e : ex.list)
    if (e.split == split) chosen.push_back(&e);
  const int64_t n = static_cast<int64_t>(chosen.size()), dim = cache.key().dim;
  Dataset d;
  d.name = name;
  d.classes = static_cast<int64_t>(ex.labels.size());
  d.images = Tensor(DType::f32, {n, 1, 1, dim});
  d.labels = Tensor(DType::i32, {n});
  for (int64_t i = 0; i < n; ++i) {
    const float* row = cache.find(chosen[static_cast<size_t>(i)]->hash);
    SF_CHECK(row != nullptr, "bottleneck of '{}' missing from the cache", chosen[static_cast<size_t>(i)]->name);
    std::copy_n(row, dim, d.images.data<float>() + i * dim);
    d.labels.data<int32_t>()[i] = chosen[static_cast<size_t>(i)]->label;
  }
  return d;
}

// Accuracy of the frozen head on bottlenecks.
double head_accuracy(const ModelFile& head, const Dataset& data, int threads) {
  if (data.size() == 0) return 0.0;
  Session session(head.graph, SessionOptions{.threads = threads});
  const Output in{head.graph.id_of(head.inputs[0]), 0}, out{head.graph.id_of(head.outputs[0]), 0};
  BatchIterator it(data, BatchOptions{.batch_size = 256, .shuffle = false});
  Tensor batch, labels;
  int64_t correct = 0;
  while (it.next(batch, labels)) {
    Tensor probs = session.run({{in, batch}}, {out})[0];
    const int64_t classes = probs.dim(1);
    for (int64_t b = 0; b < probs.dim(0); ++b) {
      const float* row = probs.data<float>() + b * classes;
      correct += std::max_element(row, row + classes) - row == labels.data<int32_t>()[b];
    }
  }
  return static_cast<double>(correct) / static_cast<double>(data.size());
}


// Batches of real images of the training split, shuffled per epoch from the seed, full batches
// only (the fine-tuning graph has one batch size), as the model's input takes them.
ImageBatches image_batches(const Base& base, const Examples& ex, bool nchw, int64_t batch,
                           int64_t epochs, uint64_t seed) {
  auto train = std::make_shared<std::vector<const Example*>>();
  for (const Example& e : ex.list)
    if (e.split == Split::kTrain) train->push_back(&e);
  auto state = std::make_shared<std::pair<int64_t, size_t>>(0, 0);  // epoch, next example
  auto rng = std::make_shared<std::mt19937_64>(seed);
  batch = std::min<int64_t>(batch, static_cast<int64_t>(train->size()));
  std::shuffle(train->begin(), train->end(), *rng);
  return [&base, &ex, nchw, batch, epochs, train, state, rng](Tensor& images, Tensor& labels) {
    auto& [epoch, at] = *state;
    if (epoch >= epochs) return false;
    if (at + static_cast<size_t>(batch) > train->size()) {
      ++epoch;
      at = 0;
      if (epoch >= epochs) return false;
      std::shuffle(train->begin(), train->end(), *rng);
    }
    const int64_t row = base.hwc[0] * base.hwc[1] * base.hwc[2];
    Tensor nhwc(DType::f32, {batch, base.hwc[0], base.hwc[1], base.hwc[2]});
    labels = Tensor(DType::i32, {batch});
    for (int64_t i = 0; i < batch; ++i, ++at) {
      const Example& e = *(*train)[at];
      Tensor one = base_input(base, ex, e);
      std::copy_n(one.data<float>(), row, nhwc.data<float>() + i * row);
      labels.data<int32_t>()[i] = e.label;
    }
    images = nchw ? nhwc_to_nchw(nhwc) : nhwc;
    return true;
  };
}

// Accuracy of the whole model on the real images of the test split.
double model_accuracy(const ModelFile& model, const Base& base, const Examples& ex, int threads) {
  ModelToRun run = prepare_for_run(model);
  const ImagePort port = take_nhwc_images(run);
  Session session(run.file.graph, SessionOptions{.threads = threads});
  int64_t correct = 0, count = 0;
  for (const Example& e : ex.list) {
    if (e.split != Split::kTest) continue;
    Tensor input = base_input(base, ex, e);
    if (port.nchw) input = nhwc_to_nchw(input);
    const Tensor probs = session.run({{port.port, input}}, {run.output_ports[0]})[0];
    const float* p = probs.data<float>();
    correct += std::max_element(p, p + probs.numel()) - p == e.label;
    ++count;
  }
  return count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0;
}

}  // namespace

Action add_retrain_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "retrain", "Transfer learning: train a new head on a base model's cached bottlenecks");
  struct Args {
    std::string base, bottleneck, images, data, cache, out;
    int64_t hidden = 0, fine_tune_epochs = 1, fine_tune_batch = 32;
    double fine_tune_lr = 1e-4;
    std::string fine_tune_from;
    double validation_percent = 10.0, test_percent = 10.0;
    std::optional<int64_t> epochs, batch;
    std::optional<double> lr;
    std::optional<uint64_t> seed;
    int threads = 0;
    bool overwrite = false, json = false, quiet = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--base", a->base, "Base model (.sfm or .onnx; an int8 model runs as int8)")
      ->required();
  cmd->add_option("--bottleneck", a->bottleneck,
                  "Node of the base model whose output feeds the new head (e.g. fc1)")
      ->required();
  CLI::Option* images = cmd->add_option("--images", a->images,
                  "Folder with one subfolder of images per label (PNG, JPEG, BMP, ...; any size, "
                  "resized to the base model's input)");
  cmd->add_option("--data", a->data,
                  "An IDX data set instead of --images: mnist, fashion-mnist or a folder of IDX "
                  "files (its test split stays the test split)")
      ->excludes(images);
  cmd->add_option("--out", a->out, "Run directory: checkpoint, head.yaml, model.sfm")->required();
  cmd->add_option("--cache", a->cache,
                  "Bottleneck cache file, reusable across runs (default: <out>/bottlenecks.cache)");
  cmd->add_option("--hidden", a->hidden, "Add a dense ReLU layer of N units before the softmax");
  cmd->add_option("--validation-percent", a->validation_percent,
                  "Share of the images, by a hash of their names, evaluated after each epoch")
      ->default_val(10.0);
  cmd->add_option("--test-percent", a->test_percent,
                  "Share of the images, by a hash of their names, held out for the final test")
      ->default_val(10.0);
  cmd->add_option("--epochs", a->epochs, "Epochs over the cached bottlenecks (20)");
  cmd->add_option("--fine-tune-from", a->fine_tune_from,
                  "After the head, train the base model's layers after NODE with it on the "
                  "training images (runs the base model on every image)");
  cmd->add_option("--fine-tune-epochs", a->fine_tune_epochs, "Passes of --fine-tune-from")
      ->default_val(1);
  cmd->add_option("--fine-tune-lr", a->fine_tune_lr, "Adam's learning rate for --fine-tune-from")
      ->default_val(1e-4);
  cmd->add_option("--fine-tune-batch", a->fine_tune_batch, "Batch size for --fine-tune-from")
      ->default_val(32);
  cmd->add_option("--batch", a->batch, "Batch size (100, or fewer when there are fewer images)");
  cmd->add_option("--lr", a->lr, "Learning rate of the head (Adam, 0.001)");
  cmd->add_option("--seed", a->seed, "Random seed (initial weights, data order)");
  cmd->add_option("--threads", a->threads, "Threads (0: all cores)")->default_val(0);
  cmd->add_flag("--overwrite", a->overwrite, "Replace a run already in --out");
  cmd->add_flag("--json", a->json,
                "Print one JSON object per epoch, then a summary object, on stdout");
  cmd->add_flag("--quiet", a->quiet, "No progress lines");
  return [a]() {
    if (a->images.empty() == a->data.empty())
      fail("retrain: give the images with --images FOLDER or --data IDX_DATA_SET (one of them)");
    if (a->hidden < 0) fail("--hidden {} must be a unit count >= 0", a->hidden);
    if (!a->fine_tune_from.empty() &&
        (a->fine_tune_epochs < 1 || a->fine_tune_batch < 1 ||
         !(a->fine_tune_lr > 0.0 && std::isfinite(a->fine_tune_lr))))
      fail("--fine-tune-epochs and --fine-tune-batch must be >= 1 and --fine-tune-lr positive");
    if (!a->overwrite && fs::exists(checkpoint_path(a->out)))
      fail("retrain: {} already holds a run (its checkpoint {}); replace it with --overwrite",
           a->out, checkpoint_path(a->out));
    Base base = open_base(a->base, a->bottleneck);
    if (a->hidden > limits::kMaxElements / std::max<int64_t>(base.dim, 1))
      fail("--hidden {}: a {} x {} weight matrix is more than the limit of {} elements",
           a->hidden, base.dim, a->hidden, limits::kMaxElements);
    if (!a->fine_tune_from.empty()) {
      try {
        check_fine_tunable(base.model.file.graph, a->fine_tune_from, base.node);
      } catch (const Error& e) {
        fail("{}: {}", a->base, e.what());
      }
    }
    const Examples ex = list_examples(a->images, a->data, a->validation_percent, a->test_percent);
    fs::create_directories(a->out);
    const std::string cache_path =
        a->cache.empty() ? (fs::path(a->out) / "bottlenecks.cache").string() : a->cache;
    const BottleneckKey key{.model_hash = hash_file(a->base), .node = a->bottleneck, .dim = base.dim};
    CacheStats stats;
    const BottleneckCache cache =
        update_cache(cache_path, key, base, ex, a->threads, a->quiet, stats);

    auto split = std::make_shared<DataSplit>();
    split->train = bottleneck_set(ex, cache, Split::kTrain, "train");
    split->test = bottleneck_set(ex, cache, Split::kValidation, "validation");
    const Dataset test = bottleneck_set(ex, cache, Split::kTest, "test");
    if (split->train.size() == 0) fail("retrain: no image falls in the training split");
    // With no validation images, each epoch reports the training images.
    if (split->test.size() == 0) split->test = split->train;

    const std::string spec_path = (fs::path(a->out) / "head.yaml").string();
    {
      const std::string text =
          head_spec_text(base.dim, static_cast<int64_t>(ex.labels.size()), a->hidden);
      AtomicFile spec(spec_path, "head spec");
      spec.write(text.data(), text.size());
      spec.commit();
    }
    TrainOptions options{.model_path = spec_path,
                         .data = a->images.empty() ? a->data : a->images,
                         .out_dir = a->out,
                         .overwrite = a->overwrite,
                         .epochs = a->epochs,
                         .batch = a->batch.value_or(std::min<int64_t>(100, split->train.size())),
                         .lr = a->lr,
                         .seed = a->seed,
                         .threads = a->threads,
                         .data_split = split};
    const std::vector<EpochReport> epochs = train(options, printing_callbacks(a->json, a->quiet));

    const ModelFile head = freeze_run(a->out);
    ModelFile model = attach_head(open_model(a->base), a->bottleneck, head);
    model.metadata["producer"] = "slimflow 0.1.0";
    model.metadata["source"] = a->out;
    model.metadata["model"] = "retrain";
    model.metadata["retrain_base"] = a->base;
    model.metadata["retrain_bottleneck"] = a->bottleneck;
    // `eval --images` finds the same test split with these.
    model.metadata["retrain_validation_percent"] = fmt::format("{}", a->validation_percent);
    model.metadata["retrain_test_percent"] = fmt::format("{}", a->test_percent);
    model.metadata["labels"] = nlohmann::json(ex.labels).dump();
    model.metadata["input_height"] = std::to_string(base.hwc[0]);
    model.metadata["input_width"] = std::to_string(base.hwc[1]);
    model.metadata["input_channels"] = std::to_string(base.hwc[2]);
    model.metadata["input_channel_order"] = base.hwc[2] == 1 ? "gray" : base.hwc[2] == 3 ? "rgb" : "as stored";
    model.metadata["input_mean"] = fmt::format("{}", base.mean);
    model.metadata["input_std"] = fmt::format("{}", base.std);
    const double head_test_accuracy = head_accuracy(head, test, a->threads);
    double test_accuracy = head_test_accuracy;
    nlohmann::json fine_tuned;
    if (!a->fine_tune_from.empty()) {
      const auto start = Clock::now();
      const FineTuneResult r = fine_tune(
          model, a->fine_tune_from, FineTuneOptions{.lr = a->fine_tune_lr, .threads = a->threads},
          image_batches(base, ex, input_is_nchw(model), a->fine_tune_batch, a->fine_tune_epochs,
                        a->seed.value_or(1)));
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      test_accuracy = model_accuracy(model, base, ex, a->threads);
      fine_tuned = {{"from", a->fine_tune_from},
                    {"loss", r.loss},
                    {"steps", r.steps},
                    {"weights", r.weights},
                    {"seconds", seconds},
                    {"head_test_accuracy", head_test_accuracy}};
      if (!a->quiet)
        std::fprintf(stderr, "fine-tuned after '%s': %lld weights, %lld steps, loss %.4f, %.1f s\n",
                     a->fine_tune_from.c_str(), static_cast<long long>(r.weights),
                     static_cast<long long>(r.steps), r.loss, seconds);
    }
    const std::string model_path = (fs::path(a->out) / "model.sfm").string();
    save_model(model_path, model);

    double head_seconds = 0.0;  // the epochs' own lines (--json) give each one
    for (const EpochReport& r : epochs) head_seconds += r.epoch_seconds;
    nlohmann::json summary = {
        {"images", ex.list.size()},
        {"labels", ex.labels},
        {"train", split->train.size()},
        {"validation", ex.list.size() - split->train.size() - test.size()},
        {"test", test.size()},
        {"test_accuracy", test_accuracy},
        {"bottleneck_dim", base.dim},
        {"bottlenecks_computed", stats.computed},
        {"bottlenecks_reused", stats.reused},
        {"base_model_runs", stats.base_runs},
        {"cache_seconds", stats.seconds},
        {"cache_bytes", stats.file_bytes},
        {"cache", cache_path},
        {"head_seconds", head_seconds},
        {"model", model_path}};
    if (!fine_tuned.is_null()) summary["fine_tune"] = fine_tuned;
    if (a->json) {
      std::printf("%s\n", summary.dump().c_str());
    } else {
      std::printf("test accuracy %.2f%% on %lld images; bottlenecks: %lld computed, %lld reused "
                  "(%.1f s, cache %s, %.1f MB); model %s\n",
                  100.0 * test_accuracy, static_cast<long long>(test.size()),
                  static_cast<long long>(stats.computed), static_cast<long long>(stats.reused),
                  stats.seconds, cache_path.c_str(), static_cast<double>(stats.file_bytes) / 1e6,
                  model_path.c_str());
    }
    return 0;
  };
}

}  // namespace sf::cli
