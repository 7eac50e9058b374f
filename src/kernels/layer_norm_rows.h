// The driver both LayerNorm kernels (portable and AVX-512) share: the node's tensors, its
// epsilon, and the rows of the last axis split among threads. Each kernel brings its row.
#pragma once

#include <cstdint>

#include "cpu/parallel_for.h"
#include "kernels/kernel.h"

namespace sf {

// row(x, gamma, beta, y, channels, epsilon) normalizes one row of `channels` floats.
template <typename Row>
void layer_norm_rows(KernelContext& ctx, int64_t parallel_min_elements, Row row) {
  const Tensor& x = ctx.inputs[0];
  const int64_t rows = x.last_axis_rows(), channels = x.last_axis();
  const float* px = x.data<float>();
  const float* gamma = ctx.inputs[1].data<float>();
  const float* beta = ctx.inputs[2].data<float>();
  float* y = ctx.outputs[0].data<float>();
  const float epsilon = static_cast<float>(ctx.node.attrs.get_float("epsilon"));
  parallel_for(0, rows, rows * channels >= parallel_min_elements,
               [&](int64_t share_begin, int64_t share_end) {
                 for (int64_t r = share_begin; r < share_end; ++r)
                   row(px + r * channels, gamma, beta, y + r * channels, channels, epsilon);
               });
}

}  // namespace sf
