// The C++ graph-building API: one function per op. Each checks its arguments through the op's
// shape function (via Graph::add) and returns the new node's first output. Ops with several
// outputs document which Output{node, i} holds what.
//
// Layout conventions: images are NHWC; conv filters are [kh, kw, in_channels / groups,
// out_channels] (TensorFlow's HWIO); MatMul is rank 2.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"

namespace sf::ops {

// --- sources (source_ops.cc) ---
Output placeholder(Graph& g, DType dtype, Shape shape, const std::string& name = "");
// Its value lives in the session's VariableStore under `name`.
Output variable(Graph& g, DType dtype, Shape shape, const std::string& name);
Output constant(Graph& g, Tensor value, const std::string& name = "");
Output scalar(Graph& g, float value, const std::string& name = "");

// --- array ops (array_ops.cc) ---
Output identity(Graph& g, Output x, const std::string& name = "");
// `shape` may hold one -1, inferred from the element count.
Output reshape(Graph& g, Output x, Shape shape, const std::string& name = "");
// [d0..d(axis-1), d(axis)..] -> [prod(d0..d(axis-1)), prod(rest)]
Output flatten(Graph& g, Output x, int64_t axis = 1, const std::string& name = "");
Output concat(Graph& g, std::vector<Output> xs, int64_t axis, const std::string& name = "");
Output cast(Graph& g, Output x, DType dtype, const std::string& name = "");
// Elements [begin, end) of x along `axis` (negative counts from the end). Concat's gradient;
// its own gradient scatters dy back into zeros of x's shape (StridedSliceGrad).
Output slice(Graph& g, Output x, int64_t axis, int64_t begin, int64_t end,
             const std::string& name = "");

// --- elementwise math with NumPy broadcasting (math_ops.cc) ---
Output add(Graph& g, Output a, Output b, const std::string& name = "");
Output sub(Graph& g, Output a, Output b, const std::string& name = "");
Output mul(Graph& g, Output a, Output b, const std::string& name = "");
Output div(Graph& g, Output a, Output b, const std::string& name = "");
Output neg(Graph& g, Output x, const std::string& name = "");
// Elementwise max(a, b) / min(a, b) with NumPy broadcasting (f32, i32, i64); NaN in either
// input gives NaN. The gradient goes to the selected input, all of it to `a` on ties.
Output maximum(Graph& g, Output a, Output b, const std::string& name = "");
Output minimum(Graph& g, Output a, Output b, const std::string& name = "");
// Rounds to the nearest integer, ties to even (ONNX Round; NaN and +-inf pass through). f32;
// not differentiable.
Output round(Graph& g, Output x, const std::string& name = "");
Output add_n(Graph& g, std::vector<Output> xs, const std::string& name = "");
// Sums a broadcast result back down to `shape` (the gradient of broadcasting).
Output sum_to(Graph& g, Output x, Shape shape, const std::string& name = "");
// Broadcasts x up to `shape` (NumPy rules).
Output broadcast_to(Graph& g, Output x, Shape shape, const std::string& name = "");
// The same, with the target shape taken from `like` when the graph runs (its values are not
// read), so that gradient graphs stay valid when a new batch size re-infers the shapes.
Output sum_to_like(Graph& g, Output x, Output like, const std::string& name = "");
// `axes`: axes of the target that x lacks (a reduction without keep_dims); 1s are inserted
// there before broadcasting.
Output broadcast_to_like(Graph& g, Output x, Output like, std::vector<int64_t> axes = {},
                         const std::string& name = "");
Output reduce_sum(Graph& g, Output x, std::vector<int64_t> axes, bool keep_dims = false,
                  const std::string& name = "");
Output reduce_mean(Graph& g, Output x, std::vector<int64_t> axes, bool keep_dims = false,
                   const std::string& name = "");
// The largest / smallest element over `axes` (empty: all); a NaN element makes the result NaN.
// An empty reduced axis gives -inf / +inf. The gradient goes to the elements equal to the
// result, split equally among ties.
Output reduce_max(Graph& g, Output x, std::vector<int64_t> axes, bool keep_dims = false,
                  const std::string& name = "");
Output reduce_min(Graph& g, Output x, std::vector<int64_t> axes, bool keep_dims = false,
                  const std::string& name = "");

// --- activations (activation_ops.cc) ---
Output relu(Graph& g, Output x, const std::string& name = "");
Output relu6(Graph& g, Output x, const std::string& name = "");
Output sigmoid(Graph& g, Output x, const std::string& name = "");
Output tanh(Graph& g, Output x, const std::string& name = "");
Output softmax(Graph& g, Output x, const std::string& name = "");  // over the last axis

// --- losses (loss_ops.cc) ---
// SoftmaxCrossEntropy(logits [N,C], labels): labels are class indices [N] (i32 or i64) or
// probabilities [N,C] (f32). Output 0: mean loss (scalar); output 1: softmax [N,C].
Output softmax_cross_entropy(Graph& g, Output logits, Output labels, const std::string& name = "");

// --- normalisation and regularisation (norm_ops.cc) ---
// BatchNorm over the last axis. Inputs x, gamma, beta, moving_mean, moving_var ([C] each).
// Output 0: y; outputs 1, 2: the mean and variance used (the batch's when training, the
// moving ones otherwise), which the trainer folds into the moving averages.
Output batch_norm(Graph& g, Output x, Output gamma, Output beta, Output moving_mean,
                  Output moving_var, double epsilon = 1e-3, const std::string& name = "");
// LayerNorm over the last axis: (x - mean) / sqrt(var + epsilon) * gamma + beta, gamma and
// beta [C]. Inference only (no gradient): the execution passes fuse it from the ONNX forms.
Output layer_norm(Graph& g, Output x, Output gamma, Output beta, double epsilon = 1e-5,
                  const std::string& name = "");
// Output 0: y; output 1: the scaled keep-mask (1 / (1 - rate) or 0; all ones when not training).
Output dropout(Graph& g, Output x, double rate, const std::string& name = "");

// --- convolution, pooling, dense (nn_ops.cc) ---
struct Conv2DOptions {
  std::vector<int64_t> strides{1, 1};
  std::string padding = "VALID";  // "SAME", "VALID" or "EXPLICIT"
  std::vector<int64_t> pads{0, 0, 0, 0};  // top, bottom, left, right (EXPLICIT only)
  std::vector<int64_t> dilations{1, 1};
  int64_t groups = 1;
};
Output conv2d(Graph& g, Output x, Output w, const Conv2DOptions& options = {},
              const std::string& name = "");
// The attributes Conv2D (and the fused and quantized convs) take for `options`.
Attrs conv2d_attrs(const Conv2DOptions& options);
struct PoolOptions {
  std::vector<int64_t> ksize{2, 2};
  std::vector<int64_t> strides{2, 2};
  std::string padding = "VALID";
  std::vector<int64_t> pads{0, 0, 0, 0};
  bool count_include_pad = false;  // AvgPool only
};
// The attributes MaxPool and AvgPool (and their quantized forms) take for `options`.
Attrs pool2d_attrs(const PoolOptions& options);
Output max_pool(Graph& g, Output x, const PoolOptions& options = {}, const std::string& name = "");
Output avg_pool(Graph& g, Output x, const PoolOptions& options = {}, const std::string& name = "");
// [N,H,W,C] -> [N,C]
Output global_avg_pool(Graph& g, Output x, const std::string& name = "");
Output matmul(Graph& g, Output a, Output b, bool transpose_a = false, bool transpose_b = false,
              const std::string& name = "");
// Matrix products over the leading (batch) dimensions: a [..., M, K] x b [..., K, N], rank >= 2
// each, batch dimensions broadcast as in NumPy (ONNX MatMul on rank >= 3).
Output batch_matmul(Graph& g, Output a, Output b, bool transpose_a = false,
                    bool transpose_b = false, const std::string& name = "");
// Adds b [C] along the last axis of x.
Output bias_add(Graph& g, Output x, Output b, const std::string& name = "");

// --- layout ops with ONNX semantics, any dtype (layout_ops.cc) ---
// y = x with axes permuted: y.shape[i] = x.shape[perm[i]]; empty perm reverses the axes.
Output transpose(Graph& g, Output x, std::vector<int64_t> perm, const std::string& name = "");
// pads: 2 * rank non-negative ints, all begins then all ends (ONNX order). mode: "constant"
// (filled with value), "reflect" (mirror, edge not repeated) or "edge". Differentiable for
// constant mode only.
Output pad(Graph& g, Output x, std::vector<int64_t> pads, const std::string& mode = "constant",
           double value = 0.0, const std::string& name = "");
// ONNX Slice (op StridedSlice; "Slice" is the single-axis slice above): per listed axis,
// elements start, start + step, ... before end; negative starts/ends count from the end and
// are clamped. axes empty: 0..len(starts)-1; steps empty: all 1; steps may be negative.
// Gradient: StridedSliceGrad(dy, x), dy scattered into zeros of x's shape (x read for its
// shape only, so it stays right when shapes are re-inferred).
Output strided_slice(Graph& g, Output x, std::vector<int64_t> starts, std::vector<int64_t> ends,
                     std::vector<int64_t> axes = {}, std::vector<int64_t> steps = {},
                     const std::string& name = "");
// y = x taken at `indices` (i32 or i64, negative counts from the end) along `axis`:
// y.shape = x.shape[:axis] + indices.shape + x.shape[axis+1:]. Gradient for x only:
// GatherGrad(dy, x, indices) adds dy into zeros of x's shape (repeated indices add up).
Output gather(Graph& g, Output x, Output indices, int64_t axis = 0, const std::string& name = "");

// --- comparisons, masks and selection (logic_ops.cc) ---
// Masks are u8 0/1 (ONNX's bool). Equal, Less, Greater, LessOrEqual, GreaterOrEqual (a, b of one
// dtype, broadcast) give masks; And, Or, Xor, Not combine them; g.add builds those by name.
// Where: condition ? x : y elementwise, the three broadcast together.
Output where(Graph& g, Output condition, Output x, Output y, const std::string& name = "");

// --- elementwise ops (pointwise_ops.cc) ---
// a^b with NumPy broadcasting; the gradient for b is defined where a > 0.
Output pow(Graph& g, Output a, Output b, const std::string& name = "");
Output sqrt(Graph& g, Output x, const std::string& name = "");
Output exp(Graph& g, Output x, const std::string& name = "");
Output log(Graph& g, Output x, const std::string& name = "");
// The error function (Gelu's, as exporters write it: 0.5 x (1 + erf(x / sqrt 2))).
Output erf(Graph& g, Output x, const std::string& name = "");
// 0.5 x (1 + erf(x / sqrt 2)) in one op. Inference only (no gradient): the execution passes
// fuse it from that form.
Output gelu(Graph& g, Output x, const std::string& name = "");
// min(max(x, min), max); the defaults (+-3.4e38) leave that side unclipped.
Output clip(Graph& g, Output x, double min = -3.4e38, double max = 3.4e38,
            const std::string& name = "");
// x >= 0 ? x : alpha * x
Output leaky_relu(Graph& g, Output x, double alpha = 0.01, const std::string& name = "");
// x >= 0 ? x : slope * x, with slope broadcast to x's shape.
Output prelu(Graph& g, Output x, Output slope, const std::string& name = "");
// max(0, min(1, alpha * x + beta))
Output hard_sigmoid(Graph& g, Output x, double alpha = 0.2, double beta = 0.5,
                    const std::string& name = "");
// x * max(0, min(1, x / 6 + 0.5))
Output hard_swish(Graph& g, Output x, const std::string& name = "");

// --- resize (resize_ops.cc) ---
// ONNX Resize of x [N,H,W,C] to [N, sizes[0], sizes[1], C]. Linear in x for every mode, so its
// gradient (ResizeGrad(dy, x)) spreads dy back over the taps each output read.
struct ResizeOptions {
  // "nearest", "linear" (bilinear over H and W) or "cubic" (bicubic)
  std::string mode = "nearest";
  // "half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel" or "tf_half_pixel_for_nn"
  std::string coordinate_transformation_mode = "half_pixel";
  // "round_prefer_floor", "round_prefer_ceil", "floor" or "ceil" (nearest mode only)
  std::string nearest_mode = "round_prefer_floor";
  // [scale_h, scale_w] as a model gave them (the output size is floor(in * scale)); empty:
  // out / in.
  std::vector<double> scales;
  double cubic_coeff_a = -0.75;  // the cubic kernel's A
  bool exclude_outside = false;  // cubic taps outside the image get weight 0 (renormalized)
};
Output resize(Graph& g, Output x, std::vector<int64_t> sizes, const ResizeOptions& options = {},
              const std::string& name = "");

// --- transposed convolution (conv_transpose_ops.cc) ---
// ONNX ConvTranspose on x [N,H,W,Cin] with filter [kh, kw, Cout/groups, Cin]: the adjoint of
// conv2d (EXPLICIT pads) from Cout to Cin channels. Output size per axis:
// (in - 1) * stride - pad_begin - pad_end + dilation * (k - 1) + output_padding + 1.
// Gradients: dx is that Conv2D of dy, dw a Conv2DBackpropFilter.
struct ConvTranspose2DOptions {
  std::vector<int64_t> strides{1, 1};
  std::vector<int64_t> pads{0, 0, 0, 0};  // top, bottom, left, right
  std::vector<int64_t> dilations{1, 1};
  std::vector<int64_t> output_padding{0, 0};  // [h, w], each below the stride or dilation
  int64_t groups = 1;
};
Output conv_transpose2d(Graph& g, Output x, Output w, const ConvTranspose2DOptions& options = {},
                        const std::string& name = "");

}  // namespace sf::ops
