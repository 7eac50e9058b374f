#include "kernels/kernel.h"

#include <fmt/format.h>

#include <limits>

#include "kernels/register.h"

namespace sf {

std::shared_ptr<void> RunShared::get(const void* source, const std::string& form,
                                     const std::function<std::shared_ptr<void>()>& make,
                                     bool& fill) {
  for (Entry& e : entries_)
    if (e.source == source && e.form == form) {
      fill = e.run != run_;
      e.run = run_;
      return e.copy;
    }
  entries_.push_back(Entry{source, form, run_, make()});
  fill = true;
  return entries_.back().copy;
}

void RunShared::holds_bf16(const void* source, const std::string& form, void* data) {
  for (Entry& e : entries_)
    if (e.source == source && e.form == form) e.bf16 = data;
}

uint16_t* RunShared::bf16_for_next_run(const void* source) {
  for (Entry& e : entries_)
    if (e.source == source && e.bf16 != nullptr) {
      e.run = run_ + 1;
      return static_cast<uint16_t*>(e.bf16);
    }
  return nullptr;
}

KernelDef simple_kernel(std::string op, DType dtype, std::string impl,
                        std::function<void(KernelContext&)> fn, int priority) {
  KernelDef def;
  def.op = std::move(op);
  def.dtype = dtype;
  def.impl = std::move(impl);
  def.priority = priority;
  def.create = [fn = std::move(fn)](const KernelSpec&) {
    return std::make_unique<FunctionKernel>(fn);
  };
  return def;
}

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    register_builtin_kernels(*r);
    return r;
  }();
  return *registry;
}

void KernelRegistry::add(KernelDef def) {
  SF_CHECK(static_cast<bool>(def.create), "kernel {}/{} has no factory", def.op, def.impl);
  defs_.push_back(std::move(def));
}

DType kernel_dtype(const KernelSpec& spec) {
  if (!spec.inputs.empty()) return spec.inputs[0].dtype;
  if (!spec.node.outputs.empty()) return spec.node.outputs[0].dtype;
  return DType::f32;
}

std::string device_type(const std::string& device_name) {
  // "/cpu:0" -> "cpu"
  size_t start = device_name.rfind('/') == std::string::npos ? 0 : device_name.rfind('/') + 1;
  return device_name.substr(start, device_name.find(':', start) - start);
}

bool KernelRegistry::has_kernel(const std::string& op, const std::string& device_type,
                                DType dtype) const {
  for (const KernelDef& d : defs_)
    if (d.op == op && d.device == device_type && d.dtype == dtype) return true;
  return false;
}

const KernelDef& KernelRegistry::select(const KernelSpec& spec, const std::string& impl) const {
  return choose(spec, impl, std::numeric_limits<int>::max());
}

const KernelDef& KernelRegistry::select_below(const KernelSpec& spec, int priority) const {
  return choose(spec, "", priority);
}

const KernelDef& KernelRegistry::choose(const KernelSpec& spec, const std::string& impl,
                                        int below) const {
  DType dtype = kernel_dtype(spec);
  const std::string device = device_type(spec.node.device);
  const KernelDef* best = nullptr;
  for (const KernelDef& d : defs_) {
    if (d.op != spec.node.op || d.dtype != dtype || d.device != device) continue;
    if (d.priority >= below) continue;
    if (!impl.empty() && d.impl != impl && d.impl != "reference") continue;
    if (d.accepts && !d.accepts(spec)) continue;
    bool preferred = !impl.empty() && d.impl == impl;
    bool best_preferred = best && !impl.empty() && best->impl == impl;
    if (best == nullptr || (preferred && !best_preferred) ||
        (preferred == best_preferred && d.priority > best->priority))
      best = &d;
  }
  if (best != nullptr) return *best;
  std::string registered;
  for (const KernelDef& d : defs_)
    if (d.op == spec.node.op)
      registered += fmt::format("{}{}/{}/{}", registered.empty() ? "" : ", ", d.device,
                                dtype_name(d.dtype), d.impl);
  fail("node '{}' ({}): no kernel for {} on {} (registered: {})", spec.node.name, spec.node.op,
       dtype_name(dtype), spec.node.device, registered.empty() ? "none" : registered);
}

}  // namespace sf
