// A row-major float matrix product on oneDNN's sgemm: fp32 MatMuls whose b is not transposed
// (matmul_kernels.cc) and data parallelism's gradients formed from a dense layer's factors
// (train/data_parallel.h).
#pragma once

#include <cstdint>

namespace sf::onednn {

// c [m, n] = alpha * op(a) * b + beta * c, all row-major; op(a) is a [m, k] at `lda` floats a
// row, or with transpose_a the transpose of a [k, m] at `lda` floats a row. Runs on the
// calling thread's OpenMP team. Throws sf::Error naming `what` when oneDNN refuses.
void gemm_f32(bool transpose_a, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
              const char* what);

}  // namespace sf::onednn
