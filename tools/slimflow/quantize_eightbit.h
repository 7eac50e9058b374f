// `slimflow quantize --mode eightbit`: the integer graph (quantize/eightbit_rewrite.h), with
// activation ranges calibrated on data (quantize/calibration.h) or found at run time.
#pragma once

#include <string>
#include <vector>

namespace sf::cli {

struct EightbitArgs {
  std::string model;
  std::string out;
  std::string calib_data;  // empty: ranges at run time (RequantizationRange)
  int64_t calib_count = 1000;
  std::string method = "minmax";  // minmax | percentile | entropy
  bool per_channel = false;
  std::vector<std::string> exclude;
  bool report = false;
  float input_mean = 0.0f;  // calibration images: input = (pixel - mean) / std
  float input_std = 255.0f;
  int threads = 0;
  bool json = false;
};

int run_eightbit(const EightbitArgs& args);

}  // namespace sf::cli
