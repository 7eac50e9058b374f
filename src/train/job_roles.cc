#include "train/job_roles.h"

#include <utility>

#include "comm/communicator.h"
#include "core/error.h"

namespace sf {

JobRoles job_roles(const TrainOptions& options, bool prunes) {
  JobRoles roles;
  roles.comm = options.comm;
  roles.rank = roles.comm ? roles.comm->rank() : 0;
  roles.world = roles.comm ? roles.comm->size() : 1;
  if (options.data_parallel != "sync" && options.data_parallel != "async")
    fail("train: --data-parallel must be sync or async, got '{}'", options.data_parallel);
  roles.async = options.data_parallel == "async";
  if (!roles.async && options.parameter_servers)
    fail("train: --ps {} needs --data-parallel async", *options.parameter_servers);
  if (!roles.async && options.max_staleness)
    fail("train: --max-staleness {} needs --data-parallel async", *options.max_staleness);
  roles.max_staleness = options.max_staleness.value_or(4);
  if (roles.max_staleness < 0)
    fail("train: --max-staleness must be 0 or more, got {}", roles.max_staleness);
  roles.servers = roles.async ? options.parameter_servers.value_or(1) : 0;
  if (roles.async && !roles.comm)
    fail(
        "train: --data-parallel async needs an mpirun job of more ranks than --ps {} (e.g. "
        "mpirun -np {} slimflow train ...)",
        roles.servers, roles.servers + 2);
  if (roles.async && (roles.servers < 1 || roles.servers >= roles.world))
    fail(
        "train: --ps {} must be 1..{} for this {}-rank job: at least one rank serves and one "
        "trains",
        roles.servers, roles.world - 1, roles.world);
  if (roles.async && options.grad_compression != "none")
    fail(
        "train: --grad-compression {} compresses sync's allreduce; drop it with --data-parallel "
        "async",
        options.grad_compression);
  if (roles.async && prunes) fail("train: this training (pruning) needs --data-parallel sync");
  roles.serving = roles.async && roles.rank < roles.servers;
  roles.shards = static_cast<int>(roles.world - roles.servers);
  roles.shard = static_cast<int>(roles.rank - roles.servers);
  return roles;
}

void place_on_job(JobRoles& roles, const ModelSpec& spec) {
  if (!roles.comm || spec.job.empty()) return;
  if (roles.async)
    fail(
        "train: {} places its layers on /job:{}, whose processes train one model; drop "
        "--data-parallel async",
        spec.origin, spec.job);
  roles.job = std::exchange(roles.comm, nullptr);
  roles.world = roles.shards = 1;
  roles.shard = 0;
}

}  // namespace sf
