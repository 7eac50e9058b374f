#include "runtime/session.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <set>

#include "core/limits.h"
#include "cpu/thread_count.h"
#include "graph/op_registry.h"
#include "kernels/kernel.h"
#include "ops/op_names.h"
#include "runtime/arena_plan.h"
#include "runtime/partitioned_run.h"

namespace sf {

namespace {

bool in_layers(const std::set<std::string>& layers, const std::string& name) {
  for (size_t end = name.size(); end != std::string::npos && end > 0;
       end = name.rfind('/', end - 1))
    if (layers.count(name.substr(0, end))) return true;
  return false;
}

bool is_source(const std::string& op) {
  return op == op_names::kPlaceholder || op == op_names::kVariable || op == op_names::kConst;
}

size_t align_up(size_t n) {
  return (n + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}

// What a plan is for, as integers: the fetches (node, index), then each fed placeholder and its
// shape (node, rank, dims). Built on every run, so it formats no text and reuses its buffer: at
// batch 1 a small model's whole run takes microseconds.
void plan_key(const Feeds& feeds, const std::vector<Output>& fetches, std::vector<int64_t>& key) {
  key.clear();
  key.push_back(static_cast<int64_t>(fetches.size()));
  for (const Output& f : fetches) key.insert(key.end(), {f.node, f.index});
  for (const auto& [out, tensor] : feeds) {
    key.insert(key.end(), {out.node, tensor.rank()});
    key.insert(key.end(), tensor.shape().begin(), tensor.shape().end());
  }
}

// Whether the node's only output is its first input's bytes under another shape, so that it can
// share the input's buffer and its kernel's copy finds nothing to move: Reshape and Flatten (in
// a transformer, a megabyte each at batch 8) and Identity.
bool is_view(const Node& n, const TensorType& input) {
  return (n.op == op_names::kReshape || n.op == op_names::kFlatten ||
          n.op == op_names::kIdentity) &&
         n.outputs.size() == 1 && n.outputs[0].dtype == input.dtype &&
         num_elements(n.outputs[0].shape) == num_elements(input.shape);
}

// Binds a source's value to its slot, reusing the slot's storage.
void bind_source(std::vector<Tensor>& slot, const Tensor& value) {
  slot.resize(1);
  slot[0] = value;
}

}  // namespace

struct Session::Plan {
  Graph graph;  // this plan's copy, with shapes inferred for its feeds
  struct Step {
    int node;
    std::unique_ptr<Kernel> kernel;
    std::string impl;
    bool hands_over = false;  // a Recv: its kernel sets its output instead of filling one
    double seconds = 0.0;
    int64_t calls = 0;
  };
  std::vector<Step> steps;
  std::vector<std::vector<Tensor>> values;  // by node id; arena views for computed nodes, and
                                            // constants' values, bound once
  std::vector<int> variables;               // nodes bound to the variable store on each run
  std::shared_ptr<Storage> arena;
  std::vector<Output> fetches;
  bool one_thread = false;  // kernels made and run under OneThread (runs_on_one_thread)
};

Session::Session(const Graph& graph, SessionOptions options,
                 std::shared_ptr<VariableStore> variables)
    : graph_(graph),
      options_(std::move(options)),
      variables_(variables ? std::move(variables) : std::make_shared<VariableStore>()),
      rng_(options_.seed),
      draws_(options_.rng ? options_.rng : &rng_) {
  limits::check_threads(options_.threads, "session");
  if (!options_.kernel_impl.empty()) {
    std::set<std::string> impls;
    for (const KernelDef& def : KernelRegistry::global().all()) impls.insert(def.impl);
    if (!impls.count(options_.kernel_impl))
      fail("kernels '{}' is not a kernel implementation (known: {})", options_.kernel_impl,
           fmt::join(impls, ", "));
  }
  use_threads(options_.threads);
  limits::check_threads(options_.device_threads, "--device-threads");
  // In a job, even a graph on one device may be another process's to run.
  for (const Node& n : graph_.nodes())
    if (n.device != graph_.node(0).device || options_.processes != nullptr) {
      partitioned_ = std::make_unique<PartitionedRun>(graph_, options_, variables_, rng_);
      break;
    }
}

Session::~Session() = default;

bool Session::runs_on_one_thread(const Graph& g, const std::vector<int>& step_of) const {
  // A forced kernel is a test of that kernel, threads included; a graph with variables trains
  // or is being trained; a device's part of a graph shares its threads with the others.
  if (!options_.kernel_impl.empty() || options_.transfers != nullptr ||
      options_.processes != nullptr || omp_get_max_threads() < 2)
    return false;
  double flops = 0.0;
  for (int id = 0; id < g.num_nodes(); ++id) {
    if (step_of[static_cast<size_t>(id)] < 0) continue;
    for (const Output& in : g.node(id).inputs)
      if (g.node(in.node).op == op_names::kVariable) return false;
    flops += node_flops(g, id);
  }
  return flops <= kOneThreadPlanMaxFlops;
}

Session::Plan& Session::plan_for(const Feeds& feeds, const std::vector<Output>& fetches) {
  plan_key(feeds, fetches, key_);
  for (auto& [key, plan] : plans_)
    if (key == key_) return *plan;

  std::map<int, Shape> placeholder_shapes;
  for (const auto& [out, tensor] : feeds) placeholder_shapes[out.node] = tensor.shape();
  auto plan = std::make_unique<Plan>();
  plan->graph = graph_;
  plan->fetches = fetches;
  std::map<int, Shape> changed;
  for (const auto& [id, shape] : placeholder_shapes)
    if (graph_.node(id).outputs[0].shape != shape) changed[id] = shape;
  if (!changed.empty()) plan->graph.reinfer(changed);
  const Graph& g = plan->graph;

  const std::vector<bool> needed = needed_nodes(g, fetches);

  // Lifetimes of computed outputs, in step indices.
  std::vector<BufferLifetime> buffers;
  std::vector<Output> buffer_outputs;
  std::map<Output, size_t> buffer_of;
  std::vector<Output> views;  // outputs that share their input's buffer (is_view)
  int step_index = 0;
  std::vector<int> step_of(static_cast<size_t>(g.num_nodes()), -1);
  for (int id = 0; id < g.num_nodes(); ++id) {
    if (!needed[static_cast<size_t>(id)]) continue;
    const Node& n = g.node(id);
    if (is_source(n.op)) continue;
    step_of[static_cast<size_t>(id)] = step_index;
    if (n.op == op_names::kRecv) {  // its output arrives from another device
      ++step_index;
      continue;
    }
    for (const Output& in : n.inputs) {
      auto it = buffer_of.find(in);
      if (it != buffer_of.end()) buffers[it->second].last = step_index;
    }
    if (auto input = buffer_of.find(n.inputs.empty() ? Output{} : n.inputs[0]);
        input != buffer_of.end() && is_view(n, g.type(n.inputs[0]))) {
      buffer_of[Output{id, 0}] = input->second;
      views.push_back(Output{id, 0});
      ++step_index;
      continue;
    }
    for (int i = 0; i < static_cast<int>(n.outputs.size()); ++i) {
      const TensorType& t = n.outputs[static_cast<size_t>(i)];
      size_t bytes = align_up(static_cast<size_t>(num_elements(t.shape)) * dtype_size(t.dtype));
      buffer_of[Output{id, i}] = buffers.size();
      buffers.push_back(BufferLifetime{bytes, step_index, step_index});
      buffer_outputs.push_back(Output{id, i});
    }
    ++step_index;
  }
  for (const Output& f : fetches) {
    auto it = buffer_of.find(f);
    if (it != buffer_of.end()) buffers[it->second].last = std::numeric_limits<int>::max();
  }

  const ArenaPlan arena = plan_arena(buffers);
  if (arena.bytes > limits::memory_budget() && !buffers.empty()) {
    // Name the largest tensor: it is almost always the one a hostile or mistaken shape blew up.
    size_t largest = 0;
    for (size_t b = 1; b < buffers.size(); ++b)
      if (buffers[b].bytes > buffers[largest].bytes) largest = b;
    const Node& n = g.node(buffer_outputs[largest].node);
    limits::check_memory(arena.bytes,
                         fmt::format("running the graph (largest tensor: node '{}' ({}) output {}, "
                                     "{})",
                                     n.name, n.op, type_str(g.type(buffer_outputs[largest])),
                                     limits::byte_size_str(buffers[largest].bytes)));
  }
  plan->arena = Storage::allocate(arena.bytes);
  plan->values.resize(static_cast<size_t>(g.num_nodes()));
  for (size_t b = 0; b < buffers.size(); ++b) {
    const Output& out = buffer_outputs[b];
    const TensorType& t = g.type(out);
    auto& slot = plan->values[static_cast<size_t>(out.node)];
    if (slot.size() <= static_cast<size_t>(out.index))
      slot.resize(static_cast<size_t>(out.index) + 1);
    slot[static_cast<size_t>(out.index)] = Tensor(t.dtype, t.shape, plan->arena, arena.offsets[b]);
  }
  for (const Output& view : views) {
    const TensorType& t = g.type(view);
    plan->values[static_cast<size_t>(view.node)] = {
        Tensor(t.dtype, t.shape, plan->arena, arena.offsets[buffer_of.at(view)])};
  }

  plan->one_thread = runs_on_one_thread(g, step_of);
  std::optional<OneThread> one_thread;
  if (plan->one_thread) one_thread.emplace();
  for (int id = 0; id < g.num_nodes(); ++id) {
    if (step_of[static_cast<size_t>(id)] < 0) continue;
    const Node& n = g.node(id);
    KernelSpec spec{n, {}};
    spec.bf16 = options_.precision == Precision::bf16 && !in_layers(options_.fp32_layers, n.name);
    for (const Output& in : n.inputs) {
      spec.inputs.push_back(g.type(in));
      spec.constant_inputs.push_back(g.node(in.node).op == op_names::kConst);
      spec.variable_inputs.push_back(g.node(in.node).op == op_names::kVariable);
    }
    const KernelDef& def = KernelRegistry::global().select(spec, options_.kernel_impl);
    plan->steps.push_back(Plan::Step{id, def.create(spec), def.impl, n.op == op_names::kRecv});
  }
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.op == op_names::kConst)
      bind_source(plan->values[static_cast<size_t>(id)], n.attrs.get_tensor("value"));
    if (n.op == op_names::kVariable) plan->variables.push_back(id);
  }

  if (plans_.size() >= kMaxPlans) {
    if (last_plan_ == plans_.front().second.get()) last_plan_ = nullptr;
    plans_.erase(plans_.begin());
  }
  plans_.emplace_back(key_, std::move(plan));
  return *plans_.back().second;
}

std::vector<Tensor> Session::run(const Feeds& feeds, const std::vector<Output>& fetches,
                                 bool training, const FetchReady& on_fetch_ready) {
  for (const auto& [out, tensor] : feeds) {
    if (out.node < 0 || out.node >= graph_.num_nodes() ||
        graph_.node(out.node).op != op_names::kPlaceholder)
      fail("feed: node {} is not a Placeholder", out.node);
    const Node& n = graph_.node(out.node);
    if (tensor.dtype() != n.outputs[0].dtype)
      fail("feed '{}': expected {}, got {}{}", n.name, dtype_name(n.outputs[0].dtype),
           dtype_name(tensor.dtype()), shape_str(tensor.shape()));
  }
  for (const Output& f : fetches)
    if (f.node < 0 || f.node >= graph_.num_nodes()) fail("fetch: node {} does not exist", f.node);

  if (partitioned_) return partitioned_->run(feeds, fetches, training, on_fetch_ready);

  Plan& plan = plan_for(feeds, fetches);
  const Graph& g = plan.graph;
  auto& values = plan.values;
  shared_.next_run();

  // Bind sources (constants were bound with the plan).
  for (const auto& [out, tensor] : feeds)
    bind_source(values[static_cast<size_t>(out.node)], tensor);
  for (int id : plan.variables) {
    const Node& n = g.node(id);
    Tensor& v = variables_->get(n.name);
    if (v.shape() != n.outputs[0].shape || v.dtype() != n.outputs[0].dtype)
      fail("variable '{}': value is {}{}, graph expects {}", n.name, dtype_name(v.dtype()),
           shape_str(v.shape()), type_str(n.outputs[0]));
    bind_source(values[static_cast<size_t>(id)], v);
  }

  // Fetch indices by the node that computes them (only when someone listens).
  std::vector<std::vector<size_t>> fetches_of_node;
  if (on_fetch_ready) {
    fetches_of_node.resize(static_cast<size_t>(g.num_nodes()));
    for (size_t i = 0; i < fetches.size(); ++i)
      fetches_of_node[static_cast<size_t>(fetches[i].node)].push_back(i);
  }

  std::optional<OneThread> one_thread;
  if (plan.one_thread) one_thread.emplace();
  for (Plan::Step& step : plan.steps) {
    const Node& n = g.node(step.node);
    for (const Output& in : n.inputs)
      if (values[static_cast<size_t>(in.node)].empty())
        fail("node '{}' ({}): input '{}' was not fed", n.name, n.op, g.node(in.node).name);
    KernelContext ctx{n,        {},     values[static_cast<size_t>(step.node)],
                      training, draws_, options_.transfers,
                      &shared_};
    ctx.inputs.reserve(n.inputs.size());
    for (const Output& in : n.inputs)
      ctx.inputs.push_back(values[static_cast<size_t>(in.node)][static_cast<size_t>(in.index)]);
    if (profiling_) {
      auto start = std::chrono::steady_clock::now();
      step.kernel->compute(ctx);
      step.seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++step.calls;
    } else {
      step.kernel->compute(ctx);
    }
    if (step.hands_over) values[static_cast<size_t>(step.node)] = std::move(ctx.outputs);
    if (on_fetch_ready)
      for (size_t i : fetches_of_node[static_cast<size_t>(step.node)])
        on_fetch_ready(
            i, values[static_cast<size_t>(step.node)][static_cast<size_t>(fetches[i].index)]);
  }
  last_plan_ = &plan;

  std::vector<Tensor> results;
  results.reserve(fetches.size());
  for (const Output& f : fetches) {
    const auto& slot = values[static_cast<size_t>(f.node)];
    if (slot.empty()) fail("fetch '{}' was not fed", g.node(f.node).name);
    results.push_back(slot[static_cast<size_t>(f.index)]);
  }
  return results;
}

uint16_t* Session::bf16_for_next_run(const Tensor& variable) {
  return partitioned_ ? nullptr : shared_.bf16_for_next_run(variable.raw());
}

bool Session::ran_on_one_thread() const {
  return last_plan_ != nullptr && last_plan_->one_thread;
}

void Session::set_profiling(bool enabled) {
  profiling_ = enabled;
  if (partitioned_) partitioned_->set_profiling(enabled);
  for (auto& [key, plan] : plans_)
    for (Plan::Step& s : plan->steps) s.seconds = 0.0, s.calls = 0;
}

std::vector<NodeProfile> Session::profile() const {
  if (partitioned_) return partitioned_->profile();
  std::vector<NodeProfile> out;
  if (last_plan_ == nullptr) return out;
  for (const Plan::Step& s : last_plan_->steps) {
    const Node& n = last_plan_->graph.node(s.node);
    const std::string running = s.kernel->running_impl();
    out.push_back(NodeProfile{n.name, n.op, running.empty() ? s.impl : s.impl + ":" + running,
                              n.outputs.empty() ? Shape{} : n.outputs[0].shape, s.seconds,
                              s.calls});
  }
  return out;
}

size_t Session::plan_count() const {
  return partitioned_ ? partitioned_->plan_count() : plans_.size();
}

size_t Session::arena_bytes() const {
  if (partitioned_) return partitioned_->arena_bytes();
  size_t total = 0;
  for (const auto& [key, plan] : plans_) total += plan->arena->bytes();
  return total;
}

std::map<std::string, std::string> Session::kernel_choices() const {
  if (partitioned_) return partitioned_->kernel_choices();
  std::map<std::string, std::string> out;
  for (const auto& [key, plan] : plans_)
    for (const Plan::Step& s : plan->steps) out[plan->graph.node(s.node).name] = s.impl;
  return out;
}

}  // namespace sf
