#include "train/parameter_server.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "core/error.h"

namespace sf {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kGradientsTag = 11;
constexpr int kWeightsTag = 12;
// The step report that rides on the gradients sent to rank 0: loss sum, correct, examples.
constexpr int64_t kReportFloats = 3;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Between polls that found nothing: spin a little (an answer is often microseconds away), then
// sleep briefly, so that a waiting rank leaves the cores to the ranks that compute.
void idle(int& idle_polls) {
  if (++idle_polls < 200) return;
  std::this_thread::sleep_for(std::chrono::microseconds(idle_polls < 2000 ? 20 : 200));
}

}  // namespace

std::vector<int> assign_parameters_to_servers(const std::vector<int64_t>& sizes, int servers) {
  SF_CHECK(servers >= 1, "{} parameter servers", servers);
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  std::vector<int64_t> load(static_cast<size_t>(servers), 0);
  std::vector<int> owner(sizes.size(), 0);
  for (size_t p : order) {
    const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();
    owner[p] = static_cast<int>(lightest);
    load[static_cast<size_t>(lightest)] += sizes[p];
  }
  return owner;
}

ParameterShards::ParameterShards(int rank, int world, int servers, std::vector<std::string> names,
                                 std::vector<Shape> shapes)
    : rank_(rank), world_(world), servers_(servers), names_(std::move(names)), shapes_(std::move(shapes)) {
  SF_CHECK(servers >= 1 && servers < world, "{} parameter servers in a {}-rank job", servers, world);
  SF_CHECK(names_.size() == shapes_.size(), "{} names for {} shapes", names_.size(), shapes_.size());
  std::vector<int64_t> sizes;
  for (const Shape& s : shapes_) sizes.push_back(num_elements(s));
  owner_ = assign_parameters_to_servers(sizes, servers);
  members_.resize(static_cast<size_t>(servers));
  elements_.assign(static_cast<size_t>(servers), 0);
  for (size_t p = 0; p < owner_.size(); ++p) {
    members_[static_cast<size_t>(owner_[p])].push_back(p);
    elements_[static_cast<size_t>(owner_[p])] += sizes[p];
  }
}

// ---- worker ----

AsyncWorker::AsyncWorker(Communicator& comm, const ParameterShards& shards,
                         VariableStore& variables, int64_t max_staleness, int64_t start_step)
    : comm_(comm),
      shards_(shards),
      variables_(variables),
      max_staleness_(max_staleness),
      pushed_(start_step),
      versions_(static_cast<size_t>(shards.servers()), start_step),
      receives_(static_cast<size_t>(shards.servers())) {
  for (int s = 0; s < shards.servers(); ++s) incoming_.emplace_back(DType::f32, Shape{shards.elements(s)});
}

int64_t AsyncWorker::version() const { return *std::min_element(versions_.begin(), versions_.end()); }

void AsyncWorker::post_receive(int server) {
  receives_[static_cast<size_t>(server)] = comm_.irecv(incoming_[static_cast<size_t>(server)], server, kWeightsTag);
}

bool AsyncWorker::poll() {
  bool any = false;
  for (int s = 0; s < shards_.servers(); ++s) {
    CommRequest& r = receives_[static_cast<size_t>(s)];
    if (!r.active() || !comm_.test(r)) continue;
    any = true;
    const float* data = incoming_[static_cast<size_t>(s)].data<float>();
    for (size_t p : shards_.members(s)) {
      Tensor& value = variables_.get(shards_.name(p));
      std::memcpy(value.raw(), data, value.bytes());
      data += value.numel();
    }
    if (++versions_[static_cast<size_t>(s)] < pushed_) post_receive(s);
  }
  while (!sends_.empty() && comm_.test(sends_.front().request)) {
    sends_.pop_front();
    any = true;
  }
  return any;
}

void AsyncWorker::await_weights(int64_t step) {
  poll();
  const int64_t needed = step - max_staleness_;
  if (version() < needed) {
    const auto started = Clock::now();
    auto last_event = started;
    int idle_polls = 0;
    while (version() < needed) {
      if (poll()) {
        last_event = Clock::now();
        idle_polls = 0;
        continue;
      }
      if (seconds_since(last_event) > comm_.timeout_seconds()) {
        std::vector<int> late;
        for (int s = 0; s < shards_.servers(); ++s)
          if (versions_[static_cast<size_t>(s)] < needed) late.push_back(s);
        fail("rank {}: waited {:g} s for update {} from parameter server rank(s) {}: a server or "
             "another worker died or hangs (--comm-timeout)",
             comm_.rank(), comm_.timeout_seconds(), needed, fmt::join(late, ", "));
      }
      idle(idle_polls);
    }
    stats_.wait_seconds += seconds_since(started);
  }
  const int64_t staleness = step - version();
  stats_.staleness_sum += staleness;
  stats_.staleness_max = std::max(stats_.staleness_max, staleness);
}

void AsyncWorker::push(const std::vector<Tensor>& gradients, const StepReport& report) {
  SF_CHECK(gradients.size() == shards_.parameters(), "{} gradients for {} parameters",
           gradients.size(), shards_.parameters());
  for (int s = 0; s < shards_.servers(); ++s) {
    const int64_t extra = s == 0 ? kReportFloats : 0;
    Outgoing out{Tensor(DType::f32, {shards_.elements(s) + extra}), {}};
    float* data = out.message.data<float>();
    for (size_t p : shards_.members(s)) {
      const Tensor& g = gradients[p];
      SF_CHECK(g.dtype() == DType::f32 && g.shape() == shards_.shape(p),
               "gradient of '{}' is {}{}, expected f32{}", shards_.name(p), dtype_name(g.dtype()),
               shape_str(g.shape()), shape_str(shards_.shape(p)));
      std::memcpy(data, g.raw(), g.bytes());
      data += g.numel();
    }
    if (extra) {
      data[0] = static_cast<float>(report.loss_sum);
      data[1] = static_cast<float>(report.correct);
      data[2] = static_cast<float>(report.examples);
    }
    stats_.bytes += static_cast<int64_t>(out.message.bytes());
    out.request = comm_.isend(out.message, s, kGradientsTag);
    sends_.push_back(std::move(out));
  }
  ++pushed_;
  ++stats_.steps;
  // One weights message is due from each server per step pushed; one receive is kept posted.
  for (int s = 0; s < shards_.servers(); ++s)
    if (!receives_[static_cast<size_t>(s)].active() && versions_[static_cast<size_t>(s)] < pushed_)
      post_receive(s);
  poll();
}

void AsyncWorker::drain() {
  auto last_event = Clock::now();
  int idle_polls = 0;
  while (version() < pushed_ || !sends_.empty()) {
    if (poll()) {
      last_event = Clock::now();
      idle_polls = 0;
      continue;
    }
    if (seconds_since(last_event) > comm_.timeout_seconds())
      fail("rank {}: waited {:g} s for the parameter servers to apply step {}: a server or "
           "another worker died or hangs (--comm-timeout)",
           comm_.rank(), comm_.timeout_seconds(), pushed_);
    idle(idle_polls);
  }
}

AsyncStats AsyncWorker::take_stats() {
  AsyncStats s = stats_;
  stats_ = {};
  return s;
}

// ---- server ----

ParameterServer::ParameterServer(Communicator& comm, const ParameterShards& shards,
                                 VariableStore& variables, ApplyUpdate apply, int64_t start_step)
    : comm_(comm),
      shards_(shards),
      variables_(variables),
      apply_(std::move(apply)),
      applied_(start_step),
      received_(static_cast<size_t>(shards.workers()), start_step),
      receives_(static_cast<size_t>(shards.workers())) {
  const int64_t extra = shards.rank() == 0 ? kReportFloats : 0;
  for (int w = 0; w < shards.workers(); ++w)
    incoming_.emplace_back(DType::f32, Shape{shards.elements(shards.rank()) + extra});
}

void ParameterServer::post_receive(int worker) {
  receives_[static_cast<size_t>(worker)] =
      comm_.irecv(incoming_[static_cast<size_t>(worker)], shards_.worker_rank(worker), kGradientsTag);
}

void ParameterServer::apply_next() {
  Tensor sum = std::move(sums_.front());
  sums_.pop_front();
  arrivals_.pop_front();
  const float scale = 1.0f / static_cast<float>(shards_.workers());
  float* g = sum.data<float>();
  const int64_t n = shards_.elements(shards_.rank());
  for (int64_t k = 0; k < n; ++k) g[k] *= scale;
  const std::vector<size_t>& members = shards_.members(shards_.rank());
  std::vector<Tensor> gradients;
  size_t offset = 0;
  for (size_t p : members) {
    gradients.emplace_back(DType::f32, shards_.shape(p), sum.storage(), offset);
    offset += static_cast<size_t>(num_elements(shards_.shape(p))) * sizeof(float);
  }
  apply_(applied_, members, gradients);
  ++applied_;
  // The new weights, to every worker.
  Outgoing out{Tensor(DType::f32, {n}), {}};
  float* data = out.message.data<float>();
  for (size_t p : members) {
    const Tensor& value = variables_.get(shards_.name(p));
    std::memcpy(data, value.raw(), value.bytes());
    data += value.numel();
  }
  for (int w = 0; w < shards_.workers(); ++w)
    out.requests.push_back(comm_.isend(out.message, shards_.worker_rank(w), kWeightsTag));
  sends_.push_back(std::move(out));
}

bool ParameterServer::poll(int64_t target) {
  bool any = false;
  const int64_t n = shards_.elements(shards_.rank());
  for (int w = 0; w < shards_.workers(); ++w) {
    CommRequest& r = receives_[static_cast<size_t>(w)];
    if (!r.active() || !comm_.test(r)) continue;
    any = true;
    const int64_t step = received_[static_cast<size_t>(w)]++;
    const auto slot = static_cast<size_t>(step - applied_);
    while (sums_.size() <= slot) {
      sums_.emplace_back(DType::f32, Shape{n});  // zeroed
      arrivals_.push_back(0);
    }
    const float* g = incoming_[static_cast<size_t>(w)].data<float>();
    float* sum = sums_[slot].data<float>();
    for (int64_t k = 0; k < n; ++k) sum[k] += g[k];
    ++arrivals_[slot];
    if (shards_.rank() == 0) {
      reports_.loss_sum += static_cast<double>(g[n]);
      reports_.correct += static_cast<int64_t>(g[n + 1]);
      reports_.examples += static_cast<int64_t>(g[n + 2]);
    }
    if (received_[static_cast<size_t>(w)] < target) post_receive(w);
  }
  for (auto& out : sends_) {
    auto done = std::remove_if(out.requests.begin(), out.requests.end(),
                               [&](CommRequest& r) { return comm_.test(r); });
    if (done != out.requests.end()) any = true;
    out.requests.erase(done, out.requests.end());
  }
  while (!sends_.empty() && sends_.front().requests.empty()) sends_.pop_front();
  return any;
}

void ParameterServer::serve_until(int64_t target,
                                  const std::function<void(int64_t applied)>& on_update) {
  for (int w = 0; w < shards_.workers(); ++w)
    if (!receives_[static_cast<size_t>(w)].active() && received_[static_cast<size_t>(w)] < target)
      post_receive(w);
  auto last_event = Clock::now();
  int idle_polls = 0;
  while (applied_ < target || !sends_.empty()) {
    bool any = poll(target);
    while (applied_ < target && !arrivals_.empty() && arrivals_.front() == shards_.workers()) {
      apply_next();
      if (on_update) on_update(applied_);
      any = true;
    }
    if (any) {
      last_event = Clock::now();
      idle_polls = 0;
      continue;
    }
    if (seconds_since(last_event) > comm_.timeout_seconds()) {
      std::vector<int> late;
      for (int w = 0; w < shards_.workers(); ++w)
        if (received_[static_cast<size_t>(w)] <= applied_ && applied_ < target)
          late.push_back(shards_.worker_rank(w));
      if (late.empty())
        for (int w = 0; w < shards_.workers(); ++w) late.push_back(shards_.worker_rank(w));
      fail("rank {}: parameter server waited {:g} s for step {} from worker rank(s) {}: a worker "
           "died or hangs (--comm-timeout)",
           comm_.rank(), comm_.timeout_seconds(), applied_ + 1, fmt::join(late, ", "));
    }
    idle(idle_polls);
  }
}

StepReport ParameterServer::take_reports() {
  StepReport r = reports_;
  reports_ = {};
  return r;
}

void share_parameters(Communicator& comm, const std::vector<std::string>& names,
                      const std::vector<Shape>& shapes, const std::vector<int>& owners,
                      VariableStore& variables, Optimizer* optimizer) {
  for (size_t p = 0; p < names.size(); ++p) {
    Tensor value = variables.get(names[p]);
    comm.broadcast(value, owners[p], "variable '" + names[p] + "'");
  }
  if (optimizer == nullptr) return;
  const std::map<std::string, Tensor> state = optimizer->state();
  std::map<std::string, Tensor> received;
  for (size_t p = 0; p < names.size(); ++p)
    for (const std::string& slot : optimizer->slot_names()) {
      const std::string key = optimizer->config().kind + "/" + slot + "/" + names[p];
      const bool mine = owners[p] == comm.rank();
      auto it = state.find(key);
      Tensor value = mine && it != state.end() ? it->second : Tensor(DType::f32, shapes[p]);
      comm.broadcast(value, owners[p], "optimizer slot '" + key + "'");
      if (!mine) received[key] = value;
    }
  optimizer->restore(received);
}

void gather_parameters(Communicator& comm, const ParameterShards& shards, VariableStore& variables,
                       Optimizer& optimizer) {
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  std::vector<int> owners;
  for (size_t p = 0; p < shards.parameters(); ++p) {
    names.push_back(shards.name(p));
    shapes.push_back(shards.shape(p));
    owners.push_back(shards.owner(p));
  }
  // With one server, rank 0 holds every slot already.
  share_parameters(comm, names, shapes, owners, variables,
                   shards.servers() == 1 ? nullptr : &optimizer);
}

}  // namespace sf
