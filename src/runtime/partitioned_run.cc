#include "runtime/partitioned_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "cpu/core_pinning.h"
#include "cpu/thread_count.h"
#include "kernels/kernel.h"
#include "ops/op_names.h"
#include "placement/device_name.h"
#include "placement/partition.h"
#include "comm/process_exchange.h"

namespace sf {

namespace {

// What a thread does while it spins on a value another core is about to write.
inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#else
  std::this_thread::yield();
#endif
}

}  // namespace

// Tensors in flight between the devices of this process, one slot per edge.
class PartitionedRun::Rendezvous {
 public:
  void send(const std::string& key, int64_t step, const Tensor& value) {
    {
      std::lock_guard lock(mutex_);
      Slot& slot = slots_[key];
      slot.value = value;
      slot.step.store(step, std::memory_order_release);
    }
    arrived_.notify_all();
  }

  Tensor receive(const std::string& key, int64_t step) {
    Slot* slot = nullptr;
    {
      std::lock_guard lock(mutex_);
      slot = &slots_[key];  // std::map keeps its nodes where they are
    }
    // A hand-over between running devices is usually a microsecond or less away; waking a
    // sleeping thread costs tens. So spin on the slot (no lock) for a while before sleeping,
    // giving the core away now and then in case the sender waits for it: the sender writes the
    // value before it publishes the step, and writes the slot again only in a later step,
    // after every device has finished this one.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    for (int spins = 0; slot->step.load(std::memory_order_acquire) != step &&
                        !aborting_.load(std::memory_order_relaxed);
         ++spins) {
      cpu_relax();
      if (spins % 64 != 63) continue;
      if (std::chrono::steady_clock::now() > spin_until) break;
      std::this_thread::yield();
    }
    if (slot->step.load(std::memory_order_acquire) != step) {
      std::unique_lock lock(mutex_);
      arrived_.wait(lock, [&] {
        return slot->step.load(std::memory_order_acquire) == step || !aborted_.empty();
      });
      if (slot->step.load(std::memory_order_acquire) != step) throw Error(aborted_);
    }
    return slot->value;
  }

  // Wakes every receiver: `why` is what they throw. True for the first abort of a step (the
  // failing device's; the others fail because of it).
  bool abort(const std::string& why) {
    bool first = false;
    {
      std::lock_guard lock(mutex_);
      if (aborted_.empty()) aborted_ = why, first = true;
      aborting_.store(true, std::memory_order_relaxed);
    }
    arrived_.notify_all();
    return first;
  }
  void reset() {
    std::lock_guard lock(mutex_);
    aborted_.clear();
    aborting_.store(false, std::memory_order_relaxed);
  }
  bool aborted() {
    std::lock_guard lock(mutex_);
    return !aborted_.empty();
  }

 private:
  struct Slot {
    std::atomic<int64_t> step{-1};
    Tensor value;
  };
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::string, Slot> slots_;
  std::string aborted_;
  std::atomic<bool> aborting_{false};
};

// A device's thread: it keeps its OpenMP team between steps, on its own cores when it has any.
class PartitionedRun::Worker {
 public:
  explicit Worker(std::vector<int> cores)
      : cores_(std::move(cores)), thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void start(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      job_ = std::move(job);
      done_ = false;
    }
    wake_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [&] { return done_; });
  }
  bool done() {
    std::lock_guard lock(mutex_);
    return done_;
  }

 private:
  void loop() {
    // Threads inherit their creator's cores, so the OpenMP team this thread starts stays there.
    if (!cores_.empty()) pin_this_thread(cores_);
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || static_cast<bool>(job_); });
      if (stop_) return;
      std::function<void()> job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      job();  // catches its own errors
      lock.lock();
      done_ = true;
      finished_.notify_all();
    }
  }

  std::vector<int> cores_;
  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  std::function<void()> job_;
  bool done_ = true;
  bool stop_ = false;
  std::thread thread_;  // last: it starts running loop() at once
};

namespace {

// What a device's Recv nodes read: this step's slot of their edge.
class DeviceTransfers : public Transfers {
 public:
  explicit DeviceTransfers(std::function<Tensor(const std::string&)> take)
      : take_(std::move(take)) {}
  Tensor receive(const Node& recv) override { return take_(recv.attrs.get_string("edge")); }

 private:
  std::function<Tensor(const std::string&)> take_;
};

bool has_random_ops(const Graph& graph) {
  for (const Node& n : graph.nodes())
    if (n.op == op_names::kDropout) return true;
  return false;
}

}  // namespace

struct PartitionedRun::Plan {
  struct Part {
    std::string device;
    bool local = true;  // runs in this process (every part does outside an MPI job)
    std::vector<int> cores;  // its threads' cores; empty: not pinned
    bool reseed = false;  // draws its own dropout masks, seeded from the caller's generator
    std::unique_ptr<DeviceTransfers> transfers;
    std::unique_ptr<Session> session;
    std::vector<std::pair<size_t, Output>> feeds;  // (index in the caller's feeds, local node)
    std::vector<Output> fetches;                   // local
    // By local fetch: the caller's fetch indices it answers and the keys it sends under.
    std::vector<std::vector<size_t>> answers;
    std::vector<std::vector<std::string>> sends;
    // Sources (placeholders, variables, constants) read on another device: sent before the
    // part runs, since no kernel computes them.
    std::vector<std::pair<int, std::vector<std::string>>> source_sends;  // (local node, keys)
  };
  Graph graph;
  std::vector<Part> parts;
  // In an MPI job: the keys that leave this process and where to, and what arrives from the
  // others (an edge's tensor, or a fetch computed elsewhere: its index in incoming_fetch).
  std::map<std::string, std::vector<ProcessExchange::Outgoing>> outgoing;
  std::vector<ProcessExchange::Incoming> incoming;
  std::vector<int64_t> incoming_fetch;  // by incoming: the fetch it answers, or -1 for an edge
};

PartitionedRun::PartitionedRun(const Graph& graph, const SessionOptions& options,
                               std::shared_ptr<VariableStore> variables, std::mt19937_64& rng)
    : graph_(graph),
      rng_(rng),
      options_(options),
      variables_(std::move(variables)),
      rendezvous_(std::make_unique<Rendezvous>()) {}

PartitionedRun::~PartitionedRun() = default;

PartitionedRun::Worker& PartitionedRun::worker(const std::string& device,
                                               const std::vector<int>& cores) {
  auto& w = workers_[device];
  if (!w) w = std::make_unique<Worker>(cores);
  return *w;
}

PartitionedRun::Plan& PartitionedRun::plan_for(const Feeds& feeds,
                                               const std::vector<Output>& fetches) {
  std::string key;
  std::map<int, Shape> changed;
  for (const Output& f : fetches) key += fmt::format("{}:{},", f.node, f.index);
  key += "|";
  for (const auto& [out, tensor] : feeds) {
    key += fmt::format("{}{};", out.node, shape_str(tensor.shape()));
    if (graph_.node(out.node).outputs[0].shape != tensor.shape())
      changed[out.node] = tensor.shape();
  }
  for (auto& [k, plan] : plans_)
    if (k == key) return *plan;

  auto plan = std::make_unique<Plan>();
  plan->graph = graph_;
  if (!changed.empty()) plan->graph.reinfer(changed);
  const Graph& g = plan->graph;
  const Partition partition = partition_graph(g, needed_nodes(g, fetches));

  ProcessExchange* const processes = options_.processes;
  const int me = processes ? processes->rank() : 0;
  auto task_of = [&](const std::string& device) {
    if (!processes) return me;
    const DeviceName name = DeviceName::parse(device, "partitioned run");
    return name.job.empty() ? me : name.task;
  };

  std::vector<std::string> devices;
  for (const DevicePart& dp : partition.parts) devices.push_back(dp.device);
  const CorePlan cores = plan_device_cores(devices, options_.device_threads);
  int random_parts = 0;
  for (const DevicePart& dp : partition.parts) random_parts += has_random_ops(dp.graph);
  std::map<std::string, size_t> part_index;
  for (size_t d = 0; d < partition.parts.size(); ++d) {
    const DevicePart& dp = partition.parts[d];
    part_index[dp.device] = plan->parts.size();
    Plan::Part& part = plan->parts.emplace_back();
    part.device = dp.device;
    part.local = task_of(dp.device) == me;
    if (!cores.cores.empty()) part.cores = cores.cores[d];
    part.reseed = random_parts > 1 && has_random_ops(dp.graph);
    if (!part.local) continue;
    Rendezvous* rendezvous = rendezvous_.get();
    const int64_t* step = &step_;
    part.transfers = std::make_unique<DeviceTransfers>(
        [rendezvous, step](const std::string& edge) { return rendezvous->receive(edge, *step); });
    SessionOptions options = options_;
    options.threads = 0;  // set on the device's own thread
    options.transfers = part.transfers.get();
    options.processes = nullptr;
    // Dropout masks: when one device alone draws them, it draws from the caller's generator,
    // in the same order as one device would (so a split model trains exactly as the whole).
    if (random_parts == 1 && has_random_ops(dp.graph)) options.rng = &rng_;
    part.session = std::make_unique<Session>(dp.graph, options, variables_);
    for (size_t i = 0; i < feeds.size(); ++i) {
      const int local = dp.local_of[static_cast<size_t>(feeds[i].first.node)];
      if (local >= 0) part.feeds.emplace_back(i, Output{local, 0});
    }
  }
  auto local_fetch = [&](Plan::Part& part, Output local) -> size_t {
    for (size_t i = 0; i < part.fetches.size(); ++i)
      if (part.fetches[i] == local) return i;
    part.fetches.push_back(local);
    part.answers.emplace_back();
    part.sends.emplace_back();
    return part.fetches.size() - 1;
  };
  // Sources have no kernel: they are sent before their part runs; the rest when computed.
  auto add_send = [&](Plan::Part& part, const DevicePart& dp, Output local, const std::string& k) {
    const std::string& op = dp.graph.node(local.node).op;
    if (op == op_names::kPlaceholder || op == op_names::kVariable || op == op_names::kConst) {
      auto it = std::find_if(part.source_sends.begin(), part.source_sends.end(),
                             [&](const auto& s) { return s.first == local.node; });
      if (it == part.source_sends.end())
        it = part.source_sends.insert(part.source_sends.end(), {local.node, {}});
      it->second.push_back(k);
    } else {
      part.sends[local_fetch(part, local)].push_back(k);
    }
  };
  // MPI tags: transfers by index, then fetches (the same numbering in every process).
  const size_t transfers = partition.transfers.size();
  if (processes && transfers + fetches.size() > static_cast<size_t>(processes->max_tag()))
    fail("partitioned run: {} cross-device edges and {} fetches need more MPI tags than the {} "
         "this MPI offers",
         transfers, fetches.size(), processes->max_tag());
  for (size_t i = 0; i < fetches.size(); ++i) {
    const std::string& device = g.node(fetches[i].node).device;
    const DevicePart& dp = partition.parts[part_index.at(device)];
    Plan::Part& part = plan->parts[part_index.at(device)];
    const bool everywhere =
        processes && std::find(options_.local_fetches.begin(), options_.local_fetches.end(),
                               fetches[i]) == options_.local_fetches.end();
    const std::string fetch_key = fmt::format("fetch {} ({}:{})", i, g.node(fetches[i].node).name,
                                              fetches[i].index);
    const int tag = static_cast<int>(transfers + i);
    if (!part.local) {
      if (!everywhere) continue;
      const TensorType& type = g.type(fetches[i]);
      plan->incoming.push_back({fetch_key, task_of(device), tag, type.dtype, type.shape, device});
      plan->incoming_fetch.push_back(static_cast<int64_t>(i));
      continue;
    }
    const Output local{dp.local_of[static_cast<size_t>(fetches[i].node)], fetches[i].index};
    part.answers[local_fetch(part, local)].push_back(i);
    if (!everywhere) continue;
    for (int task = 0; task < processes->size(); ++task)
      if (task != me) plan->outgoing[fetch_key].push_back({task, tag});
    add_send(part, dp, local, fetch_key);
  }
  for (size_t t = 0; t < transfers; ++t) {
    const TransferEdge& edge = partition.transfers[t];
    const std::string& k = partition.keys[t];
    const size_t p = part_index.at(edge.from_device);
    const DevicePart& dp = partition.parts[p];
    Plan::Part& part = plan->parts[p];
    const int to_task = task_of(edge.to_device);
    if (!part.local) {
      if (to_task != me) continue;
      const TensorType& type = g.type(edge.from);
      plan->incoming.push_back({k, task_of(edge.from_device), static_cast<int>(t), type.dtype,
                                type.shape, edge.from_device});
      plan->incoming_fetch.push_back(-1);
      continue;
    }
    if (to_task != me) plan->outgoing[k].push_back({to_task, static_cast<int>(t)});
    add_send(part, dp, Output{dp.local_of[static_cast<size_t>(edge.from.node)], edge.from.index},
             k);
  }
  for (Plan::Part& part : plan->parts)
    if (part.session) part.session->set_profiling(profiling_);

  if (plans_.size() >= Session::kMaxPlans) {
    if (last_plan_ == plans_.front().second.get()) last_plan_ = nullptr;
    plans_.erase(plans_.begin());
  }
  plans_.emplace_back(key, std::move(plan));
  return *plans_.back().second;
}

std::vector<Tensor> PartitionedRun::run(const Feeds& feeds, const std::vector<Output>& fetches,
                                        bool training, const FetchReady& on_fetch_ready) {
  Plan& plan = plan_for(feeds, fetches);
  ++step_;
  rendezvous_->reset();
  ProcessExchange* const processes = options_.processes;
  std::vector<Tensor> results(fetches.size());
  std::mutex callback_mutex;
  std::vector<std::exception_ptr> errors(plan.parts.size());
  std::atomic<size_t> first_error = plan.parts.size();
  // A key leaves the process, or goes to a device of this one.
  auto deliver = [&](const std::string& key, const Tensor& value) {
    auto it = plan.outgoing.find(key);
    if (it != plan.outgoing.end())
      processes->post(it->second, key, value);
    else
      rendezvous_->send(key, step_, value);
  };

  for (size_t p = 0; p < plan.parts.size(); ++p) {
    Plan::Part& part = plan.parts[p];
    // Every process draws the same seeds, its own devices' or not, so that they stay in step.
    if (part.reseed) {
      const uint64_t seed = rng_();
      if (part.session) part.session->reseed(seed);
    }
    if (!part.local) continue;
    worker(part.device, part.cores).start([&, p] {
      Plan::Part& part = plan.parts[p];
      try {
        use_threads(options_.device_threads);
        Feeds local_feeds;
        for (const auto& [index, local] : part.feeds)
          local_feeds.emplace_back(local, feeds[index].second);
        const Graph& pg = part.session->graph();
        for (const auto& [local, keys] : part.source_sends) {
          const Node& n = pg.node(local);
          Tensor value;
          if (n.op == op_names::kVariable) {
            value = variables_->get(n.name);
          } else if (n.op == op_names::kConst) {
            value = n.attrs.get_tensor("value");
          } else {
            bool fed = false;
            for (const auto& [out, tensor] : local_feeds)
              if (out.node == local) value = tensor, fed = true;
            if (!fed) fail("placeholder '{}' was not fed", n.name);
          }
          for (const std::string& key : keys) deliver(key, value);
        }
        FetchReady ready = [&](size_t f, const Tensor& value) {
          for (const std::string& key : part.sends[f]) deliver(key, value);
          if (on_fetch_ready && !part.answers[f].empty()) {
            std::lock_guard lock(callback_mutex);
            for (size_t i : part.answers[f]) on_fetch_ready(i, value);
          }
        };
        std::vector<Tensor> out = part.session->run(local_feeds, part.fetches, training, ready);
        for (size_t f = 0; f < out.size(); ++f)
          for (size_t i : part.answers[f]) results[i] = out[f];
      } catch (const std::exception& e) {
        errors[p] = std::current_exception();
        if (rendezvous_->abort(fmt::format("{} stopped: {}", part.device, e.what())))
          first_error = p;
      } catch (...) {
        errors[p] = std::current_exception();
        if (rendezvous_->abort(fmt::format("{} stopped", part.device))) first_error = p;
      }
      if (processes) processes->wake();
    });
  }
  auto wait_for_devices = [&] {
    for (Plan::Part& part : plan.parts)
      if (part.local) worker(part.device, part.cores).wait();
  };
  if (processes) {
    try {
      processes->exchange(
          plan.incoming,
          [&](size_t i, Tensor value) {
            if (plan.incoming_fetch[i] >= 0)
              results[static_cast<size_t>(plan.incoming_fetch[i])] = std::move(value);
            else
              rendezvous_->send(plan.incoming[i].key, step_, value);
          },
          [&] {
            for (Plan::Part& part : plan.parts)
              if (part.local && !worker(part.device, part.cores).done()) return false;
            return true;
          },
          [&] { return rendezvous_->aborted(); });
    } catch (const std::exception& e) {
      // The job is broken: this process's devices stop too, and the exchange's error is the cause.
      rendezvous_->abort(e.what());
      wait_for_devices();
      throw;
    }
  }
  wait_for_devices();
  last_plan_ = &plan;
  // The first device to fail is the cause; the others stopped because of it.
  if (first_error < plan.parts.size()) std::rethrow_exception(errors[first_error]);
  return results;
}

void PartitionedRun::set_profiling(bool enabled) {
  profiling_ = enabled;
  for (auto& [key, plan] : plans_)
    for (Plan::Part& part : plan->parts)
      if (part.session) part.session->set_profiling(enabled);
}

std::vector<NodeProfile> PartitionedRun::profile() const {
  std::vector<NodeProfile> out;
  if (last_plan_ == nullptr) return out;
  for (const Plan::Part& part : last_plan_->parts) {
    if (!part.session) continue;
    for (NodeProfile& p : part.session->profile()) {
      p.device = part.device;
      out.push_back(std::move(p));
    }
  }
  return out;
}

size_t PartitionedRun::arena_bytes() const {
  size_t total = 0;
  for (const auto& [key, plan] : plans_)
    for (const Plan::Part& part : plan->parts)
      if (part.session) total += part.session->arena_bytes();
  return total;
}

std::map<std::string, std::string> PartitionedRun::kernel_choices() const {
  std::map<std::string, std::string> out;
  for (const auto& [key, plan] : plans_)
    for (const Plan::Part& part : plan->parts) {
      if (!part.session) continue;
      for (auto& [name, impl] : part.session->kernel_choices())
        if (part.session->graph().node(part.session->graph().id_of(name)).op != op_names::kRecv)
          out[name] = impl;
    }
  return out;
}

}  // namespace sf
