#include "progress.h"

#include <unistd.h>

#include <cstdio>
#include <fmt/format.h>

namespace sf::cli {

std::string format_duration(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

ProgressPrinter::ProgressPrinter() : tty_(isatty(fileno(stderr)) != 0) {}

void ProgressPrinter::update(const Progress& p) {
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_).count();
  bool last_batch = p.batch == p.batches;
  if (since < (tty_ ? 0.25 : 15.0) && !last_batch) return;
  last_ = now;
  std::string line = fmt::format(
      "epoch {}/{}  step {}/{}  loss {:.4f}  acc {:.2f}%  {:.0f} img/s  ETA {}", p.epoch,
      p.epochs, p.batch, p.batches, p.loss, 100.0 * p.accuracy, p.images_per_sec,
      format_duration(p.eta_seconds));
  if (tty_) {
    std::fprintf(stderr, "\r%-100s", line.c_str());
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
  pending_ = tty_;
}

void ProgressPrinter::end_line() {
  if (pending_) std::fprintf(stderr, "\n");
  pending_ = false;
}

}  // namespace sf::cli
