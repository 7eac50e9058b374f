// A typed, shaped view of a byte buffer. Tensors share their storage: copying a Tensor is cheap
// and aliases the same bytes; clone() makes a deep copy. Storage is 64-byte aligned so SIMD
// kernels and oneDNN can use it directly, and it can also wrap memory owned by someone else
// (an arena slot, a memory-mapped file) without copying.
#pragma once

#include <cstddef>
#include <memory>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace sf {

inline constexpr size_t kTensorAlignment = 64;

// Owns (or borrows) a block of bytes.
class Storage {
 public:
  // Allocates `bytes` zeroed bytes, 64-byte aligned.
  static std::shared_ptr<Storage> allocate(size_t bytes);
  // Borrows memory that `keep_alive` keeps valid (may be null when the caller guarantees it).
  static std::shared_ptr<Storage> borrow(void* data, size_t bytes,
                                         std::shared_ptr<void> keep_alive = nullptr);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  Storage(void* data, size_t bytes, bool owned, std::shared_ptr<void> keep_alive)
      : data_(data), bytes_(bytes), owned_(owned), keep_alive_(std::move(keep_alive)) {}
  void* data_;
  size_t bytes_;
  bool owned_;
  std::shared_ptr<void> keep_alive_;
};

class Tensor {
 public:
  Tensor() = default;
  // A new zero-filled tensor.
  Tensor(DType dtype, Shape shape);
  // A tensor over existing storage starting at byte `offset`.
  Tensor(DType dtype, Shape shape, std::shared_ptr<Storage> storage, size_t offset = 0);

  template <typename T>
  static Tensor from_vector(Shape shape, const std::vector<T>& values);
  static Tensor scalar_f32(float value);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t numel() const { return num_elements(shape_); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  // The tensor as rows of its last axis (a scalar is one row of one): 0 rows when that axis is
  // empty, so that a loop over them divides by nothing.
  int64_t last_axis() const { return rank() == 0 ? 1 : dim(-1); }
  int64_t last_axis_rows() const { return last_axis() == 0 ? 0 : numel() / last_axis(); }

  void* raw() const { return static_cast<char*>(storage_->data()) + offset_; }
  template <typename T>
  T* data() const {
    SF_CHECK(dtype_of<T>() == dtype_, "tensor is {}, accessed as {}", dtype_name(dtype_),
             dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // Same bytes, another shape with the same number of elements.
  Tensor reshaped(Shape shape) const;
  // Rows [begin, end) along dimension 0 (examples of a batch), over the same storage.
  Tensor rows(int64_t begin, int64_t end) const;
  Tensor clone() const;
  // Copies the contents of `other` (same dtype and element count) into this tensor.
  void copy_from(const Tensor& other);
  void fill_zero();
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Where raw() starts in storage(), in bytes.
  size_t offset() const { return offset_; }

 private:
  DType dtype_ = DType::f32;
  Shape shape_;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
};

template <typename T>
Tensor Tensor::from_vector(Shape shape, const std::vector<T>& values) {
  Tensor t(dtype_of<T>(), std::move(shape));
  SF_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: {} values for shape {}",
           values.size(), shape_str(t.shape()));
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

}  // namespace sf
