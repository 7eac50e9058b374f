#include "kernels/onednn/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include "core/error.h"

namespace sf::onednn {

void gemm_f32(bool transpose_a, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
              const char* what) {
  if (m == 0 || n == 0) return;
  const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', 'N', m, n, k, alpha, a, lda, b,
                                          ldb, beta, c, ldc);
  if (status != dnnl_success)
    fail("{}: oneDNN's sgemm of [{}, {}] x [{}, {}] failed (status {})", what, m, k, k, n,
         static_cast<int>(status));
}

}  // namespace sf::onednn
