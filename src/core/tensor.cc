#include "core/tensor.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/limits.h"

namespace sf {

namespace {
// Bytes held by owned storages: the memory budget (core/limits.h) bounds their sum, so that
// planning, folding and data loading fail with a message instead of exhausting the machine.
std::atomic<uint64_t> live_storage_bytes{0};

// Storages from this size up are mapped from the kernel rather than taken from malloc: fresh
// anonymous pages are already zero, so no memset pass touches every page before the first
// kernel does, and they are advised into 2 MiB transparent huge pages where the kernel offers
// them (one page fault and one TLB entry per 2 MiB instead of per 4 KiB).
constexpr size_t kHugePage = size_t{2} << 20;
#ifdef __SANITIZE_ADDRESS__
// AddressSanitizer guards malloc's blocks only: under it every storage comes from malloc.
constexpr size_t kMappedFrom = SIZE_MAX;
#else
constexpr size_t kMappedFrom = kHugePage;
#endif

size_t rounded_size(size_t bytes) {
  const size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  return rounded == 0 ? kTensorAlignment : rounded;
}

size_t mapped_size(size_t rounded) { return (rounded + kHugePage - 1) / kHugePage * kHugePage; }

// A huge-page-aligned mapping of `length` zero bytes, or null.
void* map_zeroed(size_t length) {
  // Mapped one huge page longer so an aligned start lies inside; the ends are returned.
  const size_t padded = length + kHugePage;
  void* raw = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + padded, used_end = aligned + length;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  void* data = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  madvise(data, length, MADV_HUGEPAGE);  // advice only: without it the pages are 4 KiB
#endif
  return data;
}
}  // namespace

std::shared_ptr<Storage> Storage::allocate(size_t bytes) {
  if (bytes > (size_t{1} << 60)) fail("a tensor of {} bytes is larger than any budget", bytes);
  const size_t rounded = rounded_size(bytes);
  const uint64_t in_use = live_storage_bytes.load();
  if (in_use + rounded > limits::memory_budget())
    limits::check_memory(in_use + rounded,
                         fmt::format("a tensor of {} (with {} already held)",
                                     limits::byte_size_str(bytes), limits::byte_size_str(in_use)));
  const bool mapped = rounded >= kMappedFrom;
  void* data = mapped ? map_zeroed(mapped_size(rounded))
                      : std::aligned_alloc(kTensorAlignment, rounded);
  if (data == nullptr) fail("out of memory allocating {} bytes", bytes);
  live_storage_bytes += rounded;
  if (!mapped) std::memset(data, 0, rounded);
  return std::shared_ptr<Storage>(new Storage(data, bytes, true, nullptr));
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes,
                                         std::shared_ptr<void> keep_alive) {
  return std::shared_ptr<Storage>(new Storage(data, bytes, false, std::move(keep_alive)));
}

Storage::~Storage() {
  if (owned_) {
    const size_t rounded = rounded_size(bytes_);
    if (rounded >= kMappedFrom)
      munmap(data_, mapped_size(rounded));
    else
      std::free(data_);
    live_storage_bytes -= rounded;
  }
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  limits::checked_num_elements(shape_, "tensor");
  storage_ = Storage::allocate(bytes());
}

Tensor::Tensor(DType dtype, Shape shape, std::shared_ptr<Storage> storage, size_t offset)
    : dtype_(dtype), shape_(std::move(shape)), storage_(std::move(storage)), offset_(offset) {
  SF_CHECK(storage_ && offset_ + bytes() <= storage_->bytes(),
           "tensor {} of {} does not fit its storage", shape_str(shape_), dtype_name(dtype_));
}

Tensor Tensor::scalar_f32(float value) {
  Tensor t(DType::f32, {});
  *t.data<float>() = value;
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  SF_CHECK(num_elements(shape) == numel(), "cannot reshape {} to {}", shape_str(shape_),
           shape_str(shape));
  return Tensor(dtype_, std::move(shape), storage_, offset_);
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  SF_CHECK(rank() > 0 && 0 <= begin && begin <= end && end <= shape_[0],
           "rows [{}, {}) of a tensor {}", begin, end, shape_str(shape_));
  Shape row_shape(shape_.begin() + 1, shape_.end());
  const size_t row_bytes = static_cast<size_t>(num_elements(row_shape)) * dtype_size(dtype_);
  Shape shape = shape_;
  shape[0] = end - begin;
  return Tensor(dtype_, std::move(shape), storage_,
                offset_ + static_cast<size_t>(begin) * row_bytes);
}

Tensor Tensor::clone() const {
  Tensor copy(dtype_, shape_);
  if (bytes() > 0) std::memcpy(copy.raw(), raw(), bytes());
  return copy;
}

void Tensor::copy_from(const Tensor& other) {
  SF_CHECK(other.dtype_ == dtype_ && other.numel() == numel(), "copy_from {} {} into {} {}",
           dtype_name(other.dtype_), shape_str(other.shape_), dtype_name(dtype_),
           shape_str(shape_));
  // A view of the same buffer (the session plans Reshape's output onto its input's) is a no-op.
  if (bytes() > 0 && raw() != other.raw()) std::memmove(raw(), other.raw(), bytes());
}

void Tensor::fill_zero() {
  if (bytes() > 0) std::memset(raw(), 0, bytes());
}

}  // namespace sf
