#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

namespace sf {

std::shared_ptr<Storage> Storage::allocate(size_t bytes) {
  size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (rounded == 0) rounded = kTensorAlignment;
  void* data = std::aligned_alloc(kTensorAlignment, rounded);
  if (data == nullptr) fail("out of memory allocating {} bytes", bytes);
  std::memset(data, 0, rounded);
  return std::shared_ptr<Storage>(new Storage(data, bytes, true, nullptr));
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes,
                                         std::shared_ptr<void> keep_alive) {
  return std::shared_ptr<Storage>(new Storage(data, bytes, false, std::move(keep_alive)));
}

Storage::~Storage() {
  if (owned_) std::free(data_);
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_) SF_CHECK(d >= 0, "negative dimension in {}", shape_str(shape_));
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

Tensor Tensor::clone() const {
  Tensor copy(dtype_, shape_);
  if (bytes() > 0) std::memcpy(copy.raw(), raw(), bytes());
  return copy;
}

void Tensor::copy_from(const Tensor& other) {
  SF_CHECK(other.dtype_ == dtype_ && other.numel() == numel(), "copy_from {} {} into {} {}",
           dtype_name(other.dtype_), shape_str(other.shape_), dtype_name(dtype_),
           shape_str(shape_));
  if (bytes() > 0) std::memmove(raw(), other.raw(), bytes());
}

void Tensor::fill_zero() {
  if (bytes() > 0) std::memset(raw(), 0, bytes());
}

}  // namespace sf
