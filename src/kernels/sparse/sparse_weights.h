// Sparse forms of frozen weights, built once from the dense tensor when a kernel first sees it.
//
// MatMul: W [K, N] is stored transposed in CSR, one row per output n holding its nonzero
// (k, value) pairs, so each output is one short sparse dot product (batch 1) or one sum of
// scaled input rows (batches). Indices are 16-bit when K allows: at 90% sparsity the index
// stream is a third of the bytes read, and 16 bits cut it in half.
//
// Block-sparse MatMul, for weights pruned in blocks of R adjacent outputs (prune --block R):
// W [K, N] is cut into strips of R output columns, and each strip keeps the rows k whose block
// W[k, strip] holds a nonzero, with all R values of the block (zeros included, the last strip
// padded with zeros when R does not divide N). One input x[k] then serves R multiply-adds read
// with one vector load, instead of one load of x, index and value per nonzero.
//
// The int8 kernels (int8_sparse_matmul_kernel.cc) use the same forms with int8 values.
//
// Conv2D: per output channel, the nonzero (kh, kw, ci) taps with their values; the kernel turns
// each tap into an offset into its own input layout (see sparse_conv_kernel.cc).
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace sf::sparse {

// The fraction of exact zeros among `count` values (1 for an empty tensor).
double zero_fraction(const float* values, int64_t count);
double zero_fraction(const int8_t* values, int64_t count);
// The same for an f32 or i8 tensor.
double zero_fraction(const Tensor& t);

template <typename Index, typename Value = float>
struct CsrMatrix {
  int64_t rows = 0;                // N: one row per output
  int64_t cols = 0;                // K: the reduced dimension
  std::vector<int64_t> row_start;  // rows + 1 entries into col / value
  std::vector<Index> col;
  std::vector<Value> value;

  int64_t nonzeros() const { return static_cast<int64_t>(value.size()); }
};

// Narrow indices when every column fits; 32-bit otherwise.
using AnyCsr = std::variant<CsrMatrix<uint16_t>, CsrMatrix<uint32_t>>;

// The transpose of W in CSR. `w` holds W [K, N] row-major, or W^T [N, K] when `transposed`
// (MatMul's transpose_b).
AnyCsr csr_of_weights(const float* w, int64_t k, int64_t n, bool transposed);

using AnyInt8Csr = std::variant<CsrMatrix<uint16_t, int8_t>, CsrMatrix<uint32_t, int8_t>>;
AnyInt8Csr csr_of_weights(const int8_t* w, int64_t k, int64_t n, bool transposed);

template <typename Index, typename Value = float>
struct BlockCsr {
  int64_t block = 0;                 // R
  int64_t strips = 0;                // ceil(N / R)
  std::vector<int64_t> strip_start;  // strips + 1 entries into row, counted in blocks
  std::vector<Index> row;            // k of each block
  std::vector<Value> value;          // R per block

  int64_t blocks() const { return static_cast<int64_t>(row.size()); }
};

using AnyBlockCsr = std::variant<BlockCsr<uint16_t>, BlockCsr<uint32_t>>;

// How many of W's blocks of `block` adjacent outputs (one row k, one strip) hold a nonzero.
// `w` as for csr_of_weights.
int64_t nonzero_blocks(const float* w, int64_t k, int64_t n, bool transposed, int64_t block);
int64_t nonzero_blocks(const int8_t* w, int64_t k, int64_t n, bool transposed, int64_t block);

AnyBlockCsr block_csr_of_weights(const float* w, int64_t k, int64_t n, bool transposed,
                                 int64_t block);
// Always with 32-bit rows: the int8 kernels regroup the blocks anyway.
BlockCsr<uint32_t, int8_t> block_csr_of_weights(const int8_t* w, int64_t k, int64_t n,
                                                bool transposed, int64_t block);

struct ConvTap {
  int32_t kh, kw, ci;
  float value;
};

// For each output channel of an HWIO filter [kh, kw, ci, co], its nonzero taps.
std::vector<std::vector<ConvTap>> conv_taps_of_filter(const float* filter, const Shape& hwio);

}  // namespace sf::sparse
