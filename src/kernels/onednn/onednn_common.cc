#include "kernels/onednn/onednn_common.h"

#include <fmt/ranges.h>

#include <cstring>
#include <map>
#include <mutex>

#include "cpu/cache_flush.h"
#include "cpu/cpu_features.h"

namespace sf::onednn {

dnnl::engine& engine() {
  static dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

dnnl::stream& stream() {
  static dnnl::stream* s = new dnnl::stream(engine());
  return *s;
}

dnnl::memory::dims dims_of(const Shape& shape) {
  return dnnl::memory::dims(shape.begin(), shape.end());
}

dnnl::memory::desc plain_desc(const Shape& shape) {
  dnnl::memory::dims strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    strides[static_cast<size_t>(i)] =
        strides[static_cast<size_t>(i) + 1] * shape[static_cast<size_t>(i) + 1];
  return dnnl::memory::desc(dims_of(shape), dnnl::memory::data_type::f32, strides);
}

dnnl::memory::desc nhwc_desc(const Shape& s) {
  return dnnl::memory::desc({s[0], s[3], s[1], s[2]}, dnnl::memory::data_type::f32, tag::nhwc);
}

dnnl::memory::desc with_data_type(dnnl::memory::desc desc, dnnl::memory::data_type type) {
  // Strides count elements, so the layout holds for any element size.
  desc.data.data_type = static_cast<dnnl_data_type_t>(type);
  return desc;
}

dnnl::memory::desc hwio_desc(const Shape& s, int64_t groups) {
  const int64_t kh = s[0], kw = s[1], ig = s[2], o = s[3];
  const auto f32 = dnnl::memory::data_type::f32;
  if (groups == 1) return dnnl::memory::desc({o, ig, kh, kw}, f32, {1, o, kw * ig * o, ig * o});
  // Output channel g * (o / groups) + j is group g's j-th filter.
  const int64_t og = o / groups;
  return dnnl::memory::desc({groups, og, ig, kh, kw}, f32, {og, 1, o, kw * ig * o, ig * o});
}

dnnl::memory::desc matrix_desc(const Shape& stored, bool t) {
  const auto f32 = dnnl::memory::data_type::f32;
  if (!t) return dnnl::memory::desc({stored[0], stored[1]}, f32, {stored[1], 1});
  return dnnl::memory::desc({stored[1], stored[0]}, f32, {1, stored[1]});
}

void append_activation(dnnl::post_ops& ops, Activation activation) {
  if (activation == Activation::Relu)
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  if (activation == Activation::Relu6)
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, 0.0f, 6.0f);
}

dnnl::post_ops activation_post_ops(Activation activation) {
  dnnl::post_ops ops;
  append_activation(ops, activation);
  return ops;
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

bool is_reference_impl(const char* impl_info) { return std::strncmp(impl_info, "ref", 3) == 0; }

StagedArg::StagedArg(const dnnl::memory::desc& user, const dnnl::memory::desc& want, Direction dir)
    : dir_(dir), user_(user, engine(), DNNL_MEMORY_NONE) {
  if (user == want) return;
  staged_ = dnnl::memory(want, engine());
  reorder_ = dir == Direction::In ? dnnl::reorder(user_, staged_) : dnnl::reorder(staged_, user_);
}

const dnnl::memory& StagedArg::bind(void* data) {
  user_.set_data_handle(data);
  if (!reorder_) return user_;
  if (dir_ == Direction::In)
    reorder_->execute(stream(), {{DNNL_ARG_FROM, user_}, {DNNL_ARG_TO, staged_}});
  return staged_;
}

const dnnl::memory& StagedArg::bind_shared(void* data, const dnnl::memory& target, bool fill) {
  if (fill) {
    user_.set_data_handle(data);
    reorder_->execute(stream(), {{DNNL_ARG_FROM, user_}, {DNNL_ARG_TO, target}});
  }
  return target;
}

const dnnl::memory& StagedArg::bind_activation(void* data, RunShared* shared,
                                               const std::string& form) {
  if (!reorder_ || form.empty() || shared == nullptr) return bind(data);
  bool fill = false;
  const auto buffer = std::static_pointer_cast<dnnl::memory>(shared->get(
      data, form, [&] { return std::make_shared<dnnl::memory>(staged_.get_desc(), engine()); },
      fill));
  // Seen through this kernel's own desc: the form makes the bytes the same.
  if (!shared_view_) shared_view_ = dnnl::memory(staged_.get_desc(), engine(), DNNL_MEMORY_NONE);
  shared_view_.set_data_handle(buffer->get_data_handle());
  return bind_shared(data, shared_view_, fill);
}

std::string activation_form(const KernelSpec& spec, size_t input, const StagedArg& arg) {
  if (!arg.staged() || spec.input_is_constant(input) || spec.input_is_variable(input)) return "";
  const Output& edge = spec.node.inputs[input];
  const dnnl::memory::desc staged = arg.staged_desc();
  // Staged as the whole tensor's elements converted in place, the bytes are the same however a
  // kernel views the tensor (a matrix read transposed by one product and not by another).
  const TensorType& type = spec.inputs[input];
  const bool whole =
      arg.user_desc().get_size() == num_elements(type.shape) * dtype_size(type.dtype);
  if (whole && with_data_type(arg.user_desc(), staged.data_type()) == staged)
    return fmt::format("activation {}:{} as type {}", edge.node, edge.index,
                       static_cast<int>(staged.data_type()));
  // Otherwise the staged layout in full: element type, dims and blocking (every activation
  // layout of oneDNN's products is a blocked one).
  const dnnl_memory_desc_t& d = staged.data;
  if (d.format_kind != dnnl_blocked) return "";
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  const auto n = static_cast<size_t>(d.ndims), blocks = static_cast<size_t>(b.inner_nblks);
  return fmt::format("activation {}:{} type {} dims {} strides {} blocks {} of {} offset {}",
                     edge.node, edge.index, static_cast<int>(d.data_type),
                     fmt::join(d.dims, d.dims + n, "x"), fmt::join(b.strides, b.strides + n, ","),
                     fmt::join(b.inner_blks, b.inner_blks + blocks, ","),
                     fmt::join(b.inner_idxs, b.inner_idxs + blocks, ","), d.offset0);
}

const dnnl::memory& StagedArg::bind_constant(void* data) {
  if (reorder_ && data == staged_from_) return staged_;
  staged_from_ = data;
  return bind(data);
}

bool exact_int8_products() {
  const CpuFeatures& cpu = cpu_features();
  // The ISA bits below are x86's; elsewhere oneDNN reports none of them.
  if (!cpu.avx512_vnni && !cpu.avx_vnni) return false;
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto allows = [isa](dnnl_cpu_isa_t want) {
    return (isa & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
  };
  return allows(dnnl_cpu_isa_avx512_core_vnni) || allows(dnnl_cpu_isa_avx2_vnni);
}

void StagedArg::flush_staging() const {
  if (reorder_) flush_cache_lines(staged_.get_data_handle(), staged_.get_desc().get_size());
}

void Runner::flush_scratchpad() const {
  flush_cache_lines(scratchpad_.get_data_handle(), scratchpad_.get_desc().get_size());
}

void StagedArg::finish() {
  if (reorder_ && dir_ == Direction::Out)
    reorder_->execute(stream(), {{DNNL_ARG_FROM, staged_}, {DNNL_ARG_TO, user_}});
}

std::optional<size_t> measured_choice(const std::string& key,
                                      const std::function<std::optional<size_t>()>& measure) {
  static std::mutex mutex;
  static std::map<std::string, size_t> chosen;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  const std::optional<size_t> choice = measure();
  if (choice) chosen.emplace(key, *choice);
  return choice;
}

void Runner::run(std::unordered_map<int, dnnl::memory> args) {
  args.emplace(DNNL_ARG_SCRATCHPAD, scratchpad_);
  primitive_.execute(stream(), args);
}

}  // namespace sf::onednn
