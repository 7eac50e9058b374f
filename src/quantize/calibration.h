// Calibration for 8-bit quantization: runs a float inference graph over example inputs and
// estimates, for each tensor of interest, the range [min, max] that its 8-bit form should cover.
//
// Ranges are estimated in at most two passes over the examples. The first records the exact
// minimum and maximum (all that `minmax` needs); `percentile` and `entropy` then run a second
// pass that fills fixed-width histograms spanning those extremes, so memory per tensor stays a
// few kilobytes however many examples are used. Everything is deterministic: the same graph,
// examples and options give the same ranges, whatever the batch size (histograms count, so
// the order in which values arrive does not matter).
//
// Model layout (NHWC or the NCHW interface of imported ONNX models), normalisation and the
// choice of examples are the caller's; image sources below do the common cases.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"

namespace sf {

enum class RangeMethod {
  minmax,      // the observed extremes
  percentile,  // extremes that leave out the rarest (100 - p)% of values on each side
  entropy,     // the clipping threshold whose 8-bit histogram is closest in KL divergence
};
// "minmax", "percentile" or "entropy"; throws sf::Error naming the accepted values otherwise.
RangeMethod parse_range_method(const std::string& name);
const char* range_method_name(RangeMethod method);

// Always holds 0 (min <= 0 <= max): padding and ReLU need an exact zero.
struct TensorRange {
  float min = 0.0f;
  float max = 0.0f;
};
// Keyed by node name (output 0 of that node).
using TensorRanges = std::map<std::string, TensorRange>;

struct RangeOptions {
  RangeMethod method = RangeMethod::minmax;
  double percentile = 99.99;  // percentile method: kept share of each side's tail, in percent
  int bins = 2048;            // histogram bins (percentile and entropy)
};

// The statistics of one tensor, accumulated over batches in two passes.
class RangeObserver {
 public:
  // Pass 1: the exact extremes.
  void observe_extremes(const float* values, int64_t count);
  // Pass 2 (only when needs_histogram): histograms of positive values and of negative
  // magnitudes, both over [0, max(|min|, max)] from pass 1, so they can be added for |x|.
  void observe_histogram(const float* values, int64_t count, int bins);
  static bool needs_histogram(RangeMethod method) { return method != RangeMethod::minmax; }
  TensorRange range(const RangeOptions& options) const;

  int64_t count() const { return count_; }

 private:
  float min_ = 0.0f;
  float max_ = 0.0f;
  int64_t count_ = 0;
  std::vector<int64_t> positive_;  // values >= 0
  std::vector<int64_t> negative_;  // magnitudes of values < 0
};

// One tensor's range by `options` (both passes over `values`, f32): for tests and small data.
TensorRange estimate_range(const Tensor& values, const RangeOptions& options);

// The clipping threshold of TensorRT's entropy calibration: the histogram `counts` (bins of
// width `bin_width` from 0) is cut at each candidate bin i >= target_bins, everything beyond
// folded into bin i-1, and requantized to `target_bins` evenly spaced levels; the cut with the
// smallest KL divergence from the original wins (the widest on ties). Bin 0 counts as much as
// bin 1, as in NVIDIA's pytorch-quantization, so a ReLU's exact zeros do not steer the search.
// Returns the cut's upper edge.
double entropy_threshold(const std::vector<int64_t>& counts, double bin_width, int target_bins);

// Supplies calibration examples in the model's layout and scaling; calibration may walk it
// more than once, and must get the same examples each time.
class CalibrationSource {
 public:
  virtual ~CalibrationSource() = default;
  virtual int64_t size() const = 0;
  // Examples [begin, end): one tensor per model input, examples along dimension 0.
  virtual std::vector<Tensor> batch(int64_t begin, int64_t end) = 0;
};

// Examples already in memory: one tensor per model input, examples along dimension 0.
class TensorSource : public CalibrationSource {
 public:
  explicit TensorSource(std::vector<Tensor> inputs);
  int64_t size() const override;
  std::vector<Tensor> batch(int64_t begin, int64_t end) override;

 private:
  std::vector<Tensor> inputs_;
};

// How calibration images become the input of a one-image-input model.
struct ImageInputSpec {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  float mean = 0.0f;  // input = (pixel - mean) / std, pixels 0..255 (the model's metadata)
  float std = 255.0f;
  bool nchw = false;  // the model's input is NCHW (imported ONNX models)
};

// Calibration images from `spec`:
//   "mnist", "fashion-mnist", or a folder of IDX data set files   the training split
//   an IDX file of u8 images [N,H,W] or [N,H,W,C]
//   a folder of image files (png, jpg, jpeg, bmp, gif, tga, pgm, ppm, pnm; subfolders too)
// At most `count` examples (all when count <= 0): the first ones of a data set or IDX file,
// and for an image folder, files spread evenly over the sorted list (class subfolders are
// sorted, so the first files would all be one class). Images are decoded one batch at a time
// and resized as `slimflow classify` does. Throws sf::Error naming the path on any problem.
std::unique_ptr<CalibrationSource> open_image_source(const std::string& spec, int64_t count,
                                                     const ImageInputSpec& input);

// Whether a --calib-data spec names .npy examples ("FILE.npy", "INPUT=FILE.npy,...") rather
// than images.
bool names_npy_examples(const std::string& spec);

// Calibration examples from .npy files, fed to the model's inputs as they are (the model's own
// layout and scaling, no image preprocessing; for models whose inputs are not images, such as
// a sequence of embeddings): "FILE.npy" for a one-input model, or "INPUT=FILE.npy,..." naming
// each input of `inputs` (placeholders of `graph`); files without a name go to the inputs in
// order. Examples lie along dimension 0: each file has its input's dtype and rank, and its
// input's shape past dimension 0, and every file holds as many examples. At most `count`
// examples (all when count <= 0). Throws sf::Error naming the file and the input.
std::unique_ptr<CalibrationSource> open_npy_source(const std::string& spec, int64_t count,
                                                   const Graph& graph,
                                                   const std::vector<std::string>& inputs);

struct CalibrationOptions {
  RangeOptions range;
  int64_t batch_size = 32;
  int threads = 0;  // 0: all cores
};

// Runs `graph` over `source` (fed to the Placeholders named `inputs`, in order) and returns the
// range of each tensor in `tensors` (node names, output 0, each f32). Throws sf::Error naming
// the node when a name is unknown or not f32, or when the source does not fit the inputs.
TensorRanges calibrate(const Graph& graph, const std::vector<std::string>& inputs,
                       const std::vector<std::string>& tensors, CalibrationSource& source,
                       const CalibrationOptions& options = {});

}  // namespace sf
