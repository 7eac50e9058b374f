#include "train/epoch_report.h"

#include <nlohmann/json.hpp>

namespace sf {

using json = nlohmann::json;

json epoch_report_to_json(const EpochReport& r) {
  json j = {{"epoch", r.epoch},
            {"epochs", r.epochs},
            {"step", r.step},
            {"loss", r.loss},
            {"train_accuracy", r.train_accuracy},
            {"test_accuracy", r.test_accuracy},
            {"test_count", r.test_count},
            {"images_per_sec", r.images_per_sec},
            {"epoch_seconds", r.epoch_seconds},
            {"peak_rss_mb", r.peak_rss_mb},
            {"current_rss_mb", r.current_rss_mb},
            {"lr", r.lr},
            {"world_size", r.world_size},
            {"global_batch", r.global_batch},
            {"comm_seconds", r.comm_seconds},
            {"comm_bytes", r.comm_bytes},
            {"comm_bytes_per_step", r.comm_bytes_per_step},
            {"overlap_fraction", r.overlap_fraction},
            {"precision", r.precision},
            {"precision_reason", r.precision_reason},
            {"micro_batches", r.micro_batches},
            {"factored_gradients", r.factored_gradients}};
  if (r.parameter_servers > 0) {
    j["data_parallel"] = "async";
    j["parameter_servers"] = r.parameter_servers;
    j["workers"] = r.workers;
    j["staleness_max"] = r.staleness_max;
    j["staleness_mean"] = r.staleness_mean;
  }
  return j;
}

std::string epoch_report_json(const EpochReport& report) {
  return epoch_report_to_json(report).dump();
}

EpochReport epoch_report_from_json(const json& r, int64_t global_batch) {
  return EpochReport{r.at("epoch"),
                     r.at("epochs"),
                     r.at("step"),
                     r.at("loss"),
                     r.at("train_accuracy"),
                     r.at("test_accuracy"),
                     r.at("test_count"),
                     r.at("images_per_sec"),
                     r.at("epoch_seconds"),
                     r.at("peak_rss_mb"),
                     r.at("current_rss_mb"),
                     r.at("lr"),
                     r.value("world_size", int64_t{1}),
                     r.value("global_batch", global_batch),
                     r.value("comm_seconds", 0.0),
                     r.value("comm_bytes", int64_t{0}),
                     r.value("comm_bytes_per_step", 0.0),
                     r.value("overlap_fraction", 0.0),
                     r.value("parameter_servers", int64_t{0}),
                     r.value("workers", int64_t{0}),
                     r.value("staleness_max", int64_t{0}),
                     r.value("staleness_mean", 0.0),
                     r.value("precision", std::string("fp32")),
                     r.value("precision_reason", std::string()),
                     r.value("micro_batches", int64_t{1}),
                     r.value("factored_gradients", int64_t{0})};
}

}  // namespace sf
