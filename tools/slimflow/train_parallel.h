// `slimflow train` as one rank of an mpirun job: the data-parallel flags, and the job's
// communicator around a training run.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include "train/trainer.h"

namespace sf::cli {

// --bucket-mb, --lr-scaling, --grad-compression, --comm-timeout, --data-parallel, --ps,
// --max-staleness, --check-replicas.
void add_data_parallel_options(CLI::App& cmd, TrainOptions& options, double& comm_timeout);

// Runs `train` alone, or, when mpirun started this process with others, as a rank of the job:
// joins the job's communicator (options.comm) for the run's length. A rank whose run fails
// ends the whole job with its error, naming the rank, so that no other rank waits for it.
void run_as_job_member(TrainOptions& options, double comm_timeout,
                       const std::function<void()>& train);

}  // namespace sf::cli
