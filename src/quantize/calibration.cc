#include "quantize/calibration.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "io/dataset.h"
#include "io/idx.h"
#include "io/image.h"
#include "io/npy.h"
#include "ops/op_names.h"
#include "runtime/session.h"

namespace sf {

RangeMethod parse_range_method(const std::string& name) {
  if (name == "minmax") return RangeMethod::minmax;
  if (name == "percentile") return RangeMethod::percentile;
  if (name == "entropy") return RangeMethod::entropy;
  fail("calibration method '{}' must be minmax, percentile or entropy", name);
}

const char* range_method_name(RangeMethod method) {
  switch (method) {
    case RangeMethod::minmax:
      return "minmax";
    case RangeMethod::percentile:
      return "percentile";
    case RangeMethod::entropy:
      return "entropy";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Range estimation

void RangeObserver::observe_extremes(const float* values, int64_t count) {
  float lo = min_, hi = max_;
  for (int64_t i = 0; i < count; ++i) {
    const float v = values[i];
    // NaN fails both comparisons; infinities would make every histogram bin infinitely wide.
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  min_ = lo;
  max_ = hi;
  count_ += count;
}

void RangeObserver::observe_histogram(const float* values, int64_t count, int bins) {
  SF_CHECK(bins > 0, "histogram bins {}", bins);
  if (positive_.empty()) {
    positive_.assign(static_cast<size_t>(bins), 0);
    negative_.assign(static_cast<size_t>(bins), 0);
  }
  const double extent = std::max(-static_cast<double>(min_), static_cast<double>(max_));
  if (extent <= 0.0) {
    for (int64_t i = 0; i < count; ++i) positive_[0] += values[i] == 0.0f;
    return;
  }
  const double per_bin = bins / extent;
  const int64_t last = bins - 1;
  for (int64_t i = 0; i < count; ++i) {
    const float v = values[i];
    if (!std::isfinite(v)) continue;
    const int64_t bin = std::min(static_cast<int64_t>(std::fabs(v) * per_bin), last);
    ++(v >= 0.0f ? positive_ : negative_)[static_cast<size_t>(bin)];
  }
}

namespace {

// The upper edge of the first bin from which at most `allowed` values lie in higher bins.
double tail_cut(const std::vector<int64_t>& counts, double bin_width, double allowed) {
  int64_t above = 0;
  for (size_t i = counts.size(); i-- > 0;) {
    if (static_cast<double>(above + counts[i]) > allowed)
      return static_cast<double>(i + 1) * bin_width;
    above += counts[i];
  }
  return 0.0;
}

}  // namespace

double entropy_threshold(const std::vector<int64_t>& histogram, double bin_width, int target_bins) {
  const int bins = static_cast<int>(histogram.size());
  if (target_bins <= 0 || bins <= target_bins) return bins * bin_width;
  std::vector<double> counts(histogram.begin(), histogram.end());
  // Bin 0 holds the zeros a ReLU makes, which 8 bits represent exactly (the zero point); left as
  // it is, that spike dominates the divergence and drags the threshold far too low.
  counts[0] = counts[1];
  // Mass at or beyond each bin, for folding the clipped tail into the last kept bin.
  std::vector<double> beyond(static_cast<size_t>(bins) + 1, 0.0);
  for (int i = bins - 1; i >= 0; --i)
    beyond[static_cast<size_t>(i)] =
        beyond[static_cast<size_t>(i) + 1] + counts[static_cast<size_t>(i)];
  if (beyond[0] == 0.0) return 0.0;

  double best_divergence = std::numeric_limits<double>::infinity();
  int best_cut = bins;
  std::vector<double> p, q, level_mass(static_cast<size_t>(target_bins)),
      level_nonzero(static_cast<size_t>(target_bins));
  for (int cut = target_bins; cut <= bins; ++cut) {
    p.assign(counts.begin(), counts.begin() + cut);
    p.back() += beyond[static_cast<size_t>(cut)];
    // Requantize the kept bins (without the folded tail, so that clipping costs divergence)
    // to target_bins evenly spaced levels; each level's mass spreads evenly over the bins in
    // it where p is non-zero.
    auto level_of = [&](int k) { return static_cast<size_t>(int64_t{k} * target_bins / cut); };
    std::fill(level_mass.begin(), level_mass.end(), 0.0);
    std::fill(level_nonzero.begin(), level_nonzero.end(), 0.0);
    for (int k = 0; k < cut; ++k) {
      if (p[static_cast<size_t>(k)] == 0.0) continue;
      level_mass[level_of(k)] += counts[static_cast<size_t>(k)];
      level_nonzero[level_of(k)] += 1.0;
    }
    q.assign(static_cast<size_t>(cut), 0.0);
    double p_total = 0.0, q_total = 0.0;
    for (int k = 0; k < cut; ++k) {
      if (p[static_cast<size_t>(k)] == 0.0) continue;
      q[static_cast<size_t>(k)] = level_mass[level_of(k)] / level_nonzero[level_of(k)];
      p_total += p[static_cast<size_t>(k)];
      q_total += q[static_cast<size_t>(k)];
    }
    if (q_total == 0.0) continue;
    // Where q lost all of p's mass (a tail folded into an empty level), a tiny q stands in
    // for zero: a large but finite divergence, so such cuts lose without special cases.
    constexpr double kFloor = 1e-12;
    double divergence = 0.0;
    for (int k = 0; k < cut; ++k) {
      const double pk = p[static_cast<size_t>(k)] / p_total;
      if (pk == 0.0) continue;
      const double qk = std::max(q[static_cast<size_t>(k)] / q_total, kFloor);
      divergence += pk * std::log(pk / qk);
    }
    // Ties go to the wider range, which clips less.
    if (divergence <= best_divergence) {
      best_divergence = divergence;
      best_cut = cut;
    }
  }
  return best_cut * bin_width;
}

namespace {

void check_range_options(const RangeOptions& options) {
  if (options.method == RangeMethod::percentile &&
      !(options.percentile > 0.0 && options.percentile <= 100.0))
    fail("calibration: percentile {} must be above 0 and at most 100", options.percentile);
  if (RangeObserver::needs_histogram(options.method) && options.bins < 2)
    fail("calibration: {} histogram bins are too few (at least 2)", options.bins);
}

}  // namespace

TensorRange RangeObserver::range(const RangeOptions& options) const {
  check_range_options(options);
  TensorRange r{std::min(min_, 0.0f), std::max(max_, 0.0f)};
  if (options.method == RangeMethod::minmax || positive_.empty()) return r;
  const double extent = std::max(-static_cast<double>(r.min), static_cast<double>(r.max));
  if (extent <= 0.0) return r;
  const double width = extent / static_cast<double>(positive_.size());
  if (options.method == RangeMethod::percentile) {
    int64_t total = 0;
    for (size_t i = 0; i < positive_.size(); ++i) total += positive_[i] + negative_[i];
    const double allowed = (1.0 - options.percentile / 100.0) * static_cast<double>(total);
    r.max = std::min(r.max, static_cast<float>(tail_cut(positive_, width, allowed)));
    r.min = std::max(r.min, static_cast<float>(-tail_cut(negative_, width, allowed)));
    return r;
  }
  // Entropy. A one-sided tensor (after ReLU) gets all 256 levels of u8; a signed one gets
  // about half of them on each side of the zero point, symmetrically clipped.
  if (r.min >= 0.0f) {
    r.max = std::min(r.max, static_cast<float>(entropy_threshold(positive_, width, 256)));
    return r;
  }
  std::vector<int64_t> magnitudes(positive_.size());
  for (size_t i = 0; i < magnitudes.size(); ++i) magnitudes[i] = positive_[i] + negative_[i];
  const float threshold = static_cast<float>(entropy_threshold(magnitudes, width, 128));
  r.max = std::min(r.max, threshold);
  r.min = std::max(r.min, -threshold);
  return r;
}

TensorRange estimate_range(const Tensor& values, const RangeOptions& options) {
  check_range_options(options);
  RangeObserver observer;
  const float* data = values.data<float>();
  observer.observe_extremes(data, values.numel());
  if (RangeObserver::needs_histogram(options.method))
    observer.observe_histogram(data, values.numel(), options.bins);
  return observer.range(options);
}

// ---------------------------------------------------------------------------------------------
// Sources

namespace {

namespace fs = std::filesystem;

// Images decoded on demand; subclasses say how to get image i.
class ImageSource : public CalibrationSource {
 public:
  ImageSource(int64_t size, const ImageInputSpec& input) : size_(size), input_(input) {
    if (input.height <= 0 || input.width <= 0 || input.channels <= 0)
      fail("calibration images: the model input must be an image batch, got {}x{}x{} (HWC)",
           input.height, input.width, input.channels);
  }
  int64_t size() const override { return size_; }
  std::vector<Tensor> batch(int64_t begin, int64_t end) override {
    SF_CHECK(0 <= begin && begin <= end && end <= size_, "batch [{}, {}) of {}", begin, end, size_);
    const int64_t h = input_.height, w = input_.width, c = input_.channels;
    Tensor nhwc(DType::f32, {end - begin, h, w, c});
    for (int64_t i = begin; i < end; ++i) {
      Tensor one = image_to_tensor(image(i), w, h, c, input_.mean, input_.std);
      std::copy_n(one.data<float>(), one.numel(), nhwc.data<float>() + (i - begin) * h * w * c);
    }
    return {input_.nchw ? nhwc_to_nchw(nhwc) : nhwc};
  }

 protected:
  virtual Image image(int64_t index) = 0;

 private:
  int64_t size_;
  ImageInputSpec input_;
};

// u8 images [N,H,W] or [N,H,W,C] in memory (an IDX file).
class U8ArraySource : public ImageSource {
 public:
  U8ArraySource(Tensor images, int64_t count, const ImageInputSpec& input)
      : ImageSource(count, input), images_(std::move(images)) {}

 protected:
  Image image(int64_t index) override {
    Image img;
    img.height = images_.dim(1);
    img.width = images_.dim(2);
    img.channels = images_.rank() == 4 ? images_.dim(3) : 1;
    const int64_t bytes = img.height * img.width * img.channels;
    const uint8_t* p = images_.data<uint8_t>() + index * bytes;
    img.pixels.assign(p, p + bytes);
    return img;
  }

 private:
  Tensor images_;
};

// A data set's images.
class DatasetSource : public ImageSource {
 public:
  DatasetSource(Dataset data, const ImageInputSpec& input)
      : ImageSource(data.size(), input), data_(std::move(data)) {}

 protected:
  Image image(int64_t index) override { return example_image(data_, index); }

 private:
  Dataset data_;
};

class FileListSource : public ImageSource {
 public:
  FileListSource(std::vector<std::string> paths, const ImageInputSpec& input)
      : ImageSource(static_cast<int64_t>(paths.size()), input), paths_(std::move(paths)) {}

 protected:
  Image image(int64_t index) override { return decode_image(paths_[static_cast<size_t>(index)]); }

 private:
  std::vector<std::string> paths_;
};

bool is_image_file(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  for (const char* known :
       {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tga", ".pgm", ".ppm", ".pnm"})
    if (ext == known) return true;
  return false;
}

bool holds_idx_dataset(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "train-images-idx3-ubyte", ec) ||
         fs::is_regular_file(dir / "train-images-idx3-ubyte.gz", ec);
}

}  // namespace

TensorSource::TensorSource(std::vector<Tensor> inputs) : inputs_(std::move(inputs)) {
  if (inputs_.empty()) fail("calibration: no input tensors");
  for (const Tensor& t : inputs_) {
    if (t.rank() == 0)
      fail("calibration: an input tensor is a scalar; examples go along dimension 0");
    if (t.dim(0) != inputs_[0].dim(0))
      fail("calibration: input tensors hold {} and {} examples", inputs_[0].dim(0), t.dim(0));
  }
}

int64_t TensorSource::size() const { return inputs_[0].dim(0); }

std::vector<Tensor> TensorSource::batch(int64_t begin, int64_t end) {
  SF_CHECK(0 <= begin && begin <= end && end <= size(), "batch [{}, {}) of {}", begin, end, size());
  std::vector<Tensor> out;
  for (const Tensor& t : inputs_) out.push_back(t.rows(begin, end));
  return out;
}

bool names_npy_examples(const std::string& spec) {
  return spec.find('=') != std::string::npos ||
         (spec.size() > 4 && spec.compare(spec.size() - 4, 4, ".npy") == 0);
}

std::unique_ptr<CalibrationSource> open_npy_source(const std::string& spec, int64_t count,
                                                   const Graph& graph,
                                                   const std::vector<std::string>& inputs) {
  std::vector<std::string> files(inputs.size());
  size_t unnamed = 0;
  for (size_t begin = 0; begin <= spec.size();) {
    size_t end = spec.find(',', begin);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(begin, end - begin);
    begin = end + 1;
    if (item.empty()) fail("calibration data '{}': an empty entry", spec);
    const size_t eq = item.find('=');
    size_t index = unnamed;
    if (eq == std::string::npos) {
      ++unnamed;
      if (index >= inputs.size())
        fail("calibration data '{}': {} files for a model of {} input(s)", spec, unnamed,
             inputs.size());
    } else {
      const std::string name = item.substr(0, eq);
      const auto it = std::find(inputs.begin(), inputs.end(), name);
      if (it == inputs.end())
        fail("calibration data '{}': the model has no input '{}' (inputs: {})", spec, name,
             fmt::join(inputs, ", "));
      index = static_cast<size_t>(it - inputs.begin());
    }
    if (!files[index].empty())
      fail("calibration data '{}': input '{}' is given twice", spec, inputs[index]);
    files[index] = eq == std::string::npos ? item : item.substr(eq + 1);
  }
  std::vector<Tensor> examples;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (files[i].empty())
      fail("calibration data '{}': no .npy file for input '{}' (give INPUT=FILE.npy for each "
           "of: {})",
           spec, inputs[i], fmt::join(inputs, ", "));
    const TensorType& want = graph.node(graph.id_of(inputs[i])).outputs[0];
    Tensor t = read_npy(files[i]);
    Shape past_first = want.shape;
    if (!past_first.empty()) past_first.erase(past_first.begin());
    Shape got_past_first = t.shape();
    if (!got_past_first.empty()) got_past_first.erase(got_past_first.begin());
    if (t.dtype() != want.dtype || t.rank() != static_cast<int>(want.shape.size()) ||
        got_past_first != past_first)
      fail("{}: examples for input '{}' must be {}[N{}{}] (N examples), the file holds {}{}",
           files[i], inputs[i], dtype_name(want.dtype), past_first.empty() ? "" : ",",
           fmt::join(past_first, ","), dtype_name(t.dtype()), shape_str(t.shape()));
    if (!examples.empty() && t.dim(0) != examples[0].dim(0))
      fail("{}: {} examples, but {} holds {}", files[i], t.dim(0), files[0], examples[0].dim(0));
    if (t.dim(0) == 0) fail("{}: no examples (dimension 0 is 0)", files[i]);
    examples.push_back(std::move(t));
  }
  if (count > 0 && count < examples[0].dim(0))
    for (Tensor& t : examples) t = t.rows(0, count);
  return std::make_unique<TensorSource>(std::move(examples));
}

std::unique_ptr<CalibrationSource> open_image_source(const std::string& spec, int64_t count,
                                                     const ImageInputSpec& input) {
  auto limited = [count](int64_t available) {
    return count > 0 ? std::min(count, available) : available;
  };
  std::error_code ec;
  const fs::path path(spec);
  if (spec == "mnist" || spec == "fashion-mnist" ||
      (fs::is_directory(path, ec) && holds_idx_dataset(path))) {
    Dataset train = load_dataset(spec).train;
    return std::make_unique<DatasetSource>(take(train, limited(train.size())), input);
  }
  if (fs::is_regular_file(path, ec)) {
    Tensor images = read_idx(spec);
    if (images.dtype() != DType::u8 || (images.rank() != 3 && images.rank() != 4))
      fail("{}: calibration images must be u8 [N,H,W] or [N,H,W,C], the file holds {} {}", spec,
           dtype_name(images.dtype()), shape_str(images.shape()));
    const int64_t n = limited(images.dim(0));
    if (n == 0) fail("{}: holds no images", spec);
    return std::make_unique<U8ArraySource>(images, n, input);
  }
  if (!fs::is_directory(path, ec))
    fail("{}: not mnist, fashion-mnist, an IDX file or a folder of images", spec);
  std::vector<std::string> files;
  for (fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec),
       end;
       !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec) && is_image_file(it->path())) files.push_back(it->path().string());
  if (ec) fail("{}: cannot list the folder ({})", spec, ec.message());
  if (files.empty())
    fail("{}: no image files (png, jpg, jpeg, bmp, gif, tga, pgm, ppm, pnm)", spec);
  std::sort(files.begin(), files.end());
  const int64_t n = limited(static_cast<int64_t>(files.size()));
  std::vector<std::string> picked;
  for (int64_t i = 0; i < n; ++i)
    picked.push_back(files[static_cast<size_t>(i * static_cast<int64_t>(files.size()) / n)]);
  return std::make_unique<FileListSource>(std::move(picked), input);
}

// ---------------------------------------------------------------------------------------------
// Calibration

TensorRanges calibrate(const Graph& graph, const std::vector<std::string>& inputs,
                       const std::vector<std::string>& tensors, CalibrationSource& source,
                       const CalibrationOptions& options) {
  if (options.batch_size <= 0)
    fail("calibration: batch size {} must be positive", options.batch_size);
  if (source.size() <= 0) fail("calibration: no examples");
  check_range_options(options.range);
  std::vector<Output> feeds;
  for (const std::string& name : inputs) {
    const int id = graph.find(name);
    if (id < 0 || graph.node(id).op != op_names::kPlaceholder)
      fail("calibration: the graph has no input (Placeholder) named '{}'", name);
    feeds.push_back({id, 0});
  }
  std::vector<Output> fetches;
  for (const std::string& name : tensors) {
    const int id = graph.find(name);
    if (id < 0) fail("calibration: the graph has no node named '{}'", name);
    const TensorType& type = graph.type({id, 0});
    if (type.dtype != DType::f32)
      fail("calibration: node '{}' ({}) outputs {}, not f32", name, graph.node(id).op,
           type_str(type));
    fetches.push_back({id, 0});
  }
  std::vector<RangeObserver> observers(tensors.size());
  if (!fetches.empty()) {
    Session session(graph, SessionOptions{.threads = options.threads});
    const bool histogram = RangeObserver::needs_histogram(options.range.method);
    for (int pass = 0; pass < (histogram ? 2 : 1); ++pass) {
      for (int64_t begin = 0; begin < source.size(); begin += options.batch_size) {
        const int64_t end = std::min(source.size(), begin + options.batch_size);
        std::vector<Tensor> batch = source.batch(begin, end);
        if (batch.size() != feeds.size())
          fail("calibration: the examples have {} tensors, the graph {} inputs", batch.size(),
               feeds.size());
        Feeds fed;
        for (size_t i = 0; i < feeds.size(); ++i) fed.push_back({feeds[i], batch[i]});
        std::vector<Tensor> values = session.run(fed, fetches);
        for (size_t i = 0; i < values.size(); ++i) {
          const float* data = values[i].data<float>();
          if (pass == 0)
            observers[i].observe_extremes(data, values[i].numel());
          else
            observers[i].observe_histogram(data, values[i].numel(), options.range.bins);
        }
      }
    }
  }
  TensorRanges ranges;
  for (size_t i = 0; i < tensors.size(); ++i)
    ranges[tensors[i]] = observers[i].range(options.range);
  return ranges;
}

}  // namespace sf
