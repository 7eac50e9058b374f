// Shared pieces of the oneDNN kernels: one CPU engine and stream for the process, memory
// descriptors for our NHWC / HWIO tensors, and staging between our plain buffers and the
// layouts a primitive prefers.
//
// Every oneDNN kernel builds its primitive descriptors, primitives, reorders and (user-mode)
// scratchpad once in its constructor from the KernelSpec's shapes; compute() only binds the
// step's buffers and executes.
#pragma once

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/shape.h"
#include "cpu/thread_count.h"
#include "kernels/kernel.h"

namespace sf::onednn {

using tag = dnnl::memory::format_tag;

dnnl::engine& engine();
dnnl::stream& stream();

dnnl::memory::dims dims_of(const Shape& shape);
// A row-major tensor of any rank.
dnnl::memory::desc plain_desc(const Shape& shape);
// An NHWC image tensor, as oneDNN's logical NCHW.
dnnl::memory::desc nhwc_desc(const Shape& nhwc);
// An HWIO filter [kh, kw, in/groups, out] as oneDNN's logical OIHW (GOIHW when groups > 1).
dnnl::memory::desc hwio_desc(const Shape& hwio, int64_t groups);

// `desc` with its elements of `type` (same dims and layout).
dnnl::memory::desc with_data_type(dnnl::memory::desc desc, dnnl::memory::data_type type);
// A [rows, cols] view of a row-major buffer that holds the matrix transposed when `t`.
dnnl::memory::desc matrix_desc(const Shape& stored, bool t);
// The eltwise post-op of a fused node's activation.
dnnl::post_ops activation_post_ops(Activation activation);
void append_activation(dnnl::post_ops& ops, Activation activation);

// Attributes with a user-managed scratchpad, so kernels allocate it once.
dnnl::primitive_attr user_scratchpad_attr();

// True for implementations we would rather not run (oneDNN's naive reference loops).
bool is_reference_impl(const char* impl_info);

// A bf16 product (`make(bf16)`) when `bf16` asks for one and oneDNN has more than its reference
// loops for it; `make(f32)` otherwise (a layer's fallback to fp32).
template <typename Make>
auto bf16_or_f32(bool bf16, Make make) -> decltype(make(dnnl::memory::data_type::f32)) {
  if (bf16) {
    try {
      auto pd = make(dnnl::memory::data_type::bf16);
      if (!is_reference_impl(pd.impl_info_str())) return pd;
    } catch (const dnnl::error&) {
      // No bf16 kernel for this shape.
    }
  }
  return make(dnnl::memory::data_type::f32);
}

// Whether oneDNN's u8 x s8 products are exact here: its VNNI kernels (vpdpbusd) are, the others
// (vpmaddubsw) may saturate pairs of products to int16. The CPU must have VNNI and oneDNN's ISA
// limit (ONEDNN_MAX_CPU_ISA) must allow it.
bool exact_int8_products();

// One tensor argument of a primitive. `user` describes our plain buffer; `want` the layout the
// primitive was created with. When they differ, a kernel-owned buffer in `want`'s layout and
// the reorder between the two are set up once here.
class StagedArg {
 public:
  enum class Direction { In, Out };
  StagedArg(const dnnl::memory::desc& user, const dnnl::memory::desc& want, Direction dir);

  // Inputs: points at `data` and reorders it into the staging buffer if there is one.
  // Outputs: points at `data` (the primitive writes the staging buffer when there is one).
  // Returns the memory to hand to the primitive.
  const dnnl::memory& bind(void* data);
  // An input whose contents never change (a frozen weight): reordered only when `data` is a
  // different buffer from last time.
  const dnnl::memory& bind_constant(void* data);
  // Makes the next bind_constant reorder whatever it is given (after binding scratch data).
  void forget_constant() { staged_from_ = nullptr; }
  // Inputs staged into a buffer shared with other kernels (KernelContext::shared): `target`,
  // reordered from `data` when `fill`. Returns `target`.
  const dnnl::memory& bind_shared(void* data, const dnnl::memory& target, bool fill);
  // An activation staged once per run for all the kernels that stage it alike, under `form`
  // (activation_form; empty, or no `shared`: staged by this kernel alone).
  const dnnl::memory& bind_activation(void* data, RunShared* shared, const std::string& form);
  // The staged layout (inputs that are staged).
  dnnl::memory::desc staged_desc() const { return staged_.get_desc(); }
  dnnl::memory::desc user_desc() const { return user_.get_desc(); }
  // Outputs: reorders the staging buffer into the user buffer bound last.
  void finish();
  bool staged() const { return reorder_.has_value(); }
  void flush_staging() const;

 private:
  Direction dir_;
  dnnl::memory user_;
  dnnl::memory staged_;
  std::optional<dnnl::reorder> reorder_;
  void* staged_from_ = nullptr;
  dnnl::memory shared_view_;  // bind_activation's shared buffer, as staged_'s desc
};

// The RunShared form under which input `input` of `spec`'s node, staged by `arg`, is shared
// between kernels: its edge and staged layout. A run computes each edge once and leaves it
// unchanged while its consumers run, so kernels that stage it alike need one reorder a run (a
// conv's forward and filter gradient read x alike; its input and filter gradients, dy). Empty
// where nothing is staged, and for constants and variables, which are staged by their own rules.
std::string activation_form(const KernelSpec& spec, size_t input, const StagedArg& arg);

// oneDNN's implementation without the ISA: "brgconv:avx512_core" -> "brgconv". The gemm
// convolutions lead with the architecture instead: "x64:gemm:jit" -> "gemm".
inline std::string implementation_name(std::string_view impl_info) {
  if (impl_info.starts_with("x64:")) impl_info.remove_prefix(4);
  return std::string(impl_info.substr(0, impl_info.find(':')));
}

// A primitive with its scratchpad, executed on the shared stream.
class Runner {
 public:
  Runner() = default;
  template <typename PrimitiveDesc, typename Primitive>
  void init(const PrimitiveDesc& pd) {
    primitive_ = Primitive(pd);
    scratchpad_ = dnnl::memory(pd.scratchpad_desc(), engine());
    impl_ = implementation_name(pd.impl_info_str());
  }
  void run(std::unordered_map<int, dnnl::memory> args);
  // oneDNN's implementation, without the ISA ("brgconv", "jit_int8_1x1", ...).
  const std::string& impl() const { return impl_; }
  void flush_scratchpad() const;

 private:
  dnnl::primitive primitive_;
  dnnl::memory scratchpad_;
  std::string impl_;
};

// The implementation to run for a problem (`key`: what makes two nodes the same problem): the
// index `measure` returns (nullopt: none runs), measured once per process and remembered, so
// identical nodes (fire modules, residual blocks) agree rather than split by measurement noise.
// Measurements run one at a time, so that they do not share the cores.
std::optional<size_t> measured_choice(const std::string& key,
                                      const std::function<std::optional<size_t>()>& measure);

// Per-family registration, each in its own file.
void register_conv_kernels(KernelRegistry& registry);
void register_matmul_kernels(KernelRegistry& registry);
void register_pool_kernels(KernelRegistry& registry);
void register_fused_conv_kernels(KernelRegistry& registry);
void register_fused_matmul_kernels(KernelRegistry& registry);
void register_transpose_kernels(KernelRegistry& registry);
void register_softmax_kernels(KernelRegistry& registry);  // over the last axis
void register_quantized_kernels(KernelRegistry& registry);  // int8 conv / matmul
void register_rnn_kernels(KernelRegistry& registry);

// oneDNN kernels outrank the reference kernels (priority 0).
inline constexpr int kPriority = 10;

}  // namespace sf::onednn
