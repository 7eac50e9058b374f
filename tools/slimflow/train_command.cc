#include <algorithm>
#include <cstdio>
#include <fmt/format.h>
#include <map>
#include <memory>

#include "cli_hygiene.h"
#include "commands.h"
#include "placement_flags.h"
#include "progress.h"
#include "train/trainer.h"
#include "train_flags.h"
#include "train_parallel.h"

namespace sf::cli {

void add_training_flags(CLI::App* cmd, TrainOptions& options, bool& json_output, bool& quiet) {
  cmd->add_option("--model", options.model_path, "Model spec (YAML), e.g. models/deep-mnist.yaml");
  cmd->add_option("--data", options.data,
                  "mnist, fashion-mnist, or a folder of IDX files (raw or .gz)")
      ->default_str("mnist");
  cmd->add_option("--out", options.out_dir, "Run directory for checkpoints");
  cmd->add_option("--resume", options.resume_dir,
                  "Continue the run in this directory from its last checkpoint");
  cmd->add_option("--init-from", options.init_from,
                  "Start a new run (--out) from this run's weights and options (fine-tuning)");
  cmd->add_option("--epochs", options.epochs,
                  "Epochs to train (with --resume: epochs to add to where the run stopped)");
  cmd->add_option("--batch", options.batch, "Batch size (spec default, else 64)");
  cmd->add_option("--lr", options.lr, "Learning rate (spec default, else 0.001)");
  cmd->add_option("--optimizer", options.optimizer, "sgd | momentum | adam")
      ->check(CLI::IsMember({"sgd", "momentum", "adam"}));
  cmd->add_option("--weight-decay", options.weight_decay, "Decoupled weight decay");
  cmd->add_option("--momentum", options.momentum, "Momentum for --optimizer momentum");
  cmd->add_option("--lr-schedule", options.lr_schedule, "constant | step | cosine")
      ->check(CLI::IsMember({"constant", "step", "cosine"}));
  cmd->add_option("--seed", options.seed, "Random seed (initial weights, data order, dropout)");
  cmd->add_option("--threads", options.threads, "Threads (0: all cores)")->default_val(0);
  cmd->add_option("--checkpoint-every", options.checkpoint_every,
                  "Also checkpoint every N steps (default: at the end of each epoch)");
  cmd->add_option("--train-limit", options.train_limit, "Use only the first N training examples");
  cmd->add_option("--test-limit", options.test_limit, "Use only the first N test examples");
  cmd->add_option("--augment", options.augment,
                  "Training-image augmentation: shift:N (random moves of up to N pixels), flip "
                  "(mirror left-right), or both: shift:2,flip");
  cmd->add_option("--qat", options.qat_bits,
                  "Quantization-aware training: weights fake-quantized to BITS (2..8) per channel, "
                  "activations to 8 bits with learned ranges (quantize then uses them)")
      ->check(CLI::Range(2, 8));
  cmd->add_option("--binarize", options.binarize,
                  "Binarized training: weights (BinaryConnect), xnor (XNOR-Net: weights and "
                  "inputs), ternary (TWN); the first conv and last dense stay float")
      ->check(CLI::IsMember({"weights", "xnor", "ternary"}));
  cmd->add_flag("--binarize-all", options.binarize_all,
                "With --binarize: binarize the first conv and the last dense layer too");
  cmd->add_option("--kernels", options.kernel_impl, "Force a kernel implementation (reference)");
  // AMX trains the CNN in bf16 1.5x faster than fp32 to the same accuracy; elsewhere bf16
  // products are slower than fp32, so auto keeps fp32 there.
  options.precision = "auto";
  cmd->add_option("--precision", options.precision,
                  "auto (default: bf16 where the CPU has AMX, fp32 elsewhere), fp32 or bf16 (mixed "
                  "precision: conv and matmul forward and backward in bf16, fp32 master weights, "
                  "optimizer state, losses and checkpoints); the epoch JSON says which ran and why")
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
  cmd->add_flag("--json", json_output, "Print one JSON object per epoch on stdout");
  cmd->add_flag("--quiet", quiet, "No progress line");
  cmd->add_flag("--profile", options.profile, "Print per-node training-step times each epoch");
  cmd->add_flag("--overwrite", options.overwrite,
                "With --out: replace the run already in that directory");
}

TrainCallbacks printing_callbacks(bool json_output, bool quiet) {
  auto printer = std::make_shared<ProgressPrinter>();
  TrainCallbacks callbacks;
  if (!quiet) callbacks.on_progress = [printer](const Progress& p) { printer->update(p); };
  callbacks.on_message = [printer](const std::string& m) {
    printer->end_line();
    std::fprintf(stderr, "%s\n", m.c_str());
  };
  callbacks.on_profile = [printer](std::vector<NodeProfile> nodes) {
    printer->end_line();
    double total = 0.0;
    for (const NodeProfile& n : nodes) total += n.seconds;
    std::sort(nodes.begin(), nodes.end(),
              [](const NodeProfile& a, const NodeProfile& b) { return a.seconds > b.seconds; });
    int impl_width = 10;
    for (const NodeProfile& n : nodes)
      impl_width = std::max(impl_width, static_cast<int>(n.impl.size()));
    std::fprintf(stderr, "%-40s %-22s %-*s %9s %6s\n", "node", "op", impl_width, "impl",
                 "ms/step", "share");
    for (const NodeProfile& n : nodes) {
      if (n.calls == 0 || n.seconds < 0.002 * total) continue;
      std::fprintf(stderr, "%-40s %-22s %-*s %9.3f %5.1f%%\n", n.name.c_str(), n.op.c_str(),
                   impl_width, n.impl.c_str(), 1000.0 * n.seconds / static_cast<double>(n.calls),
                   100.0 * n.seconds / total);
    }
    // A graph split over devices: each device's kernel time, and how much of it is Recv (waiting
    // for another device).
    std::map<std::string, std::pair<double, double>> devices;
    for (const NodeProfile& n : nodes) {
      if (n.device.empty() || n.calls == 0) continue;
      const double ms = 1000.0 * n.seconds / static_cast<double>(n.calls);
      devices[n.device].first += ms;
      if (n.op == "Recv") devices[n.device].second += ms;
    }
    for (const auto& [device, ms] : devices)
      std::fprintf(stderr, "device %-24s %9.3f ms/step, %9.3f of them in Recv\n", device.c_str(),
                   ms.first, ms.second);
  };
  callbacks.on_epoch = [printer, json_output](const EpochReport& r) {
    printer->end_line();
    std::fprintf(stderr,
                 "epoch %lld/%lld: loss %.4f  train acc %.2f%%  test acc %.2f%% (%lld images)  "
                 "%.1f s  %.0f img/s  peak RSS %.0f MB\n",
                 static_cast<long long>(r.epoch), static_cast<long long>(r.epochs), r.loss,
                 100.0 * r.train_accuracy, 100.0 * r.test_accuracy,
                 static_cast<long long>(r.test_count), r.epoch_seconds, r.images_per_sec,
                 r.peak_rss_mb);
    if (json_output) {
      std::printf("%s\n", epoch_report_json(r).c_str());
      std::fflush(stdout);
    }
  };
  return callbacks;
}

Action add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model from a spec under models/");
  auto options = std::make_shared<TrainOptions>();
  auto json_output = std::make_shared<bool>(false);
  auto quiet = std::make_shared<bool>(false);
  add_training_flags(cmd, *options, *json_output, *quiet);
  auto comm_timeout = std::make_shared<double>(30.0);
  add_data_parallel_options(*cmd, *options, *comm_timeout);
  auto placement = std::make_shared<PlacementFlags>();
  add_placement_flags(cmd, *placement);
  cmd->add_option("--micro-batches", options->micro_batches,
                  "Pipelining over a model placed on several devices (GPipe): each batch in M "
                  "equal micro-batches that the devices work on at once, gradients accumulated "
                  "into the whole batch's, then one optimizer step (M must divide --batch; no "
                  "batch norm)")
      ->default_val(1)
      ->check(at_least(1));

  return [options, json_output, quiet, comm_timeout, placement]() {
    // An empty --data means mnist for a new run and the run's own data set with --resume.
    TrainOptions opts = *options;
    opts.device = placement->device;
    opts.cpu_devices = placement->cpu_devices;
    opts.device_threads = placement->device_threads;
    opts.strict_placement = placement->strict;
    TrainCallbacks callbacks = printing_callbacks(*json_output, *quiet);
    callbacks.on_placement = [placement, json = *json_output](const Graph& graph,
                                                              const PlacementReport& report) {
      write_placement_log(*placement, graph, report, json);
    };
    run_as_job_member(opts, *comm_timeout, [&] { train(opts, callbacks); });
    return 0;
  };
}

}  // namespace sf::cli
