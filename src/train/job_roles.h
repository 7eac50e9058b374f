// Who a training process is in its job: from the communicator and the data-parallel flags, the
// replicas it averages with (sync) or the parameter servers it works with (async), and its shard
// of every step's data.
#pragma once

#include <cstdint>

#include "models/spec.h"
#include "train/trainer.h"

namespace sf {

class Communicator;

struct JobRoles {
  // Data parallelism's replicas; a model placed on the job's devices sets `job` instead.
  Communicator* comm = nullptr;
  Communicator* job = nullptr;
  int rank = 0;
  int world = 1;
  bool async = false;
  int64_t servers = 0;  // async: the first `servers` ranks serve parameters
  int64_t max_staleness = 4;
  bool serving = false;
  // The ranks that train, each on its shard of every step's data, and this rank's shard.
  int shards = 1;
  int shard = 0;
};

// This process's roles; a flag that does not fit the job (or, with `prunes`, async training) is
// a one-line error.
JobRoles job_roles(const TrainOptions& options, bool prunes);

// Model parallelism: a spec placed on an MPI job's devices trains as one model, each process
// running its devices' part on the same batches (no replicas, no shards).
void place_on_job(JobRoles& roles, const ModelSpec& spec);

}  // namespace sf
