// What one epoch of training reports (train --json, checkpoints' history) and its JSON form.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace sf {

struct EpochReport {
  int64_t epoch;  // 1-based
  int64_t epochs;
  int64_t step;
  double loss;
  double train_accuracy;
  double test_accuracy;
  int64_t test_count;
  double images_per_sec;
  double epoch_seconds;
  double peak_rss_mb;
  double current_rss_mb;
  double lr;
  // Data parallelism (one process: 1, batch, 0, 0, 0).
  int64_t world_size = 1;
  int64_t global_batch = 0;
  double comm_seconds = 0.0;         // wall time with gradient reductions in flight (rank 0)
  int64_t comm_bytes = 0;            // gradient bytes each rank allreduced this epoch
  double comm_bytes_per_step = 0.0;  // of them, per step (what compression divides)
  double overlap_fraction = 0.0;     // share of comm_seconds hidden behind the backward pass
  // Async data parallelism (parameter_servers > 0): the workers and, over the epoch, how many
  // updates the weights a step was computed on lacked (most, and mean over steps). comm_seconds
  // is then the longest time a worker waited for fresh enough weights.
  int64_t parameter_servers = 0;
  int64_t workers = 0;
  int64_t staleness_max = 0;
  double staleness_mean = 0.0;
  // The products' precision and why (auto: what the CPU has).
  std::string precision = "fp32";
  std::string precision_reason;
  int64_t micro_batches = 1;  // train --micro-batches
  // Sync data parallelism: dense layers whose weight gradients crossed as their factors
  // (GradientBuckets::exchange_as_factors; their bytes are in comm_bytes).
  int64_t factored_gradients = 0;
};

// One epoch as a JSON object (what `train --json` prints and checkpoints keep).
nlohmann::json epoch_report_to_json(const EpochReport& report);
// The same on one line.
std::string epoch_report_json(const EpochReport& report);
// A checkpoint's epoch report (older runs lack the later keys; their batch was `global_batch`).
EpochReport epoch_report_from_json(const nlohmann::json& report, int64_t global_batch);

}  // namespace sf
