// Conv2DBackpropFilter with bf16 products on AMX tiles (impl "amx"; x86-64 builds, CPUs with
// amx_bf16, sessions asking for bf16 products). oneDNN 2.6's AMX kernel for this direction ran
// Deep-MNIST's conv2 (1.3 GFLOP a step) at 300-450 GFLOP/s here; its matmul on an im2col matrix
// was no faster (2.9-3.7 ms alone against the conv's 4.3), as it repacks both operands and the
// 20 MB matrix leaves the caches. This kernel: 1.6-2.6 ms where oneDNN's took 2.6-3.0 in the
// same alternating rounds (train --profile, Intel Xeon, 2 cores).
//
// The filter gradient is a matrix product over the output pixels p of the batch:
//   dW[o][(kh, kw, c)] = sum_p dy[p][o] * x_at_tap[p][(kh, kw, c)].
// x is first rounded to bf16 inside zero borders (no tap tests its bounds). Each thread then
// takes a contiguous share of the pixels and walks it in chunks small enough for its L2 cache.
// Per chunk it writes both operands in the form the tile instructions read, with no other copy:
// dy transposed to [o][p] (the A tiles) and the im2col rows of pixel pairs interleaved (the B
// tiles' VNNI form), rounded to bf16 to nearest even like oneDNN's reorders. Products
// accumulate in fp32 tiles; each thread keeps its own sums, added in a fixed order at the end,
// so a run is deterministic for a given thread count.
//
// Here a tile load takes about as long as a tile product (18 ns against 6 for the product
// alone), so 2 x 2 accumulator blocks, one load per product, set the pace: about 60% of the
// time is tiles, 25% the im2col rows (bound by their stores), 10% dy's transposes.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/parallel_for.h"
#include "kernels/amx_operands_avx512.h"
#include "kernels/kernel.h"
#include "kernels/register.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"

// GCC 12's AVX-512 intrinsics start from undefined vectors, which -Wmaybe-uninitialized reports
// once they are inlined (as in kernels/int8_loops_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sf {

namespace {

constexpr int kPriority = 12;  // above oneDNN's and float_loops' single-channel kernel

using amx::kTile;
using amx::round_up;
constexpr int64_t kPixelStep = amx::kKStep;  // pixels in one tile product
// A chunk's im2col rows take at most this much (and at most 512 pixels): with the other
// operand and the sums they stay in a 2 MB L2 cache.
constexpr int64_t kChunkBytes = 1 << 20;

// The shape of one filter gradient, with the padded sizes of its operands.
struct FilterGradShape {
  Window2D g;
  int64_t batch = 0, channels = 0, outputs = 0;
  int64_t pixels = 0;         // batch x output rows x output columns
  int64_t taps_channels = 0;  // kh x kw x channels: the gradient's rows in HWIO
  int64_t outputs_padded = 0, taps_channels_padded = 0;  // to two tiles
  // The input images with zeros around them wherever a tap may fall.
  int64_t padded_rows = 0, padded_cols = 0;
  int64_t chunk_pixels = 0;  // a multiple of kPixelStep

  FilterGradShape(const Shape& x, const Shape& dy, const Shape& filter, const Attrs& attrs)
      : g(conv_window(attrs, x, filter)),
        batch(x[0]),
        channels(x[3]),
        outputs(dy[3]),
        pixels(dy[0] * dy[1] * dy[2]),
        taps_channels(filter[0] * filter[1] * filter[2]),
        outputs_padded(round_up(outputs, 2 * kTile)),
        taps_channels_padded(round_up(taps_channels, 2 * kTile)),
        padded_rows(g.h.padded_extent()),
        padded_cols(g.w.padded_extent()),
        chunk_pixels(std::clamp<int64_t>(
            kChunkBytes / (2 * taps_channels_padded) / kPixelStep * kPixelStep, kPixelStep, 512)) {}

  int64_t padded_image() const { return padded_rows * padded_cols * channels; }
};

// One thread's buffers: the chunk's two operands and its sums
// [outputs_padded][taps_channels_padded].
struct ThreadBuffers {
  std::vector<uint16_t> dy_t, pairs;
  std::vector<float> sums;
};

// Images [n0, n1) of x, rounded to bf16, into their places inside the zero borders.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void pad_to_bf16(const float* x,
                                                                        const FilterGradShape& s,
                                                                        int64_t n0, int64_t n1,
                                                                        uint16_t* padded) {
  const Window2D& g = s.g;
  const int64_t row = g.w.in * s.channels;
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t r = 0; r < g.h.in; ++r) {
      const float* in = x + (n * g.h.in + r) * row;
      uint16_t* out = padded + n * s.padded_image() +
                      ((r + g.h.pad_before) * s.padded_cols + g.w.pad_before) * s.channels;
      for (int64_t i = 0; i < row; i += 32) {
        const __mmask16 low = lanes16(i, row), high = lanes16(i + 16, row);
        const __m512 a = _mm512_maskz_loadu_ps(low, in + i);
        const __m512 b = high == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(high, in + i + 16);
        _mm512_mask_storeu_epi16(out + i, lanes32(i, row),
                                 reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a)));
      }
    }
}

// The im2col rows of pixels [p0, p0 + count) of the batch, in pairs: row j holds, for every
// (kh, kw, c), the values of pixels 2j and 2j + 1 side by side (zeros past `count`); rows up to
// width / 2. Taps read the zero-bordered bf16 images, so no tap tests its bounds.
__attribute__((target("avx512f,avx512bw"))) void interleaved_im2col(const uint16_t* padded,
                                                                    const FilterGradShape& s,
                                                                    int64_t p0, int64_t count,
                                                                    int64_t width, uint16_t* out) {
  const Window2D& g = s.g;
  const int64_t per_image = g.h.out * g.w.out, row_values = 2 * s.taps_channels_padded;
  const int64_t tap_rows = g.h.dilation * s.padded_cols * s.channels,
                tap_cols = g.w.dilation * s.channels;
  // Output lanes 2i and 2i + 1 take a's and b's channel i: channels [0, 16), then [16, 32).
  alignas(64) uint16_t first[32], second[32];
  for (uint16_t i = 0; i < 16; ++i) {
    first[2 * i] = i;
    first[2 * i + 1] = static_cast<uint16_t>(32 + i);
    second[2 * i] = static_cast<uint16_t>(16 + i);
    second[2 * i + 1] = static_cast<uint16_t>(48 + i);
  }
  const __m512i first_half = _mm512_load_si512(first), second_half = _mm512_load_si512(second);
  // The top-left tap of pixel i's window.
  auto corner = [&](int64_t i) {
    const int64_t p = p0 + std::min(i, count - 1), n = p / per_image;
    const int64_t oy = p % per_image / g.w.out, ox = p % g.w.out;
    return padded + n * s.padded_image() +
           (oy * g.h.stride * s.padded_cols + ox * g.w.stride) * s.channels;
  };
  for (int64_t j = 0; j < width / 2; ++j) {
    const uint16_t* a = corner(2 * j);
    const uint16_t* b = corner(2 * j + 1);
    // Past `count` (the ragged end of a share) both pixels may be missing: zeros.
    const bool has_a = 2 * j < count, has_b = 2 * j + 1 < count;
    uint16_t* dst = out + j * row_values;
    for (int64_t fr = 0; fr < g.h.k; ++fr)
      for (int64_t fc = 0; fc < g.w.k; ++fc, dst += 2 * s.channels) {
        const int64_t offset = fr * tap_rows + fc * tap_cols;
        for (int64_t c = 0; c < s.channels; c += 32) {
          const __mmask32 m = lanes32(c, s.channels);
          const __m512i va = _mm512_maskz_loadu_epi16(has_a ? m : 0, a + offset + c);
          const __m512i vb = _mm512_maskz_loadu_epi16(has_b ? m : 0, b + offset + c);
          _mm512_mask_storeu_epi32(dst + 2 * c, lanes16(c, s.channels),
                                   _mm512_permutex2var_epi16(va, first_half, vb));
          const __mmask16 rest = lanes16(c + 16, s.channels);
          if (rest != 0)
            _mm512_mask_storeu_epi32(dst + 2 * c + 32, rest,
                                     _mm512_permutex2var_epi16(va, second_half, vb));
        }
      }
  }
}

// sums[o][t] += dy_t[o][k] * pairs[k][t] over `width` pixels (a multiple of 32), in blocks of
// 2 x 2 accumulator tiles (32 outputs x 32 taps): per pixel step, four tile loads for four
// products. Tiles are not renamed, so each load waits for the products reading its tile; the
// order below lets the second B and A loads overlap the first products.
__attribute__((target("amx-tile,amx-bf16"))) void accumulate_tiles(const FilterGradShape& s,
                                                                   const uint16_t* dy_t,
                                                                   const uint16_t* pairs,
                                                                   int64_t width, float* sums) {
  const int64_t sums_stride = s.taps_channels_padded * 4;  // bytes
  const int64_t a_stride = s.chunk_pixels * 2, b_stride = s.taps_channels_padded * 4;
  for (int64_t t = 0; t < s.taps_channels_padded; t += 2 * kTile)
    for (int64_t o = 0; o < s.outputs_padded; o += 2 * kTile) {
      float* c = sums + o * s.taps_channels_padded + t;
      float* c_low = c + kTile * s.taps_channels_padded;
      _tile_loadd(0, c, sums_stride);
      _tile_loadd(1, c + kTile, sums_stride);
      _tile_loadd(2, c_low, sums_stride);
      _tile_loadd(3, c_low + kTile, sums_stride);
      for (int64_t k = 0; k < width; k += kPixelStep) {
        const uint16_t* a = dy_t + o * s.chunk_pixels + k;
        const uint16_t* b = pairs + (k / 2) * 2 * s.taps_channels_padded + 2 * t;
        _tile_loadd(4, a, a_stride);
        _tile_loadd(6, b, b_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, b + 2 * kTile, b_stride);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a + kTile * s.chunk_pixels, a_stride);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c, sums_stride);
      _tile_stored(1, c + kTile, sums_stride);
      _tile_stored(2, c_low, sums_stride);
      _tile_stored(3, c_low + kTile, sums_stride);
    }
}

class AmxFilterGradKernel : public Kernel {
 public:
  explicit AmxFilterGradKernel(const KernelSpec& spec)
      : shape_(spec.inputs[0].shape, spec.inputs[1].shape, spec.node.outputs[0].shape,
               spec.node.attrs) {}

  void compute(KernelContext& ctx) override {
    const FilterGradShape& s = shape_;
    const float* x = ctx.inputs[0].data<float>();
    const float* dy = ctx.inputs[1].data<float>();
    const int threads = s.pixels >= 2 * s.chunk_pixels ? omp_get_max_threads() : 1;
    if (static_cast<int>(buffers_.size()) < threads) buffers_.resize(static_cast<size_t>(threads));
    if (padded_.empty()) padded_.assign(static_cast<size_t>(s.batch * s.padded_image()), 0);
    int team = 1;  // the threads that ran: fewer than asked for inside another region
    parallel_region(threads > 1, [&] {
      const int64_t share = omp_get_num_threads(), t = omp_get_thread_num();
      if (t == 0) team = omp_get_num_threads();
      pad_to_bf16(x, s, s.batch * t / share, s.batch * (t + 1) / share, padded_.data());
#pragma omp barrier
      ThreadBuffers& mine = buffers_[static_cast<size_t>(t)];
      if (mine.sums.empty()) {
        // Padded rows and columns stay zero: the loops never write them.
        mine.dy_t.assign(static_cast<size_t>(s.outputs_padded * s.chunk_pixels), 0);
        mine.pairs.assign(static_cast<size_t>(s.chunk_pixels * s.taps_channels_padded), 0);
        mine.sums.resize(static_cast<size_t>(s.outputs_padded * s.taps_channels_padded));
      }
      std::fill(mine.sums.begin(), mine.sums.end(), 0.0f);
      // Shares in whole tile steps, so only the last chunk of the last share is ragged.
      const int64_t steps = (s.pixels + kPixelStep - 1) / kPixelStep;
      const int64_t begin = std::min(s.pixels, steps * t / share * kPixelStep);
      const int64_t end = std::min(s.pixels, steps * (t + 1) / share * kPixelStep);
      amx::load_tile_config(config_);
      for (int64_t p = begin; p < end; p += s.chunk_pixels) {
        const int64_t count = std::min(s.chunk_pixels, end - p);
        const int64_t width = round_up(count, kPixelStep);
        amx::transposed_to_bf16(dy + p * s.outputs, s.outputs, s.outputs, count, width,
                                mine.dy_t.data(), s.chunk_pixels);
        interleaved_im2col(padded_.data(), s, p, count, width, mine.pairs.data());
        accumulate_tiles(s, mine.dy_t.data(), mine.pairs.data(), width, mine.sums.data());
      }
      amx::release_tiles();
    });
    // Threads' sums added in thread order, transposed to HWIO [(kh, kw, c)][o].
    float* df = ctx.outputs[0].data<float>();
    for (int64_t o = 0; o < s.outputs; ++o)
      for (int64_t r = 0; r < s.taps_channels; ++r) {
        float sum = 0.0f;
        for (int t = 0; t < team; ++t)
          sum += buffers_[static_cast<size_t>(t)].sums[o * s.taps_channels_padded + r];
        df[r * s.outputs + o] = sum;
      }
  }

  std::string running_impl() const override { return "bf16"; }

 private:
  FilterGradShape shape_;
  AmxTileConfig config_ = amx::eight_full_tiles();  // accumulators 0-3, A 4-5, B 6-7
  std::vector<ThreadBuffers> buffers_;
  std::vector<uint16_t> padded_;  // x in bf16 inside zero borders, written by every run
};

bool accepts(const KernelSpec& spec) {
  if (!spec.bf16 || !cpu_features().amx_bf16 || !cpu_features().avx512_bf16) return false;
  if (spec.inputs.size() != 2 || spec.inputs[0].shape.size() != 4 ||
      spec.inputs[1].shape.size() != 4 || spec.inputs[1].dtype != DType::f32)
    return false;
  // Channels vectorize the im2col rows. Single-channel convs keep float_loops' kernel: on AMX,
  // with each window row of a pixel pair copied whole, Deep-MNIST's conv1 took as long (0.8-1.0
  // ms a step), and conv2's filter gradient ran slower beside it.
  const Shape& x = spec.inputs[0].shape;
  if (spec.node.attrs.get_int("groups") != 1 || x[3] < 16) return false;
  for (const TensorType& t : spec.inputs)
    if (num_elements(t.shape) == 0) return false;
  return amx_permitted();
}

}  // namespace

void register_amx_filter_grad_kernel(KernelRegistry& r) {
  KernelDef def;
  def.op = op_names::kConv2DBackpropFilter;
  def.impl = "amx";
  def.priority = kPriority;
  def.accepts = accepts;
  def.create = [](const KernelSpec& spec) -> std::unique_ptr<Kernel> {
    return std::make_unique<AmxFilterGradKernel>(spec);
  };
  r.add(std::move(def));
}

}  // namespace sf
