// Reference kernels for BatchNorm and BatchNormGrad (and their fused forms), LayerNorm and Dropout.
// Per-channel sums run over the rows in order, in double, so results do not depend on the thread
// count.
#include <cmath>
#include <vector>

#include "core/activation.h"
#include "cpu/parallel_for.h"
#include "kernels/dropout_draw.h"
#include "kernels/kernel.h"
#include "kernels/reference/reference.h"
#include "ops/op_names.h"

namespace sf {

namespace {

std::vector<double> inv_std(const float* var, int64_t channels, double epsilon) {
  std::vector<double> out(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c)
    out[static_cast<size_t>(c)] = 1.0 / std::sqrt(var[c] + epsilon);
  return out;
}

void batch_norm(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t rows = x.last_axis_rows(), channels = x.last_axis();
  const float* px = x.data<float>();
  const float* gamma = ctx.inputs[1].data<float>();
  const float* beta = ctx.inputs[2].data<float>();
  float* y = ctx.outputs[0].data<float>();
  float* mean = ctx.outputs[1].data<float>();
  float* var = ctx.outputs[2].data<float>();
  if (ctx.training) {
    // Two passes (mean, then squared deviations) avoid cancellation in the variance.
    std::vector<double> sum(static_cast<size_t>(channels), 0.0);
    std::vector<double> sq(static_cast<size_t>(channels), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < channels; ++c) sum[static_cast<size_t>(c)] += px[r * channels + c];
    for (int64_t c = 0; c < channels; ++c)
      sum[static_cast<size_t>(c)] /= static_cast<double>(rows > 0 ? rows : 1);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < channels; ++c) {
        double d = px[r * channels + c] - sum[static_cast<size_t>(c)];
        sq[static_cast<size_t>(c)] += d * d;
      }
    for (int64_t c = 0; c < channels; ++c) {
      mean[c] = static_cast<float>(sum[static_cast<size_t>(c)]);
      var[c] =
          static_cast<float>(sq[static_cast<size_t>(c)] / static_cast<double>(rows > 0 ? rows : 1));
    }
  } else {
    ctx.outputs[1].copy_from(ctx.inputs[3]);
    ctx.outputs[2].copy_from(ctx.inputs[4]);
  }
  const std::vector<double> inv = inv_std(var, channels, ctx.node.attrs.get_float("epsilon"));
  const Activation activation = activation_of(ctx.node);  // FusedBatchNorm's; none for BatchNorm
  parallel_for(0, rows, rows * channels >= (1 << 15), [&](int64_t share_begin, int64_t share_end) {
    for (int64_t r = share_begin; r < share_end; ++r)
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t i = r * channels + c;
        y[i] = activation_op_value(
            static_cast<float>((px[i] - mean[c]) * inv[static_cast<size_t>(c)] * gamma[c] +
                               beta[c]),
            activation);
      }
  });
}

void batch_norm_grad(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[1];
  const int64_t rows = x.last_axis_rows(), channels = x.last_axis();
  const float* dy = ctx.inputs[0].data<float>();
  // FusedBatchNormGrad's dy: the activation's gradient of dz (input 0), as its own op gives it.
  std::vector<float> activation_dy;
  if (ctx.node.op == op_names::kFusedBatchNormGrad) {
    const Activation activation = activation_of(ctx.node);
    const float* activated = ctx.inputs[5].data<float>();
    activation_dy.resize(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i)
      activation_dy[static_cast<size_t>(i)] =
          activation_grad_op_value(dy[i], activated[i], activation);
    dy = activation_dy.data();
  }
  const float* px = x.data<float>();
  const float* gamma = ctx.inputs[2].data<float>();
  const float* mean = ctx.inputs[3].data<float>();
  const std::vector<double> inv =
      inv_std(ctx.inputs[4].data<float>(), channels, ctx.node.attrs.get_float("epsilon"));
  float* dx = ctx.outputs[0].data<float>();
  float* dgamma = ctx.outputs[1].data<float>();
  float* dbeta = ctx.outputs[2].data<float>();
  std::vector<double> sum_dy(static_cast<size_t>(channels), 0.0);
  std::vector<double> sum_dy_xhat(static_cast<size_t>(channels), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t i = r * channels + c;
      const size_t k = static_cast<size_t>(c);
      sum_dy[k] += dy[i];
      sum_dy_xhat[k] += dy[i] * (px[i] - mean[c]) * inv[k];
    }
  for (int64_t c = 0; c < channels; ++c) {
    dgamma[c] = static_cast<float>(sum_dy_xhat[static_cast<size_t>(c)]);
    dbeta[c] = static_cast<float>(sum_dy[static_cast<size_t>(c)]);
  }
  const double m = static_cast<double>(rows > 0 ? rows : 1);
  const bool training = ctx.training;
  parallel_for(0, rows, rows * channels >= (1 << 15), [&](int64_t share_begin, int64_t share_end) {
    for (int64_t r = share_begin; r < share_end; ++r)
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t i = r * channels + c;
        const size_t k = static_cast<size_t>(c);
        double g = dy[i];
        if (training) {
          // The batch mean and variance depend on x too.
          const double xhat = (px[i] - mean[c]) * inv[k];
          g -= (sum_dy[k] + xhat * sum_dy_xhat[k]) / m;
        }
        dx[i] = static_cast<float>(g * gamma[c] * inv[k]);
      }
  });
}

// Each row of the last axis: (x - mean) / sqrt(var + epsilon) * gamma + beta, the mean and the
// (population) variance summed in double, in two passes.
void layer_norm(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t rows = x.last_axis_rows(), channels = x.last_axis();
  const float* px = x.data<float>();
  const float* gamma = ctx.inputs[1].data<float>();
  const float* beta = ctx.inputs[2].data<float>();
  float* y = ctx.outputs[0].data<float>();
  const double epsilon = ctx.node.attrs.get_float("epsilon");
  parallel_for(0, rows, rows * channels >= (1 << 15), [&](int64_t share_begin, int64_t share_end) {
    for (int64_t r = share_begin; r < share_end; ++r) {
      const float* xr = px + r * channels;
      double sum = 0.0;
      for (int64_t c = 0; c < channels; ++c) sum += xr[c];
      const double mean = sum / static_cast<double>(channels);
      double sq = 0.0;
      for (int64_t c = 0; c < channels; ++c) sq += (xr[c] - mean) * (xr[c] - mean);
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(channels) + epsilon);
      for (int64_t c = 0; c < channels; ++c)
        y[r * channels + c] = static_cast<float>((xr[c] - mean) * inv * gamma[c] + beta[c]);
    }
  });
}

void dropout(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const float* px = x.data<float>();
  float* y = ctx.outputs[0].data<float>();
  float* mask = ctx.outputs[1].data<float>();
  const double rate = ctx.node.attrs.get_float("rate");
  const int64_t n = x.numel();
  if (!ctx.training || rate == 0.0) {
    for (int64_t i = 0; i < n; ++i) mask[i] = 1.0f;
  } else {
    SF_CHECK(ctx.rng != nullptr, "node '{}': dropout needs a random generator", ctx.node.name);
    const float keep = static_cast<float>(1.0 / (1.0 - rate));
    const uint64_t key = (*ctx.rng)();
    const uint32_t threshold = dropout_threshold(rate);
    for (int64_t i = 0; i < n; ++i)
      mask[i] = dropout_bits(key, static_cast<uint64_t>(i)) < threshold ? 0.0f : keep;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = px[i] * mask[i];
}

}  // namespace

void register_reference_norm_kernels(KernelRegistry& r) {
  r.add(simple_kernel(op_names::kBatchNorm, DType::f32, "reference", batch_norm));
  r.add(simple_kernel(op_names::kFusedBatchNorm, DType::f32, "reference", batch_norm));
  r.add(simple_kernel(op_names::kBatchNormGrad, DType::f32, "reference", batch_norm_grad));
  r.add(simple_kernel(op_names::kFusedBatchNormGrad, DType::f32, "reference", batch_norm_grad));
  r.add(simple_kernel(op_names::kLayerNorm, DType::f32, "reference", layer_norm));
  r.add(simple_kernel(op_names::kDropout, DType::f32, "reference", dropout));
}

}  // namespace sf
