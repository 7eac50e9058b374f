// `slimflow quantize --mode eightbit` as one call: a float model in, its 8-bit integer form out
// (eightbit_rewrite.h), with activation ranges calibrated on images when asked (calibration.h),
// learned in quantization-aware training (learned_ranges.h) or found at run time, and, on
// request, each rewritten layer's error on the calibration images (eightbit_report.h).
//
// Calibration images are decoded NHWC and go in as the model takes them: an imported ONNX
// model's input move to NHWC is skipped rather than undone (transforms/image_input.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "modelfile/model_file.h"
#include "quantize/calibration.h"
#include "quantize/eightbit_report.h"
#include "quantize/eightbit_rewrite.h"

namespace sf {

struct EightbitModelOptions {
  bool per_channel = false;
  std::set<std::string> exclude;  // nodes kept in float (the rewrite rejects unknown names)
  // Images as open_image_source takes them, or .npy examples as open_npy_source takes them
  // (names_npy_examples); empty: no calibration.
  std::string calib_data;
  int64_t calib_count = 1000;
  RangeMethod method = RangeMethod::minmax;
  float input_mean = 0.0f;  // calibration images are fed as (pixel - mean) / std
  float input_std = 255.0f;
  bool report = false;  // per-layer error on the calibration images (needs calib_data)
  int threads = 0;      // 0: all cores
  // Called once the calibration images are found, with their count, before calibrating.
  std::function<void(int64_t images)> on_calibrating;
};

struct EightbitModel {
  ModelFile model;  // the integer graph, the float model's interface and metadata, plus
                    // "quantization" (and "calibration") saying how it was made
  std::vector<EightbitLayer> layers;  // the layers rewritten, in graph order
  bool calibrated = false;
  bool learned_ranges = false;  // the float model was trained quantization-aware
  std::string ranges;           // where the activation ranges come from, in words
  int64_t calibration_images = 0;
  std::map<std::string, int> float_ops;  // ops still computing in float, by count
  std::vector<FloatNode> float_nodes;    // the model's nodes left in float, with why
  int64_t fp32_weight_bytes = 0;         // bytes of Const values before and after
  int64_t weight_bytes = 0;
  EightbitReport report;  // with options.report
};

// "BatchMatMul x4 (no integer kernel), Softmax x2 (no integer kernel)": the float nodes by op
// and reason, most frequent first; "nothing" when none.
std::string float_nodes_summary(const std::vector<FloatNode>& nodes);

// Throws sf::Error naming `name` (the model's path) for a model calibration cannot feed, and
// the errors of the rewrite and calibration (an excluded node that does not exist, bad images).
EightbitModel quantize_model_eightbit(const ModelFile& float_model, const std::string& name,
                                      const EightbitModelOptions& options);

}  // namespace sf
