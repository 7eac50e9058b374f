// Asynchronous data parallelism with parameter servers (--data-parallel async --ps K), over the
// Communicator's tagged point-to-point operations.
//
// Ranks 0..K-1 serve: each holds a shard of the parameters (whole variables, spread by size) and
// the optimizer state for them. The other ranks are workers: each computes gradients on its
// shard of the data (train/sharded_batches.h, as sync's ranks do) with the weights it has,
// pushes them to the servers and goes on with its next batch without waiting for the others.
// A server applies update c (the gradients every worker computed at its step c, averaged) once
// they have all arrived, and sends the new weights of its shard to every worker.
//
// This is stale-synchronous parallelism (Ho et al. 2013): a worker about to compute its step c
// waits only until its weights hold every update up to c - S (--max-staleness S), so a fast
// worker runs at most S steps ahead of the slowest. S = 0 is synchronous training: the same
// averaged gradients applied to the same weights, hence the same weights as sync after any
// number of steps (tested). Gradients of one worker reach a server in order (MPI keeps the
// order of messages between two ranks with one tag), so the n-th message is its step n.
//
// Every wait is bounded by the communicator's timeout and names the ranks waited for. Progress
// counters (loss, accuracy) ride on the gradients sent to rank 0, so rank 0 can report progress
// while it serves. At a sync point (a checkpoint, an epoch's end) the workers drain what is in
// flight and the owners broadcast their variables (and optimizer slots), so every rank, rank 0
// above all, holds the whole model: rank 0 evaluates and writes the checkpoint as in sync.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "graph/variable_store.h"
#include "train/optimizer.h"

namespace sf {

// The server (0..servers-1) of each parameter: the largest first, each to the server holding
// the fewest elements so far (ties: the lower rank), so the shards' sizes stay close.
std::vector<int> assign_parameters_to_servers(const std::vector<int64_t>& sizes, int servers);

// Who holds what: the same on every rank.
class ParameterShards {
 public:
  ParameterShards(int rank, int world, int servers, std::vector<std::string> names,
                  std::vector<Shape> shapes);
  int servers() const { return servers_; }
  int workers() const { return world_ - servers_; }
  bool is_server() const { return rank_ < servers_; }
  int rank() const { return rank_; }
  // This worker's index among the workers (its data shard).
  int worker_index() const { return rank_ - servers_; }
  int worker_rank(int index) const { return servers_ + index; }
  int owner(size_t parameter) const { return owner_[parameter]; }
  const std::vector<size_t>& members(int server) const { return members_[static_cast<size_t>(server)]; }
  // Floats in `server`'s shard (its members' elements, in parameter order).
  int64_t elements(int server) const { return elements_[static_cast<size_t>(server)]; }
  const std::string& name(size_t parameter) const { return names_[parameter]; }
  const Shape& shape(size_t parameter) const { return shapes_[parameter]; }
  size_t parameters() const { return names_.size(); }

 private:
  int rank_, world_, servers_;
  std::vector<std::string> names_;
  std::vector<Shape> shapes_;
  std::vector<int> owner_;
  std::vector<std::vector<size_t>> members_;
  std::vector<int64_t> elements_;
};

// What a worker's step reports to rank 0 with its gradients.
struct StepReport {
  double loss_sum = 0.0;  // loss x examples
  int64_t correct = 0;
  int64_t examples = 0;
};

struct AsyncStats {
  int64_t steps = 0;           // gradients this worker pushed
  int64_t staleness_sum = 0;   // updates missing from the weights each step was computed on
  int64_t staleness_max = 0;
  int64_t bytes = 0;           // gradient bytes this worker sent
  double wait_seconds = 0.0;   // blocked until its weights were fresh enough
};

class AsyncWorker {
 public:
  AsyncWorker(Communicator& comm, const ParameterShards& shards, VariableStore& variables,
              int64_t max_staleness, int64_t start_step);
  // Before computing step `step`: takes the weights that have arrived and waits until they hold
  // every update up to step - max_staleness.
  void await_weights(int64_t step);
  // Sends the step's gradients (one per parameter) to their servers, the report to rank 0.
  void push(const std::vector<Tensor>& gradients, const StepReport& report);
  // Waits for every update its pushes lead to (a sync point): then its weights are the servers'.
  void drain();
  AsyncStats take_stats();

 private:
  struct Outgoing {
    Tensor message;
    CommRequest request;
  };
  bool poll();  // true when anything completed
  void post_receive(int server);
  int64_t version() const;  // updates held from every server

  Communicator& comm_;
  const ParameterShards& shards_;
  VariableStore& variables_;
  int64_t max_staleness_;
  int64_t pushed_;                  // steps pushed (the job's step count at start included)
  std::vector<int64_t> versions_;   // updates received, by server
  std::vector<Tensor> incoming_;    // by server
  std::vector<CommRequest> receives_;
  std::deque<Outgoing> sends_;
  AsyncStats stats_;
};

class ParameterServer {
 public:
  // apply(step, parameters, averaged gradients): the optimizer step for `step` on these
  // parameters of this server's shard (the trainer's update, as in sync).
  using ApplyUpdate = std::function<void(int64_t step, const std::vector<size_t>& parameters,
                                         const std::vector<Tensor>& gradients)>;
  ParameterServer(Communicator& comm, const ParameterShards& shards, VariableStore& variables,
                  ApplyUpdate apply, int64_t start_step);
  // Serves until `step` updates are applied (every worker pushed that many steps) and their
  // weights sent; `on_update` runs after each update.
  void serve_until(int64_t step, const std::function<void(int64_t applied)>& on_update);
  int64_t applied() const { return applied_; }
  // Rank 0: the workers' step reports received since the last call.
  StepReport take_reports();

 private:
  struct Outgoing {
    Tensor message;
    std::vector<CommRequest> requests;
  };
  bool poll(int64_t target);
  void post_receive(int worker);
  void apply_next();

  Communicator& comm_;
  const ParameterShards& shards_;
  VariableStore& variables_;
  ApplyUpdate apply_;
  int64_t applied_;
  std::vector<int64_t> received_;  // steps received, by worker
  std::vector<Tensor> incoming_;   // by worker
  std::vector<CommRequest> receives_;
  std::deque<Tensor> sums_;        // summed gradients of steps applied_, applied_ + 1, ...
  std::deque<int> arrivals_;       // workers whose gradients are in each sum
  std::deque<Outgoing> sends_;
  StepReport reports_;
};

// Every rank gets each parameter's value from its owner (`owners`, by parameter) and, with an
// optimizer, its optimizer slots too: the servers' shards of async training, or the tasks a
// model placed on an MPI job's devices updates (every rank calls it at the same point).
void share_parameters(Communicator& comm, const std::vector<std::string>& names,
                      const std::vector<Shape>& shapes, const std::vector<int>& owners,
                      VariableStore& variables, Optimizer* optimizer);

// At a sync point: every parameter's owner broadcasts its value, and with several servers the
// optimizer slots too (into `optimizer` on every rank), so that each rank holds the whole state.
void gather_parameters(Communicator& comm, const ParameterShards& shards, VariableStore& variables,
                       Optimizer& optimizer);

}  // namespace sf
