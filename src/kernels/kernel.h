// Kernels: the code that computes one node. A kernel object is created once per node when a
// session plans a graph (so oneDNN primitives, layouts and scratch buffers are set up once),
// then computed every step into output buffers the planner has already allocated.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"

namespace sf {

// What a kernel factory sees: the node (attributes, inferred output types) and its input types.
struct KernelSpec {
  const Node& node;
  std::vector<TensorType> inputs;
  // Inputs fed by Const nodes: their contents never change, so kernels may prepare them once
  // (e.g. reorder frozen weights into a blocked layout on the first run only).
  std::vector<bool> constant_inputs = {};
  bool input_is_constant(size_t i) const { return i < constant_inputs.size() && constant_inputs[i]; }
  // Products may round their float inputs and weights to bf16 (accumulating in fp32) where a
  // kernel can; the others ignore it.
  bool bf16 = false;
  // Inputs fed by Variable nodes: unchanged during a run (the optimizer writes between runs).
  std::vector<bool> variable_inputs = {};
  bool input_is_variable(size_t i) const { return i < variable_inputs.size() && variable_inputs[i]; }
};

// Prepared copies of a run's variables that the kernels of one session share: a weight rounded
// to bf16 once per run for every product that reads it (the micro-batch copies of a layer read
// one variable M times, train/micro_batches.h). Keyed by the variable's buffer and the form the
// kernel wants; a session's kernels run one at a time, so it needs no lock.
class RunShared {
 public:
  void next_run() { ++run_; }
  // The copy of `source` kept under `form` (made by `make` the first time), and whether it
  // still has to be filled in this run (the caller then fills it).
  std::shared_ptr<void> get(const void* source, const std::string& form,
                            const std::function<std::shared_ptr<void>()>& make, bool& fill);
  // Says that the copy of `source` under `form`, at `data`, holds source's floats rounded to
  // bf16 (nearest even) in source's own element order, so code that rewrites source between
  // runs can round as it writes (the optimizer, bf16_for_next_run) and spare the next run the
  // pass that reads all of source again.
  void holds_bf16(const void* source, const std::string& form, void* data);
  // Such a copy of `source`, counted as filled for the next run: the caller must write every
  // element before that run. Null where no kernel keeps one.
  uint16_t* bf16_for_next_run(const void* source);

 private:
  struct Entry {
    const void* source;
    std::string form;
    uint64_t run;
    std::shared_ptr<void> copy;
    void* bf16 = nullptr;  // holds_bf16's data
  };
  std::vector<Entry> entries_;
  uint64_t run_ = 1;
};

// Where a partitioned graph's Recv nodes get their tensors: the other side of each cross-device
// edge (runtime/partitioned_run.h). The tensor is handed over, not copied; receive() blocks
// until it has arrived (the Recv kernel checks its dtype and shape, naming the edge).
class Transfers {
 public:
  virtual ~Transfers() = default;
  virtual Tensor receive(const Node& recv) = 0;
};

struct KernelContext {
  const Node& node;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;  // allocated by the planner, contents undefined on entry
  bool training = false;        // dropout and batch-norm behave differently when training
  std::mt19937_64* rng = nullptr;
  // Set in a partitioned graph's device sessions: a Recv kernel puts what arrives in
  // outputs[0] (the planner allocates nothing for it).
  Transfers* transfers = nullptr;
  RunShared* shared = nullptr;  // set by the session: null leaves each kernel on its own
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void compute(KernelContext& ctx) = 0;
  // For a kernel that decides at run time to hand its work to another (a sparse kernel falling
  // back to the dense one): what the last compute() ran, for profiles. Empty: its own impl.
  virtual std::string running_impl() const { return ""; }
};

// A kernel from a plain function, for kernels without state.
class FunctionKernel : public Kernel {
 public:
  explicit FunctionKernel(std::function<void(KernelContext&)> fn) : fn_(std::move(fn)) {}
  void compute(KernelContext& ctx) override { fn_(ctx); }

 private:
  std::function<void(KernelContext&)> fn_;
};

struct KernelDef {
  std::string op;
  std::string device = "cpu";
  DType dtype = DType::f32;  // the dtype of input 0 (of output 0 for ops without inputs)
  std::string impl;          // "reference", "onednn", ...
  int priority = 0;          // the highest-priority kernel that accepts a node runs
  std::function<bool(const KernelSpec&)> accepts;  // empty: accepts every node
  std::function<std::unique_ptr<Kernel>(const KernelSpec&)> create;
};

// Helper for stateless kernels.
KernelDef simple_kernel(std::string op, DType dtype, std::string impl,
                        std::function<void(KernelContext&)> fn, int priority = 0);

class KernelRegistry {
 public:
  // The registry with every built-in kernel (registered on first use).
  static KernelRegistry& global();
  void add(KernelDef def);
  // The kernel to run for this node. `impl` empty picks the best accepting kernel; otherwise
  // only that implementation is considered, falling back to "reference". Throws an error that
  // lists what is registered for the op when nothing fits.
  const KernelDef& select(const KernelSpec& spec, const std::string& impl = "") const;
  // Every registered kernel, in registration order (for tests that walk the registry).
  const std::vector<KernelDef>& all() const { return defs_; }
  // The best accepting kernel ranked below `priority`: what runs a node that a kernel of that
  // priority hands back (a sparse kernel whose weights turn out dense).
  const KernelDef& select_below(const KernelSpec& spec, int priority) const;
  // Whether some kernel runs `op` on inputs of `dtype` on devices of this type ("cpu"), as
  // placement asks before putting a node on a device.
  bool has_kernel(const std::string& op, const std::string& device_type, DType dtype) const;

 private:
  const KernelDef& choose(const KernelSpec& spec, const std::string& impl, int below) const;

  std::vector<KernelDef> defs_;
};

// The device type of a device name: "/cpu:0" -> "cpu".
std::string device_type(const std::string& device_name);

// The dtype kernels are keyed by for this node.
DType kernel_dtype(const KernelSpec& spec);

}  // namespace sf
