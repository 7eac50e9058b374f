#include "kernels/sparse/sparse_weights.h"

#include <algorithm>
#include <limits>

namespace sf::sparse {

namespace {

template <typename Value>
double count_zero_fraction(const Value* values, int64_t count) {
  if (count == 0) return 1.0;
  int64_t zeros = 0;
  for (int64_t i = 0; i < count; ++i) zeros += values[i] == Value{0};
  return static_cast<double>(zeros) / static_cast<double>(count);
}

template <typename Index, typename Value>
CsrMatrix<Index, Value> build_csr(const Value* w, int64_t k, int64_t n, bool transposed) {
  CsrMatrix<Index, Value> csr;
  csr.rows = n;
  csr.cols = k;
  csr.row_start.reserve(static_cast<size_t>(n + 1));
  csr.row_start.push_back(0);
  // Element (kk, nn) of W, whichever way it is stored.
  const int64_t k_step = transposed ? 1 : n;
  const int64_t n_step = transposed ? k : 1;
  for (int64_t nn = 0; nn < n; ++nn) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const Value v = w[kk * k_step + nn * n_step];
      if (v == Value{0}) continue;
      csr.col.push_back(static_cast<Index>(kk));
      csr.value.push_back(v);
    }
    csr.row_start.push_back(static_cast<int64_t>(csr.value.size()));
  }
  return csr;
}

// Calls visit(kk, nn0, values) for each nonzero block, strip by strip, with the block's
// min(block, n - nn0) values in `values`.
template <typename Value, typename Visit>
void for_each_nonzero_block(const Value* w, int64_t k, int64_t n, bool transposed, int64_t block,
                            Visit visit) {
  const int64_t k_step = transposed ? 1 : n;
  const int64_t n_step = transposed ? k : 1;
  std::vector<Value> values(static_cast<size_t>(block));
  for (int64_t nn0 = 0; nn0 < n; nn0 += block) {
    const int64_t width = std::min(block, n - nn0);
    for (int64_t kk = 0; kk < k; ++kk) {
      bool any = false;
      for (int64_t i = 0; i < width; ++i) {
        values[static_cast<size_t>(i)] = w[kk * k_step + (nn0 + i) * n_step];
        any = any || values[static_cast<size_t>(i)] != Value{0};
      }
      if (any) visit(kk, nn0, values.data());
    }
  }
}

template <typename Index, typename Value>
BlockCsr<Index, Value> build_block_csr(const Value* w, int64_t k, int64_t n, bool transposed,
                                       int64_t block) {
  BlockCsr<Index, Value> csr;
  csr.block = block;
  csr.strips = (n + block - 1) / block;
  csr.strip_start.assign(static_cast<size_t>(csr.strips + 1), 0);
  for_each_nonzero_block(w, k, n, transposed, block, [&](int64_t kk, int64_t nn0, const Value* v) {
    csr.row.push_back(static_cast<Index>(kk));
    const int64_t width = std::min(block, n - nn0);
    csr.value.insert(csr.value.end(), v, v + width);
    csr.value.resize(csr.value.size() + static_cast<size_t>(block - width), Value{0});
    ++csr.strip_start[static_cast<size_t>(nn0 / block + 1)];
  });
  for (int64_t s = 0; s < csr.strips; ++s)
    csr.strip_start[static_cast<size_t>(s + 1)] += csr.strip_start[static_cast<size_t>(s)];
  return csr;
}

bool fits_16_bits(int64_t k) {
  return k <= static_cast<int64_t>(std::numeric_limits<uint16_t>::max()) + 1;
}

template <typename Value>
int64_t count_nonzero_blocks(const Value* w, int64_t k, int64_t n, bool transposed,
                             int64_t block) {
  int64_t count = 0;
  for_each_nonzero_block(w, k, n, transposed, block,
                         [&](int64_t, int64_t, const Value*) { ++count; });
  return count;
}

}  // namespace

double zero_fraction(const float* values, int64_t count) {
  return count_zero_fraction(values, count);
}

double zero_fraction(const int8_t* values, int64_t count) {
  return count_zero_fraction(values, count);
}

double zero_fraction(const Tensor& t) {
  if (t.dtype() == DType::i8) return zero_fraction(t.data<int8_t>(), t.numel());
  return zero_fraction(t.data<float>(), t.numel());
}

int64_t nonzero_blocks(const float* w, int64_t k, int64_t n, bool transposed, int64_t block) {
  return count_nonzero_blocks(w, k, n, transposed, block);
}

int64_t nonzero_blocks(const int8_t* w, int64_t k, int64_t n, bool transposed, int64_t block) {
  return count_nonzero_blocks(w, k, n, transposed, block);
}

BlockCsr<uint32_t, int8_t> block_csr_of_weights(const int8_t* w, int64_t k, int64_t n,
                                                bool transposed, int64_t block) {
  return build_block_csr<uint32_t>(w, k, n, transposed, block);
}

AnyBlockCsr block_csr_of_weights(const float* w, int64_t k, int64_t n, bool transposed,
                                 int64_t block) {
  if (fits_16_bits(k)) return build_block_csr<uint16_t>(w, k, n, transposed, block);
  return build_block_csr<uint32_t>(w, k, n, transposed, block);
}

AnyCsr csr_of_weights(const float* w, int64_t k, int64_t n, bool transposed) {
  if (fits_16_bits(k)) return build_csr<uint16_t>(w, k, n, transposed);
  return build_csr<uint32_t>(w, k, n, transposed);
}

AnyInt8Csr csr_of_weights(const int8_t* w, int64_t k, int64_t n, bool transposed) {
  if (fits_16_bits(k)) return build_csr<uint16_t>(w, k, n, transposed);
  return build_csr<uint32_t>(w, k, n, transposed);
}

std::vector<std::vector<ConvTap>> conv_taps_of_filter(const float* filter, const Shape& hwio) {
  const int64_t kh = hwio[0], kw = hwio[1], ci = hwio[2], co = hwio[3];
  std::vector<std::vector<ConvTap>> taps(static_cast<size_t>(co));
  for (int64_t h = 0; h < kh; ++h)
    for (int64_t w = 0; w < kw; ++w)
      for (int64_t c = 0; c < ci; ++c) {
        const float* row = filter + ((h * kw + w) * ci + c) * co;
        for (int64_t o = 0; o < co; ++o)
          if (row[o] != 0.0f)
            taps[static_cast<size_t>(o)].push_back(ConvTap{
                static_cast<int32_t>(h), static_cast<int32_t>(w), static_cast<int32_t>(c), row[o]});
      }
  return taps;
}

}  // namespace sf::sparse
