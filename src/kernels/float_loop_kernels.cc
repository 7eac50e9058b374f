// Kernels (impl "float_loops") for the float ops of a training step around oneDNN's products:
// MaxPool, MaxPoolGrad, single-channel convs (a first conv's forward pass in training and its
// filter gradient), BiasAdd, BiasAddRelu, AddN, BiasAddGrad, BatchNorm, FusedBatchNorm,
// BatchNormGrad and Dropout, and inference's FusedAddN,
// made of kernels/float_loops.h (AVX-512 where the CPU has it, portable loops elsewhere), so they
// run on every CPU. Measured on the Deep-MNIST layers (bench/kernels_bench.cc, one thread, Xeon
// with AVX-512, under load): MaxPoolGrad reads each window's first maximum from x and y, which the
// forward pass kept, where oneDNN's pooling backward runs the forward again for an argmax workspace
// (28x28x32 at batch 64: 1.3 vs 4.5 ms); the forward pools as fast as oneDNN's and keeps the pair
// on one definition of the first maximum. oneDNN's filter gradient of a single-channel 5x5 conv
// costs as much as a 32-channel one in bf16 (each tap a product of depth 1); here it is broadcasts
// and FMAs into registers, and so is the forward pass, written NHWC with its bias and activation
// where oneDNN's wrote a blocked output reordered back (Deep-MNIST's conv1 in training, AMD EPYC:
// 0.47-0.57 -> 0.32-0.38 ms a step in fp32 and bf16, which it runs in fp32). BiasAdd runs on
// threads (the reference on one), BiasAddGrad sums blocks of rows in AVX-512 registers (2x the
// reference). An Add of a bias vector (what ONNX graphs have, and a quantized product's dequantized
// output then meets) is the same loop: the reference walks the broadcast element by element, 0.03
// ms for a [128, 768] row block that takes 0.005 ms here. Dropout draws its mask by hashing
// (kernels/dropout_draw.h), sixteen elements to a vector. BatchNorm and its gradient sum their
// statistics as BiasAddGrad does, in vectorized loops, where the reference sums each element in
// double on one thread (MobileNet-MNIST's eight BatchNorms took half a training step);
// FusedBatchNorm applies its Relu or Relu6 in the same pass. In training
// graphs (transforms/training_passes.h) a pool whose windows tile its input records where each
// maximum is, a byte per output (MaxPoolWindowArgmax), and its gradient routes dy by that alone,
// reading neither x nor y (Deep-MNIST's pool gradients in bf16 on an AMD EPYC: 0.59-0.67 ->
// 0.43-0.54 ms and 0.30-0.32 -> 0.20-0.23 ms a step); a single-channel first conv pools its output
// image by image (FusedConv2DMaxPool), so the step's largest activation stays in the cache.
#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/dropout_draw.h"
#include "kernels/float_loops.h"
#include "kernels/kernel.h"
#include "kernels/register.h"
#include "ops/conv_geometry.h"
#include "ops/execution_ops.h"
#include "ops/op_names.h"

namespace sf {

namespace {

constexpr int kPoolPriority = 11;       // above oneDNN's (pooling, single-channel filter grads)
constexpr int kElementwisePriority = 5;  // above the reference kernels (oneDNN has none)
constexpr int kTrainingConvPriority = 12;  // above oneDNN's "onednn_train" (11)

void max_pool(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  if (ctx.outputs[0].numel() == 0) return;
  max_pool_f32(x.data<float>(), x.dim(0), x.dim(3), pool_window(ctx.node.attrs, x.shape()),
               ctx.outputs[0].data<float>());
}

void max_pool_grad(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  if (x.numel() == 0) return;
  max_pool_grad_f32(x.data<float>(), ctx.inputs[1].data<float>(), ctx.inputs[2].data<float>(),
                    x.dim(0), x.dim(3), pool_window(ctx.node.attrs, x.shape()),
                    ctx.node.attrs.get_bool("relu"), ctx.outputs[0].data<float>());
}

void max_pool_window_argmax(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  if (ctx.outputs[0].numel() == 0) return;
  max_pool_window_argmax_f32(x.data<float>(), x.dim(0), x.dim(3),
                             pool_window(ctx.node.attrs, x.shape()),
                             ctx.node.attrs.get_bool("relu"), ctx.outputs[0].data<float>(),
                             ctx.outputs[1].data<uint8_t>());
}

void max_pool_grad_window_argmax(KernelContext& ctx) {
  Tensor& dx = ctx.outputs[0];
  if (dx.numel() == 0) return;
  max_pool_grad_window_argmax_f32(ctx.inputs[0].data<float>(), ctx.inputs[1].data<uint8_t>(),
                                  dx.dim(0), dx.dim(3), pool_window(ctx.node.attrs, dx.shape()),
                                  dx.data<float>());
}

void conv_filter_grad_single_channel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& df = ctx.outputs[0];
  if (df.numel() == 0) return;
  conv_filter_grad_single_channel_f32(x.data<float>(), ctx.inputs[1].data<float>(), x.dim(0),
                                      df.dim(3), conv_window(ctx.node.attrs, x.shape(), df.shape()),
                                      df.data<float>());
}

void fused_conv_single_channel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  Tensor& y = ctx.outputs[0];
  if (y.numel() == 0) return;
  conv_single_channel_f32(x.data<float>(), ctx.inputs[1].data<float>(),
                          ctx.inputs[2].data<float>(), x.dim(0), y.dim(3),
                          conv_window(ctx.node.attrs, x.shape(), ctx.inputs[1].shape()),
                          activation_of(ctx.node), y.data<float>());
}

// The conv's and its pool's geometry for FusedConv2DMaxPool and its gradient.
struct ConvPoolWindows {
  Window2D conv, pool;
};
ConvPoolWindows conv_pool_windows(const Node& node, const Shape& x, const Shape& filter) {
  ConvPoolWindows g{conv_window(node.attrs, x, filter), {}};
  const std::string err =
      prefixed_pool_window(node.attrs, {x[0], g.conv.h.out, g.conv.w.out, filter[3]}, &g.pool);
  SF_CHECK(err.empty(), "node '{}': {}", node.name, err);
  return g;
}

void fused_conv_single_channel_max_pool(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& w = ctx.inputs[1];
  if (ctx.outputs[0].numel() == 0) return;
  const auto [conv, pool] = conv_pool_windows(ctx.node, x.shape(), w.shape());
  conv_single_channel_max_pool_f32(x.data<float>(), w.data<float>(), ctx.inputs[2].data<float>(),
                                   x.dim(0), w.dim(3), conv, activation_of(ctx.node), pool,
                                   ctx.node.attrs.get_bool("relu"), ctx.outputs[0].data<float>(),
                                   ctx.outputs[1].data<uint8_t>());
}

void conv_single_channel_max_pool_grads(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  Tensor& df = ctx.outputs[0];
  if (df.numel() == 0) return;
  const auto [conv, pool] = conv_pool_windows(ctx.node, x.shape(), df.shape());
  conv_single_channel_max_pool_grads_f32(x.data<float>(), ctx.inputs[1].data<float>(),
                                         ctx.inputs[2].data<uint8_t>(), x.dim(0), df.dim(3), conv,
                                         pool, df.data<float>(), ctx.outputs[1].data<float>());
}

bool is_single_channel_conv(const KernelSpec& spec) {
  return spec.inputs[0].shape.size() == 4 && spec.inputs[0].shape[3] == 1 &&
         spec.node.attrs.get_int("groups") == 1;
}

void bias_add(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  bias_add_f32(x.data<float>(), ctx.inputs[1].data<float>(), x.last_axis_rows(), x.dim(-1),
               ctx.node.op == op_names::kBiasAddRelu, ctx.outputs[0].data<float>());
}

void bias_add_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.inputs[0];
  if (dy.rank() == 4)
    bias_add_grad_images_f32(dy.data<float>(), dy.dim(0), dy.dim(1) * dy.dim(2), dy.dim(3),
                             ctx.outputs[0].data<float>());
  else
    bias_add_grad_f32(dy.data<float>(), dy.last_axis_rows(), dy.dim(-1),
                      ctx.outputs[0].data<float>());
}

// Which input of an Add is a bias over the last axis of the other, which has the output's shape
// y: shaped [C] or [1, ..., 1, C]. Addition commutes, so either may be; -1 when neither is.
int bias_input(const Shape& a, const Shape& b, const Shape& y) {
  if (y.empty() || y.back() == 0) return -1;
  const Shape* inputs[] = {&a, &b};
  for (int bias = 1; bias >= 0; --bias) {
    const Shape& v = *inputs[bias];
    if (*inputs[1 - bias] != y || v.empty() || v.size() > y.size() || v.back() != y.back())
      continue;
    if (std::all_of(v.begin(), v.end() - 1, [](int64_t d) { return d == 1; })) return bias;
  }
  return -1;
}

void add_bias(KernelContext& ctx) {
  const Tensor& y = ctx.outputs[0];
  const int bias = bias_input(ctx.inputs[0].shape(), ctx.inputs[1].shape(), y.shape());
  bias_add_f32(ctx.inputs[static_cast<size_t>(1 - bias)].data<float>(),
               ctx.inputs[static_cast<size_t>(bias)].data<float>(), y.last_axis_rows(), y.dim(-1),
               false, ctx.outputs[0].data<float>());
}

// AddN and FusedAddN: the activation is read from the node once, when the plan is made.
class AddNKernel : public Kernel {
 public:
  explicit AddNKernel(const KernelSpec& spec) : activation_(activation_of(spec.node)) {}

  void compute(KernelContext& ctx) override {
    xs_.clear();
    for (const Tensor& x : ctx.inputs) xs_.push_back(x.data<float>());
    add_n_f32(xs_.data(), static_cast<int64_t>(xs_.size()), ctx.outputs[0].numel(), activation_,
              ctx.outputs[0].data<float>());
  }

 private:
  Activation activation_;
  std::vector<const float*> xs_;  // kept, so a run allocates nothing
};

KernelDef add_n_kernel(const std::string& op) {
  KernelDef def;
  def.op = op;
  def.impl = "float_loops";
  def.priority = kElementwisePriority;
  def.create = [](const KernelSpec& spec) { return std::make_unique<AddNKernel>(spec); };
  return def;
}

void batch_norm(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t rows = x.last_axis_rows(), channels = x.last_axis();
  if (!ctx.training) {
    ctx.outputs[1].copy_from(ctx.inputs[3]);
    ctx.outputs[2].copy_from(ctx.inputs[4]);
  }
  batch_norm_f32(x.data<float>(), ctx.inputs[1].data<float>(), ctx.inputs[2].data<float>(), rows,
                 channels, ctx.node.attrs.get_float("epsilon"), ctx.training,
                 activation_of(ctx.node), ctx.outputs[1].data<float>(),
                 ctx.outputs[2].data<float>(), ctx.outputs[0].data<float>());
}

// BatchNormGrad, and FusedBatchNormGrad, whose activation gradient gates dy (input 0) by input 5.
void batch_norm_grad(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[1];
  const int64_t rows = x.last_axis_rows(), channels = x.last_axis();
  ActivationGrad gate;
  if (ctx.node.op == op_names::kFusedBatchNormGrad)
    gate = {ctx.inputs[5].data<float>(), activation_of(ctx.node)};
  batch_norm_grad_f32(
      ctx.inputs[0].data<float>(), gate, x.data<float>(), ctx.inputs[2].data<float>(),
      ctx.inputs[3].data<float>(), ctx.inputs[4].data<float>(), rows, channels,
      ctx.node.attrs.get_float("epsilon"), ctx.training, ctx.outputs[0].data<float>(),
      ctx.outputs[1].data<float>(), ctx.outputs[2].data<float>());
}

void dropout(KernelContext& ctx) {
  const double rate = ctx.node.attrs.get_float("rate");
  const int64_t n = ctx.inputs[0].numel();
  float* mask = ctx.outputs[1].data<float>();
  if (!ctx.training || rate == 0.0) {
    std::fill(mask, mask + n, 1.0f);
    std::copy_n(ctx.inputs[0].data<float>(), n, ctx.outputs[0].data<float>());
    return;
  }
  SF_CHECK(ctx.rng != nullptr, "node '{}': dropout needs a random generator", ctx.node.name);
  dropout_f32(ctx.inputs[0].data<float>(), n, (*ctx.rng)(), dropout_threshold(rate),
              static_cast<float>(1.0 / (1.0 - rate)), ctx.outputs[0].data<float>(), mask);
}

}  // namespace

void register_float_loop_kernels(KernelRegistry& r) {
  const char* impl = "float_loops";
  r.add(simple_kernel(op_names::kMaxPool, DType::f32, impl, max_pool, kPoolPriority));
  r.add(simple_kernel(op_names::kMaxPoolGrad, DType::f32, impl, max_pool_grad, kPoolPriority));
  r.add(simple_kernel(op_names::kMaxPoolWindowArgmax, DType::f32, impl, max_pool_window_argmax,
                      kPoolPriority));
  // Overlapping windows sum their gradients, which the reference kernel does.
  KernelDef argmax_grad = simple_kernel(op_names::kMaxPoolGradWindowArgmax, DType::f32, impl,
                                        max_pool_grad_window_argmax, kPoolPriority);
  argmax_grad.accepts = [](const KernelSpec& spec) {
    const Window2D g = pool_window(spec.node.attrs, spec.node.outputs[0].shape);
    return windows_tile(g.h) && windows_tile(g.w);
  };
  r.add(std::move(argmax_grad));
  KernelDef filter_grad =
      simple_kernel(op_names::kConv2DBackpropFilter, DType::f32, impl,
                    conv_filter_grad_single_channel, kPoolPriority);
  filter_grad.accepts = is_single_channel_conv;
  r.add(std::move(filter_grad));
  // A training graph's first conv (its filter a variable), above oneDNN's training kernel;
  // frozen filters keep oneDNN's measured inference kernel.
  KernelDef single_channel_conv =
      simple_kernel(op_names::kFusedConv2D, DType::f32, impl, fused_conv_single_channel,
                    kTrainingConvPriority);
  single_channel_conv.accepts = [](const KernelSpec& spec) {
    return is_single_channel_conv(spec) && !spec.input_is_constant(1) &&
           spec.inputs.size() == 3 && spec.inputs[2].dtype == DType::f32;
  };
  r.add(std::move(single_channel_conv));
  KernelDef conv_max_pool = simple_kernel(op_names::kFusedConv2DMaxPool, DType::f32, impl,
                                          fused_conv_single_channel_max_pool, kPoolPriority);
  conv_max_pool.accepts = is_single_channel_conv;
  r.add(std::move(conv_max_pool));
  KernelDef conv_max_pool_grads = simple_kernel(op_names::kFusedConv2DMaxPoolGrad, DType::f32, impl,
                                                conv_single_channel_max_pool_grads, kPoolPriority);
  conv_max_pool_grads.accepts = is_single_channel_conv;
  r.add(std::move(conv_max_pool_grads));
  r.add(simple_kernel(op_names::kBiasAdd, DType::f32, impl, bias_add, kElementwisePriority));
  r.add(simple_kernel(op_names::kBiasAddRelu, DType::f32, impl, bias_add, kElementwisePriority));
  r.add(simple_kernel(op_names::kBiasAddGrad, DType::f32, impl, bias_add_grad,
                      kElementwisePriority));
  KernelDef add = simple_kernel(op_names::kAdd, DType::f32, impl, add_bias, kElementwisePriority);
  add.accepts = [](const KernelSpec& spec) {
    return spec.inputs.size() == 2 &&
           bias_input(spec.inputs[0].shape, spec.inputs[1].shape, spec.node.outputs[0].shape) >= 0;
  };
  r.add(std::move(add));
  r.add(add_n_kernel(op_names::kAddN));
  r.add(add_n_kernel(op_names::kFusedAddN));
  r.add(simple_kernel(op_names::kBatchNorm, DType::f32, impl, batch_norm, kElementwisePriority));
  r.add(
      simple_kernel(op_names::kFusedBatchNorm, DType::f32, impl, batch_norm, kElementwisePriority));
  r.add(simple_kernel(op_names::kBatchNormGrad, DType::f32, impl, batch_norm_grad,
                      kElementwisePriority));
  r.add(simple_kernel(op_names::kFusedBatchNormGrad, DType::f32, impl, batch_norm_grad,
                      kElementwisePriority));
  r.add(simple_kernel(op_names::kDropout, DType::f32, impl, dropout, kElementwisePriority));
}

}  // namespace sf
