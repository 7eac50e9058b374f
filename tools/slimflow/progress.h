// The live progress line that training-like commands (train, prune) print on stderr.
#pragma once

#include <chrono>
#include <string>

#include "train/trainer.h"

namespace sf::cli {

// "1:05" or "2h03m".
std::string format_duration(double seconds);

// One live line on a terminal (rewritten in place a few times a second); on a pipe or log
// file, a plain line every 15 seconds.
class ProgressPrinter {
 public:
  ProgressPrinter();
  void update(const Progress& p);
  void end_line();

 private:
  bool tty_;
  bool pending_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace sf::cli
