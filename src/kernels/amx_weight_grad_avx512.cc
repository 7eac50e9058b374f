// MatMul(a, b, transpose_a) with bf16 products on AMX tiles (impl "amx"; x86-64 builds, CPUs
// with amx_bf16, sessions asking for bf16 products): a dense layer's weight gradient
// dW[M][N] = x[K][M]^T dy[K][N], summed over a batch of K rows. oneDNN 2.6 ran Deep-MNIST's
// fc1 gradient (3136 x 64 x 1024, 0.4 GFLOP, 12.8 MB of fp32 out) in 1.5 ms a step here, from x
// read transposed through strides; writing 12.8 MB alone takes 0.4 ms on this machine.
//
// Each thread takes a share of the output's rows in strips of 32 and packs what its strips
// read: its columns of x transposed to [m][k] (A tiles) and the whole of dy with pairs of rows
// interleaved (B tiles' VNNI form; 128 KB for fc1, so every thread packs its own copy rather
// than wait at a barrier). It then walks its strips in 2 x 2 blocks of accumulator tiles
// (32 x 32 outputs), summing over k and storing each block into the output once: every output
// value is written by one thread, so runs are deterministic.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/parallel_for.h"
#include "kernels/amx_operands_avx512.h"
#include "kernels/kernel.h"
#include "kernels/register.h"
#include "ops/op_names.h"

// GCC 12's AVX-512 intrinsics start from undefined vectors, which -Wmaybe-uninitialized reports
// once they are inlined (as in kernels/int8_loops_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sf {

namespace {

constexpr int kPriority = 12;  // above oneDNN's
using amx::kKStep;
using amx::kTile;
using amx::round_up;
constexpr int64_t kStrip = 2 * kTile;  // output rows (and columns) of an accumulator block

struct ProductShape {
  int64_t k = 0, m = 0, n = 0;
  int64_t k_padded = 0, n_padded = 0;  // to a tile step and to two tiles
  int64_t strips = 0;                  // of kStrip output rows

  ProductShape(const Shape& a, const Shape& b)
      : k(a[0]),
        m(a[1]),
        n(b[1]),
        k_padded(round_up(k, kKStep)),
        n_padded(round_up(n, kStrip)),
        strips((m + kStrip - 1) / kStrip) {}
};

// Rows [0, k) of dy [k][n], rounded to bf16, as B tiles read them: out[j][2c + i] = dy[2j + i][c],
// with zeros past k rows and n columns, up to k_padded / 2 rows of 2 x n_padded values.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void row_pairs_to_bf16(
    const float* dy, const ProductShape& s, uint16_t* out) {
  alignas(64) uint16_t order[32];
  for (uint16_t i = 0; i < 16; ++i) {
    order[2 * i] = i;
    order[2 * i + 1] = static_cast<uint16_t>(16 + i);
  }
  const __m512i interleave = _mm512_load_si512(order);
  for (int64_t j = 0; j < s.k_padded / 2; ++j) {
    const bool has_first = 2 * j < s.k, has_second = 2 * j + 1 < s.k;
    const float* first = dy + 2 * j * s.n;
    const float* second = first + s.n;
    uint16_t* row = out + j * 2 * s.n_padded;
    for (int64_t c = 0; c < s.n_padded; c += kTile) {
      const __mmask16 m = lanes16(c, s.n);
      const __m512 a = _mm512_maskz_loadu_ps(has_first ? m : 0, first + c);
      const __m512 b = _mm512_maskz_loadu_ps(has_second ? m : 0, second + c);
      const __m512i pair = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
      _mm512_storeu_si512(row + 2 * c, _mm512_permutexvar_epi16(interleave, pair));
    }
  }
}

// out[r][n] for the strips' rows [row0, row0 + rows) of the output, from a_t (those rows of
// x^T, k_padded apart) and the pairs of dy. Blocks that cross the output's edge go through
// `edge` (32 x 32 floats) and are copied in part.
__attribute__((target("amx-tile,amx-bf16"))) void multiply(const ProductShape& s,
                                                           const uint16_t* a_t,
                                                           const uint16_t* pairs, int64_t row0,
                                                           int64_t rows, float* out, float* edge) {
  const int64_t a_stride = s.k_padded * 2, b_stride = s.n_padded * 4;  // bytes
  for (int64_t r = 0; r < rows; r += kStrip)
    for (int64_t c = 0; c < s.n_padded; c += kStrip) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t k = 0; k < s.k_padded; k += kKStep) {
        const uint16_t* a = a_t + r * s.k_padded + k;
        const uint16_t* b = pairs + k * s.n_padded + 2 * c;
        _tile_loadd(4, a, a_stride);
        _tile_loadd(6, b, b_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, b + 2 * kTile, b_stride);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a + kTile * s.k_padded, a_stride);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      const int64_t out_row = row0 + r;
      const bool inside = out_row + kStrip <= s.m && c + kStrip <= s.n;
      float* block = inside ? out + out_row * s.n + c : edge;
      const int64_t stride = inside ? s.n * 4 : kStrip * 4;
      const int64_t below = kTile * stride / 4;
      _tile_stored(0, block, stride);
      _tile_stored(1, block + kTile, stride);
      _tile_stored(2, block + below, stride);
      _tile_stored(3, block + below + kTile, stride);
      if (inside) continue;
      const int64_t valid_rows = std::min(kStrip, s.m - out_row);
      const int64_t valid_cols = std::min(kStrip, s.n - c);
      for (int64_t i = 0; i < valid_rows; ++i)
        std::memcpy(out + (out_row + i) * s.n + c, edge + i * kStrip,
                    static_cast<size_t>(valid_cols) * sizeof(float));
    }
}

// One thread's packed operands and its edge block.
struct ThreadBuffers {
  std::vector<uint16_t> a_t, pairs;
  std::vector<float> edge;
};

class AmxWeightGradKernel : public Kernel {
 public:
  explicit AmxWeightGradKernel(const KernelSpec& spec)
      : shape_(spec.inputs[0].shape, spec.inputs[1].shape) {}

  void compute(KernelContext& ctx) override {
    const ProductShape& s = shape_;
    const float* x = ctx.inputs[0].data<float>();
    const float* dy = ctx.inputs[1].data<float>();
    float* out = ctx.outputs[0].data<float>();
    const int threads = s.strips >= 2 ? omp_get_max_threads() : 1;
    if (static_cast<int>(buffers_.size()) < threads) buffers_.resize(static_cast<size_t>(threads));
    parallel_region(threads > 1, [&] {
      const int64_t team = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t first = s.strips * t / team, last = s.strips * (t + 1) / team;
      if (first == last) return;
      ThreadBuffers& mine = buffers_[static_cast<size_t>(t)];
      const int64_t rows = (last - first) * kStrip, row0 = first * kStrip;
      const auto a_size = static_cast<size_t>(rows * s.k_padded);
      if (mine.a_t.size() < a_size) mine.a_t.resize(a_size);
      if (mine.pairs.empty()) {
        mine.pairs.resize(static_cast<size_t>(s.k_padded * s.n_padded));
        mine.edge.resize(static_cast<size_t>(kStrip * kStrip));
      }
      row_pairs_to_bf16(dy, s, mine.pairs.data());
      const int64_t real_rows = std::min(rows, s.m - row0);
      amx::transposed_to_bf16(x + row0, s.m, real_rows, s.k, s.k_padded, mine.a_t.data(),
                              s.k_padded);
      // Rows past m: zeros, as a share's last strip may differ from one run to the next.
      std::fill(mine.a_t.begin() + real_rows * s.k_padded, mine.a_t.begin() + rows * s.k_padded,
                uint16_t{0});
      amx::load_tile_config(config_);
      multiply(s, mine.a_t.data(), mine.pairs.data(), row0, rows, out, mine.edge.data());
      amx::release_tiles();
    });
  }

  std::string running_impl() const override { return "bf16"; }

 private:
  ProductShape shape_;
  AmxTileConfig config_ = amx::eight_full_tiles();  // accumulators 0-3, A 4-5, B 6-7
  std::vector<ThreadBuffers> buffers_;
};

bool accepts(const KernelSpec& spec) {
  if (!spec.bf16 || !cpu_features().amx_bf16 || !cpu_features().avx512_bf16) return false;
  if (spec.inputs.size() != 2 || !spec.node.attrs.get_bool("transpose_a") ||
      spec.node.attrs.get_bool("transpose_b"))
    return false;
  const Shape& a = spec.inputs[0].shape;
  const Shape& b = spec.inputs[1].shape;
  if (a.size() != 2 || b.size() != 2 || spec.inputs[0].dtype != DType::f32 ||
      spec.inputs[1].dtype != DType::f32)
    return false;
  if (num_elements(a) == 0 || num_elements(b) == 0) return false;
  return amx_permitted();
}

}  // namespace

void register_amx_weight_grad_kernel(KernelRegistry& r) {
  KernelDef def;
  def.op = op_names::kMatMul;
  def.impl = "amx";
  def.priority = kPriority;
  def.accepts = accepts;
  def.create = [](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<AmxWeightGradKernel>(spec);
  };
  r.add(std::move(def));
}

}  // namespace sf
