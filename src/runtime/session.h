// Runs a graph: feeds in, fetches out.
//
// The first run for a given set of fetches and input shapes builds a plan: the nodes needed,
// one kernel object per node (created once, so oneDNN primitives are reused), and one arena
// whose slots are assigned by lifetime so that tensors that are never alive together share
// memory. Later runs reuse the plan and the arena, so memory does not grow from step to step.
// A new batch size makes a second plan (shapes are re-inferred by the ops' shape functions).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"
#include "graph/variable_store.h"
#include "kernels/kernel.h"
#include "runtime/precision.h"

namespace sf {

class PartitionedRun;
class ProcessExchange;
class Transfers;

struct SessionOptions {
  int threads = 0;          // 0: leave the OpenMP default (all cores)
  std::string kernel_impl;  // "" picks the best kernel; "reference" forces reference kernels
  uint64_t seed = 0;        // for dropout masks
  Precision precision = Precision::fp32;
  // Under bf16: layers that compute in fp32 all the same: a node named L, and the nodes a pass
  // split it into (named under it, `L/...`).
  std::set<std::string> fp32_layers;
  // A graph placed on several devices (placement/placer.h) runs each device's part on its
  // own thread with this many OpenMP threads (runtime/partitioned_run.h).
  int device_threads = 1;
  Transfers* transfers = nullptr;  // set by PartitionedRun for its devices' sessions
  std::mt19937_64* rng = nullptr;  // set: dropout draws from this generator, not the session's
  // Set: this process is one task of an MPI job whose devices (`/job:J/task:K/cpu:N`) the graph
  // is placed on; every process runs the same steps and computes its own devices' parts.
  ProcessExchange* processes = nullptr;
  // In a job: fetches returned only by the process that computes them (an empty tensor
  // elsewhere: a gradient is needed only next to its variable); every other fetch reaches every
  // process.
  std::vector<Output> local_fetches;
};

using Feeds = std::vector<std::pair<Output, Tensor>>;

// Called during a run as soon as fetch `index` has been computed, with its final value (valid
// until the next run), while later nodes still wait: data-parallel training starts reducing a
// gradient while the backward pass goes on.
using FetchReady = std::function<void(size_t index, const Tensor& value)>;

// Time spent in one node's kernel, accumulated over the runs since profiling was enabled.
struct NodeProfile {
  std::string name;
  std::string op;
  std::string impl;  // the kernel's; "sparse:dense" when a sparse kernel ran its dense fallback
  Shape output_shape;
  double seconds = 0.0;
  int64_t calls = 0;
  std::string device;  // set when the graph ran on several devices
};

class Session {
 public:
  // Plans kept at once (per fetches and input shapes); the oldest goes first.
  static constexpr size_t kMaxPlans = 8;

  explicit Session(const Graph& graph, SessionOptions options = {},
                   std::shared_ptr<VariableStore> variables = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Returns one tensor per fetch. Fetched tensors may live in the session's arena: they stay
  // valid until the next run(); clone() what must outlive it.
  std::vector<Tensor> run(const Feeds& feeds, const std::vector<Output>& fetches,
                          bool training = false, const FetchReady& on_fetch_ready = {});

  const Graph& graph() const { return graph_; }
  VariableStore& variables() { return *variables_; }
  void reseed(uint64_t seed) { rng_.seed(seed); }
  std::mt19937_64& rng() { return rng_; }

  // Per-node timing of later runs (off by default: it costs two clock reads per node).
  void set_profiling(bool enabled);
  // Nodes of the most recently used plan, in execution order.
  std::vector<NodeProfile> profile() const;

  // Bytes in all arenas of all plans (for tests of memory planning).
  size_t arena_bytes() const;
  size_t plan_count() const;
  // Whether the graph runs partitioned over several devices.
  bool partitioned() const { return partitioned_ != nullptr; }
  // The implementation chosen for each planned node, e.g. {"conv1": "onednn"}.
  std::map<std::string, std::string> kernel_choices() const;
  // Whether the last run ran on one thread, a small plan's (runs_on_one_thread).
  bool ran_on_one_thread() const;
  // Where the next run's bf16 products read `variable` rounded to bf16, if they read it from
  // one copy (RunShared::bf16_for_next_run): the caller rewriting the variable before that run
  // writes every element there too. Null otherwise (and for a partitioned graph).
  uint16_t* bf16_for_next_run(const Tensor& variable);

  // Inference plans of at most this many FLOPs per run run on one thread. Measured with
  // `bench --threads 1` against `--threads 2` (AMD EPYC, 2 cores, no AMX): the zoo's models at
  // batch 1 (0.8-7.4 MFLOP) ran 1.6-2.5x faster on one thread, fp32 and int8 alike, and
  // resnet-mnist at batch 4 (13 MFLOP) 2x; at 28-52 MFLOP it varied by model (Deep-MNIST at
  // batch 1 1.5x faster on two, squeezenet-mnist at batch 4 1.3x faster on one, resnet-mnist at
  // batch 16 even).
  static constexpr double kOneThreadPlanMaxFlops = 16e6;

 private:
  struct Plan;
  Plan& plan_for(const Feeds& feeds, const std::vector<Output>& fetches);
  // Whether a plan of these steps (step_of[id] >= 0) runs on one thread: an inference of at
  // most kOneThreadPlanMaxFlops, whose tensors then stay in one core's caches, where two threads
  // pass each node's output between the cores and wait for each other at every parallel region.
  bool runs_on_one_thread(const Graph& g, const std::vector<int>& step_of) const;

  Graph graph_;
  SessionOptions options_;
  std::shared_ptr<VariableStore> variables_;
  std::mt19937_64 rng_;
  std::mt19937_64* draws_;  // options_.rng or rng_
  std::vector<std::pair<std::vector<int64_t>, std::unique_ptr<Plan>>> plans_;
  std::vector<int64_t> key_;  // the running plan's key (plan_for), kept to reuse its buffer
  Plan* last_plan_ = nullptr;
  bool profiling_ = false;
  RunShared shared_;  // what this session's kernels share within a run
  // Set when the graph's nodes are on more than one device; a graph on one device never
  // pays for partitioning.
  std::unique_ptr<PartitionedRun> partitioned_;
};

}  // namespace sf
