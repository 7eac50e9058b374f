#include "train_parallel.h"

#include <chrono>
#include <memory>
#include <thread>

#include "comm/communicator.h"
#include "core/error.h"

namespace sf::cli {

void add_data_parallel_options(CLI::App& cmd, TrainOptions& options, double& comm_timeout) {
  cmd.add_option("--bucket-mb", options.bucket_mb,
                 "Under mpirun: gradient bucket size in MB, each allreduced while the backward "
                 "pass goes on")
      ->default_val(options.bucket_mb);
  cmd.add_option("--lr-scaling", options.lr_scaling,
                 "Under mpirun: learning rate x ranks (linear, the default), x sqrt(ranks) "
                 "(sqrt) or unchanged (none)");
  cmd.add_option("--grad-compression", options.grad_compression,
                 "Under mpirun: none | fp16 | topk:F (the largest F of each bucket's gradients) | "
                 "onebit; error feedback carries what is not sent to the next step")
      ->default_val(options.grad_compression);
  cmd.add_option("--factored-gradients", options.factored_gradients,
                 "Under mpirun, sync without compression: auto sends a dense layer's input and "
                 "output gradient instead of its weight gradient where they are fewer floats "
                 "(each rank forms its share of the average from them); off never does")
      ->check(CLI::IsMember({"auto", "off"}))
      ->default_val(options.factored_gradients);
  cmd.add_option("--comm-timeout", comm_timeout,
                 "Under mpirun: seconds a rank waits for the others before ending the job")
      ->default_val(comm_timeout);
  cmd.add_option("--data-parallel", options.data_parallel,
                 "Under mpirun: sync (allreduce, every rank applies the same update) or async "
                 "(parameter servers: workers push gradients and pull weights without waiting "
                 "for each other)")
      ->default_val(options.data_parallel);
  cmd.add_option("--ps", options.parameter_servers,
                 "With --data-parallel async: ranks 0..K-1 serve the parameters, sharded by size "
                 "(default 1); the other ranks train");
  cmd.add_option("--max-staleness", options.max_staleness,
                 "With --data-parallel async: a worker runs at most S steps ahead of the slowest "
                 "(default 4; 0 trains exactly as sync)");
  cmd.add_option("--check-replicas", options.check_replicas_every,
                 "Under mpirun: compare the replicas' weights every N steps (0: never)")
      ->default_val(options.check_replicas_every);
}

void run_as_job_member(TrainOptions& options, double comm_timeout,
                       const std::function<void()>& train) {
  if (launched_world_size() <= 1) {
    train();
    return;
  }
  // The same bad flag fails on every rank: rank 0 ends the job first and alone prints it; a
  // failure of one rank only still gets printed by that rank.
  auto let_rank_0_speak_first = [] {
    if (launched_rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
  };
  std::unique_ptr<Communicator> comm;
  try {
    if (!(comm_timeout > 0.0))
      fail("train: --comm-timeout must be a positive number of seconds, got {}", comm_timeout);
    comm = std::make_unique<Communicator>(CommOptions{.timeout_seconds = comm_timeout});
  } catch (const Error&) {
    let_rank_0_speak_first();
    throw;
  }
  options.comm = comm.get();
  try {
    train();
  } catch (const std::exception& e) {
    let_rank_0_speak_first();
    comm->abort(e.what());
  }
  options.comm = nullptr;
}

}  // namespace sf::cli
