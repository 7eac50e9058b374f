// Runs a graph whose nodes are placed on several devices of this process.
//
// Per (fetches, input shapes) the graph is partitioned (placement/partition.h) and each
// device's part gets its own Session on its own thread (with `SessionOptions::device_threads`
// OpenMP threads). A cross-device edge is a rendezvous slot keyed by (edge, step): the
// producer's device puts the output there the moment it is computed (the tensor itself: the
// output stays valid until the step ends, as a fetch does), and the consumer's Recv takes it
// without a copy, checking dtype and shape. A device that fails aborts the rendezvous, so the
// others stop waiting and the step reports the first error. Each device's thread uses
// `use_threads` and, where the machine has the cores, runs on cores of its own.
//
// In an MPI job (`SessionOptions::processes`), every process plans the same partition and runs
// only the parts of its own devices (`/job:J/task:K/...` with K its rank); an edge between
// processes crosses by MPI (comm/process_exchange.h). A fetch computed by another process reaches
// this one too, unless it is among `SessionOptions::local_fetches` (then it is empty here).
#pragma once

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/session.h"

namespace sf {

class PartitionedRun {
 public:
  // `rng`: the session's generator, which seeds (or, when one device alone has dropout, is)
  // the devices' generators.
  PartitionedRun(const Graph& graph, const SessionOptions& options,
                 std::shared_ptr<VariableStore> variables, std::mt19937_64& rng);
  ~PartitionedRun();
  PartitionedRun(const PartitionedRun&) = delete;
  PartitionedRun& operator=(const PartitionedRun&) = delete;

  // Session::run's contract.
  std::vector<Tensor> run(const Feeds& feeds, const std::vector<Output>& fetches, bool training,
                          const FetchReady& on_fetch_ready);

  void set_profiling(bool enabled);
  std::vector<NodeProfile> profile() const;  // the last plan's, device by device
  size_t arena_bytes() const;
  size_t plan_count() const { return plans_.size(); }
  std::map<std::string, std::string> kernel_choices() const;

 private:
  struct Plan;
  class Rendezvous;
  class Worker;
  Plan& plan_for(const Feeds& feeds, const std::vector<Output>& fetches);
  Worker& worker(const std::string& device, const std::vector<int>& cores);

  const Graph& graph_;
  std::mt19937_64& rng_;
  SessionOptions options_;
  std::shared_ptr<VariableStore> variables_;
  std::unique_ptr<Rendezvous> rendezvous_;
  std::map<std::string, std::unique_ptr<Worker>> workers_;
  std::vector<std::pair<std::string, std::unique_ptr<Plan>>> plans_;
  Plan* last_plan_ = nullptr;
  bool profiling_ = false;
  int64_t step_ = 0;
};

}  // namespace sf
