#include "support/kernel_cases.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "graph/graph.h"
#include "graph/op_registry.h"
#include "ops/binary_ops.h"
#include "ops/conv_geometry.h"
#include "ops/ops.h"

namespace sf::testing {

namespace {

// ---- inputs ------------------------------------------------------------------------------------

InputSpec f32(Shape shape, double lo = -1.0, double hi = 1.0) {
  return {.dtype = DType::f32, .shape = std::move(shape), .lo = lo, .hi = hi};
}
InputSpec u8(Shape shape, double lo = 0, double hi = 255) {
  return {.dtype = DType::u8, .shape = std::move(shape), .lo = lo, .hi = hi};
}
InputSpec i8(Shape shape) {
  return {.dtype = DType::i8, .shape = std::move(shape), .lo = -127, .hi = 127};
}
InputSpec i32(Shape shape, double lo, double hi) {
  return {.dtype = DType::i32, .shape = std::move(shape), .lo = lo, .hi = hi};
}
// Quantization params [scale, zero_point].
InputSpec params(float scale, int zero_point) {
  return {.shape = {2}, .values = {scale, static_cast<float>(zero_point)}};
}
// Weights as a pruned, frozen model holds them: a Const with `zeros` of them exactly zero.
InputSpec frozen_weights(InputSpec w, double zeros, int64_t zero_block = 1) {
  w.constant = true;
  w.zeros = zeros;
  w.zero_block = zero_block;
  return w;
}

// The output shape of `op` on such inputs, from the op's own shape function.
Shape output_shape(const std::string& op, const std::vector<InputSpec>& inputs,
                   const Attrs& attrs) {
  Graph g;
  std::vector<Output> in;
  for (const InputSpec& s : inputs) in.push_back(ops::placeholder(g, s.dtype, s.shape));
  return g.type(g.add(op, in, attrs)).shape;
}

const char* const kActivations[] = {"none", "relu", "relu6"};
std::string activation(size_t index) { return kActivations[index % 3]; }

// ---- geometries shared by an op family ---------------------------------------------------------

struct ConvGeometry {
  const char* name;
  Shape x, w;
  ops::Conv2DOptions options;
  bool frozen;   // weights a Const (which the sparse kernels need), with
  double zeros;  // this fraction of them zero
};

// Frozen weights with 90% zeros take the sparse kernels' sparse path and fewer zeros their dense
// fallback; fed weights and groups, which the sparse kernels decline, are for the others.
const ConvGeometry kConvGeometries[] = {
    {"size1", {1, 1, 1, 1}, {1, 1, 1, 1}, {}, false, 0.0},
    {"same3x3_primes", {2, 7, 5, 3}, {3, 3, 3, 5}, {.padding = "SAME"}, true, 0.9},
    {"stride2_same",
     {1, 13, 11, 5},
     {5, 5, 5, 7},
     {.strides = {2, 2}, .padding = "SAME"},
     true,
     0.0},
    {"channels_vector_width_pm1", {1, 6, 6, 17}, {3, 3, 17, 15}, {}, false, 0.0},
    {"explicit_uneven",
     {2, 9, 8, 4},
     {3, 2, 4, 6},
     {.strides = {2, 2}, .padding = "EXPLICIT", .pads = {1, 2, 0, 3}},
     true,
     0.9},
    {"dilation2", {1, 9, 9, 8}, {3, 3, 8, 16}, {.padding = "SAME", .dilations = {2, 2}}, true, 0.5},
    {"groups2", {2, 7, 7, 6}, {3, 3, 3, 10}, {.padding = "SAME", .groups = 2}, false, 0.0},
    {"depthwise", {1, 9, 9, 16}, {3, 3, 1, 16}, {.padding = "SAME", .groups = 16}, true, 0.0},
    {"pointwise", {2, 5, 5, 33}, {1, 1, 33, 31}, {}, true, 0.9},
    {"winograd_3x3", {1, 14, 13, 32}, {3, 3, 32, 48}, {.padding = "SAME"}, false, 0.0},
    // Single-channel images (a first layer on grey images), enough of them for threads.
    {"single_channel_5x5", {3, 13, 12, 1}, {5, 5, 1, 33}, {.padding = "SAME"}, false, 0.0},
    {"single_channel_strided_dilated",
     {1, 11, 10, 1},
     {3, 2, 1, 17},
     {.strides = {2, 1}, .padding = "EXPLICIT", .pads = {1, 2, 0, 1}, .dilations = {2, 1}},
     false,
     0.0},
};

struct MatMulGeometry {
  const char* name;
  int64_t m, k, n;
  bool transpose_a, transpose_b;
  bool frozen;
  double zeros;
  int64_t zero_block;  // > 1: pruned in blocks of adjacent outputs (the block-sparse path)
};

// As for convs; blocks of 16 zero outputs take the block-sparse path.
const MatMulGeometry kMatMulGeometries[] = {
    {"size1", 1, 1, 1, false, false, false, 0.0, 1},
    {"primes", 7, 13, 5, false, false, true, 0.9, 1},
    {"batch1_primes", 1, 31, 17, false, false, true, 0.9, 1},
    {"vector_width_pm1", 17, 15, 33, false, false, false, 0.0, 1},
    {"transpose_a", 5, 17, 3, true, false, false, 0.0, 1},
    {"transpose_b", 6, 7, 9, false, true, true, 0.5, 1},
    {"dense_frozen", 3, 65, 63, false, false, true, 0.0, 1},
    {"blocks16", 4, 40, 48, false, false, true, 0.75, 16},
    {"batch1_blocks16", 1, 40, 48, false, false, true, 0.75, 16},
    {"rows_over_transpose_block", 131, 29, 6, false, false, true, 0.9, 1},
};

struct PoolGeometry {
  const char* name;
  Shape x;
  ops::PoolOptions options;
};

const PoolGeometry kPoolGeometries[] = {
    {"size1", {1, 1, 1, 1}, {.ksize = {1, 1}, .strides = {1, 1}}},
    {"k2s2_valid_odd", {2, 7, 7, 3}, {}},
    {"k3s2_same_primes", {1, 13, 11, 5}, {.ksize = {3, 3}, .strides = {2, 2}, .padding = "SAME"}},
    {"explicit_uneven",
     {2, 9, 8, 17},
     {.ksize = {3, 3}, .strides = {2, 1}, .padding = "EXPLICIT", .pads = {1, 0, 2, 1}}},
    {"channels_vector_width_m1", {1, 6, 5, 15}, {.ksize = {2, 2}, .strides = {1, 1}}},
    {"channels_65", {1, 5, 6, 65}, {.ksize = {3, 2}, .strides = {1, 2}, .padding = "SAME"}},
    // Windows that tile the image, as training's 2x2 pools do (each x in exactly one window).
    {"k2s2_tiling_channels_33", {2, 8, 6, 33}, {}},
    {"k2s2_same_odd_tiling", {1, 7, 9, 17}, {.padding = "SAME"}},
};

// Element-wise shapes around the vector width (16 floats, 64 bytes).
const Shape kElementwiseShapes[] = {{1}, {15}, {3, 17}, {2, 9, 16}, {4, 65}};

// ---- the float ops -----------------------------------------------------------------------------

// Conv2D, its two gradients, FusedConv2D and FusedConv2DAdd on every conv geometry.
std::vector<KernelCase> float_conv_cases(const std::string& op) {
  std::vector<KernelCase> cases;
  for (const ConvGeometry& c : kConvGeometries) {
    KernelCase k{c.name, {}, ops::conv2d_attrs(c.options)};
    const InputSpec x = f32(c.x), w = c.frozen ? frozen_weights(f32(c.w), c.zeros) : f32(c.w);
    const InputSpec y = f32(output_shape("Conv2D", {x, w}, k.attrs));
    if (op == "Conv2D") {
      k.inputs = {x, w};
    } else if (op == "Conv2DBackpropInput") {
      k.inputs = {y, w};
      k.attrs.set("input_shape", c.x);
    } else if (op == "Conv2DBackpropFilter") {
      k.inputs = {x, y};
      k.attrs.set("filter_shape", c.w);
    } else {
      k.inputs = {x, w, f32({c.w[3]})};
      if (op == "FusedConv2DAdd") k.inputs.push_back(y);
      k.attrs.set("activation", activation(cases.size()));
    }
    cases.push_back(std::move(k));
  }
  return cases;
}

// MatMul and FusedMatMul (with bias and activation).
// Batch dimensions equal, broadcast from 1, missing on one side; both transposes.
std::vector<KernelCase> batch_matmul_cases() {
  auto bmm = [](const char* name, Shape a, Shape b, bool ta, bool tb) {
    return KernelCase{
        name, {f32(std::move(a)), f32(std::move(b))}, {{"transpose_a", ta}, {"transpose_b", tb}}};
  };
  return {bmm("rank3", {3, 5, 7}, {3, 7, 4}, false, false),
          bmm("rank3_by_matrix", {2, 40, 12}, {12, 36}, false, false),
          bmm("rank4_broadcast", {2, 1, 6, 8}, {1, 3, 8, 5}, false, false),
          bmm("transpose_b_attention", {2, 4, 9, 16}, {2, 4, 9, 16}, false, true),
          bmm("transpose_a", {3, 7, 5}, {3, 7, 2}, true, false),
          bmm("matrix_by_rank3", {6, 5}, {4, 5, 3}, false, false),
          bmm("rows_of_one_by_matrix_transposed", {17, 1, 12}, {36, 12}, false, true),
          bmm("rank4_by_unit_batch", {2, 3, 5, 8}, {1, 1, 8, 6}, false, false)};
}

// FusedBatchMatMul: the same products with a bias over the output's last axis, each activation,
// scaled (alpha) or not.
std::vector<KernelCase> fused_batch_matmul_cases() {
  std::vector<KernelCase> cases = batch_matmul_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    KernelCase& k = cases[i];
    k.inputs.push_back(f32({output_shape("BatchMatMul", k.inputs, k.attrs).back()}));
    k.attrs.set("activation", activation(i));
    k.attrs.set("alpha", i % 2 == 0 ? 1.0 : 0.125);
  }
  return cases;
}

std::vector<KernelCase> float_matmul_cases(bool fused) {
  std::vector<KernelCase> cases;
  for (const MatMulGeometry& c : kMatMulGeometries) {
    const Shape a = c.transpose_a ? Shape{c.k, c.m} : Shape{c.m, c.k};
    const Shape b = c.transpose_b ? Shape{c.n, c.k} : Shape{c.k, c.n};
    KernelCase k{c.name,
                 {f32(a), c.frozen ? frozen_weights(f32(b), c.zeros, c.zero_block) : f32(b)},
                 {{"transpose_a", c.transpose_a}, {"transpose_b", c.transpose_b}}};
    if (fused) {
      k.inputs.push_back(f32({c.n}));
      k.attrs.set("activation", activation(cases.size()));
    }
    cases.push_back(std::move(k));
  }
  return cases;
}

// MaxPool, MaxPoolGrad, AvgPool, AvgPoolGrad on every pool geometry. Max pooling reads values
// on a grid of 0.5, so windows hold ties and the first maximum must win.
std::vector<KernelCase> float_pool_cases(const std::string& op) {
  std::vector<KernelCase> cases;
  for (const PoolGeometry& c : kPoolGeometries) {
    KernelCase k{c.name, {}, ops::pool2d_attrs(c.options)};
    InputSpec x = f32(c.x);
    if (op == "MaxPool" || op == "MaxPoolGrad" || op == "MaxPoolWindowArgmax") {
      x.step = 0.5;
      const Shape y = output_shape("MaxPool", {x}, k.attrs);
      k.inputs = {x};
      if (op == "MaxPoolGrad") k.inputs = {x, {.shape = y, .output_of = "MaxPool"}, f32(y)};
    } else if (op == "MaxPoolGradWindowArgmax") {
      // Any position of the window, or one past the last (routes nothing, as kNoWindowArgmax);
      // positions in padding route nothing either.
      const Shape y = output_shape("MaxPool", {x}, k.attrs);
      const std::vector<int64_t>& window = c.options.ksize;
      k.inputs = {f32(y), u8(y, 0, static_cast<double>(window[0] * window[1]))};
      k.attrs.set("input_shape", c.x);
    } else {
      k.attrs.set("count_include_pad", cases.size() % 2 == 1);
      k.inputs = {x};
      if (op == "AvgPoolGrad") {
        k.inputs = {f32(output_shape("AvgPool", {x}, k.attrs))};
        k.attrs.set("input_shape", c.x);
      }
    }
    cases.push_back(std::move(k));
  }
  if (op == "MaxPoolGrad" || op == "MaxPoolWindowArgmax") {
    // With a Relu's gradient folded in (training_passes.h): windows whose maximum is not
    // positive route nothing; tiling, overlapping and 65-channel windows.
    for (size_t i : {size_t{7}, size_t{2}, size_t{5}}) {
      KernelCase k = cases.at(i);
      k.name += "_relu";
      k.attrs.set("relu", true);
      cases.push_back(std::move(k));
    }
  }
  return cases;
}

// FusedConv2DMaxPool (or with `grad` FusedConv2DMaxPoolGrad): single-channel images, as the
// training passes fuse them, convolved then pooled by tiling windows, with and without relu
// routing; and a 3-channel image, which only the reference takes.
std::vector<KernelCase> conv_max_pool_cases(bool grad) {
  struct Geometry {
    const char* name;
    Shape x, w;
    ops::Conv2DOptions conv;
    ops::PoolOptions pool;
    const char* activation;
    bool relu;
  };
  const Geometry geometries[] = {
      {"deep_mnist_like", {3, 12, 10, 1}, {5, 5, 1, 32}, {.padding = "SAME"}, {}, "relu", true},
      {"odd_same_pool", {1, 9, 7, 1}, {3, 3, 1, 33}, {}, {.padding = "SAME"}, "none", false},
      {"strided_3x3_pool",
       {2, 13, 13, 1},
       {3, 2, 1, 17},
       {.strides = {2, 1}, .padding = "SAME"},
       {.ksize = {3, 3}, .strides = {3, 3}, .padding = "SAME"},
       "relu",
       false},
      {"three_channels", {1, 8, 8, 3}, {3, 3, 3, 5}, {.padding = "SAME"}, {}, "relu", true},
  };
  std::vector<KernelCase> cases;
  for (const Geometry& c : geometries) {
    KernelCase k{c.name, {}, ops::conv2d_attrs(c.conv)};
    const Shape y = output_shape("Conv2D", {f32(c.x), f32(c.w)}, k.attrs);
    const Attrs pool = ops::pool2d_attrs(c.pool);
    for (const char* name : kPoolWindowAttrNames)
      k.attrs.set(prefixed_pool_attr(name), pool.all().at(name));
    if (grad) {
      // Any position of the window, or one past the last; positions in padding route nothing.
      const Shape pooled = output_shape("MaxPool", {f32(y)}, pool);
      k.inputs = {f32(c.x), f32(pooled),
                  u8(pooled, 0, static_cast<double>(c.pool.ksize[0] * c.pool.ksize[1]))};
      k.attrs.set("filter_shape", c.w);
    } else {
      k.inputs = {f32(c.x), f32(c.w), f32({c.w[3]})};
      k.attrs.set("activation", std::string(c.activation));
      k.attrs.set("relu", c.relu);
    }
    cases.push_back(std::move(k));
  }
  return cases;
}

// BiasAdd, BiasAddRelu, BiasAddGrad and Dropout on the element-wise shapes and one large enough for
// several threads and blocks of rows.
std::vector<KernelCase> float_elementwise_cases(const std::string& op) {
  std::vector<Shape> shapes(std::begin(kElementwiseShapes), std::end(kElementwiseShapes));
  shapes.push_back({1200, 33});
  std::vector<KernelCase> cases;
  for (const Shape& shape : shapes) {
    KernelCase k{shape_str(shape), {f32(shape)}, {}};
    if (op == "BiasAdd" || op == "BiasAddRelu") k.inputs.push_back(f32({shape.back()}));
    if (op == "Dropout") k.attrs = {{"rate", 0.3}};
    cases.push_back(std::move(k));
  }
  return cases;
}

// BatchNorm (x, gamma, beta, moving mean and variance) and BatchNormGrad (dy, x, gamma, mean,
// variance) over the last axis: around a vector of 16 channels, one channel, and rows enough for
// several threads and blocks; x off zero, so that the mean matters. With `activation`,
// FusedBatchNorm's (gamma large enough for Relu6 to clamp above too) or FusedBatchNormGrad's.
std::vector<KernelCase> batch_norm_cases(bool grad, const std::string& activation = "") {
  const std::vector<Shape> shapes = {{3, 1},  {3, 17},       {2, 9, 16},
                                     {4, 65}, {2, 5, 7, 15}, {9000, 33}};
  std::vector<KernelCase> cases;
  for (const Shape& shape : shapes) {
    const Shape channels = {shape.back()};
    KernelCase k{shape_str(shape), {}, {{"epsilon", 1e-3}}};
    if (!activation.empty()) {
      k.name += "_" + activation;
      k.attrs.set("activation", activation);
    }
    if (grad) k.inputs.push_back(f32(shape));
    k.inputs.push_back(f32(shape, 2.0, 6.0));
    k.inputs.push_back(activation.empty() ? f32(channels, 0.5, 1.5) : f32(channels, 2.0, 4.0));
    if (!grad) k.inputs.push_back(f32(channels));
    k.inputs.push_back(f32(channels, 2.0, 6.0));
    k.inputs.push_back(f32(channels, 0.5, 2.0));
    // FusedBatchNormGrad's activated values, below 0, inside (0, 6) and above 6.
    if (grad && !activation.empty()) k.inputs.push_back(f32(shape, -2.0, 8.0));
    cases.push_back(std::move(k));
  }
  return cases;
}

std::vector<KernelCase> global_avg_pool_cases() {
  return {{"size1", {f32({1, 1, 1, 1})}, {}},
          {"primes", {f32({2, 7, 5, 17})}, {}},
          {"channels_vector_width_m1", {f32({1, 13, 13, 15})}, {}},
          {"one_pixel", {f32({3, 1, 1, 8})}, {}}};
}

// The NCHW -> NHWC transposes of RGB images (widths around the vector width) and others.
// Rows of the last axis: 1 channel, fewer than a vector, the vector width +-1, an encoder's 256;
// LayerNorm with its gamma and beta, Gelu over a range where erf saturates, Softmax.
std::vector<KernelCase> last_axis_cases(const std::string& op) {
  const std::vector<Shape> shapes = {{3, 1},  {2, 7},     {5, 15},    {4, 16},
                                     {3, 17}, {2, 3, 33}, {128, 256}, {1}};
  std::vector<KernelCase> cases;
  for (const Shape& shape : shapes) {
    KernelCase k{shape_str(shape), {f32(shape, -6.0, 6.0)}, {}};
    if (op == "LayerNorm") {
      k.inputs.push_back(f32({shape.back()}, 0.5, 1.5));
      k.inputs.push_back(f32({shape.back()}));
      k.attrs.set("epsilon", cases.size() % 2 ? 1e-5 : 1e-3);
    }
    cases.push_back(std::move(k));
  }
  return cases;
}

// ONNX Slice forms: the last axis in parts (an attention block's q/k/v), negative steps and
// negative starts on outer axes, an empty result, every axis at once.
std::vector<KernelCase> slice_cases() {
  using V = std::vector<int64_t>;
  auto slice = [](const char* name, Shape x, V starts, V ends, V axes, V steps) {
    return KernelCase{name,
                      {f32(std::move(x))},
                      {{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}}};
  };
  return {slice("qkv_part", {9, 1, 48}, {16}, {32}, {-1}, {1}),
          slice("outer_steps", {7, 5, 17}, {-1, 1, 2}, {-8, 5, 15}, {0, 1, 2}, {-2, 3, 1}),
          slice("rows_only", {6, 4}, {1}, {5}, {0}, {2}),
          slice("empty", {4, 3}, {2}, {2}, {0}, {1}),
          slice("last_axis_stepped", {3, 10}, {0}, {10}, {1}, {3}),
          slice("vector", {33}, {-20}, {100}, {0}, {1})};
}

std::vector<KernelCase> transpose_cases() {
  const std::vector<int64_t> to_nhwc{0, 2, 3, 1};
  return {{"rgb_to_nhwc", {f32({1, 3, 17, 19})}, {{"perm", to_nhwc}}},
          {"rgb_to_nhwc_width15", {f32({2, 3, 5, 15})}, {{"perm", to_nhwc}}},
          {"rgb_to_nhwc_width31", {f32({3, 3, 7, 31})}, {{"perm", to_nhwc}}},
          {"rgb_one_pixel", {f32({1, 3, 1, 1})}, {{"perm", to_nhwc}}},
          {"to_nchw", {f32({2, 5, 7, 3})}, {{"perm", std::vector<int64_t>{0, 3, 1, 2}}}},
          {"matrix", {f32({7, 13})}, {{"perm", std::vector<int64_t>{1, 0}}}},
          {"rank5", {f32({2, 3, 4, 5, 6})}, {{"perm", std::vector<int64_t>{4, 2, 0, 3, 1}}}},
          {"size1", {f32({1})}, {{"perm", std::vector<int64_t>{0}}}},
          // A quantized transformer's attention heads, and bytes in other orders.
          {"heads_i8", {i8({1, 128, 4, 64})}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}},
          {"to_nchw_u8", {u8({2, 5, 7, 3})}, {{"perm", std::vector<int64_t>{0, 3, 1, 2}}}},
          {"rank5_i8", {i8({2, 3, 4, 5, 6})}, {{"perm", std::vector<int64_t>{4, 2, 0, 3, 1}}}},
          {"matrix_u8", {u8({7, 13})}, {{"perm", std::vector<int64_t>{1, 0}}}}};
}

// Add of a bias over the last axis, on either side and of rank 1 or with leading 1s; shapes
// that are not a bias (same shapes, other broadcasts) are for the reference alone.
std::vector<KernelCase> add_cases() {
  return {{"bias_right", {f32({128, 1, 768}), f32({768})}, {}},
          {"bias_left", {f32({5}), f32({3, 7, 5})}, {}},
          {"bias_leading_ones", {f32({1, 9, 33}), f32({1, 1, 33})}, {}},
          {"one_row", {f32({1, 17}), f32({17})}, {}},
          {"large", {f32({1200, 33}), f32({33})}, {}},
          {"same_shapes", {f32({4, 6}), f32({4, 6})}, {}},
          {"column", {f32({4, 6}), f32({4, 1})}, {}}};
}

// One to four inputs; one case large enough for every thread, and blocks with a remainder.
std::vector<KernelCase> add_n_cases() {
  std::vector<KernelCase> cases;
  int64_t count = 1;
  for (const Shape& shape : kElementwiseShapes) {
    std::vector<InputSpec> inputs(static_cast<size_t>(count), f32(shape));
    cases.push_back({shape_str(shape) + "x" + std::to_string(count), inputs, {}});
    count = count % 4 + 1;
  }
  cases.push_back({"large_x3", std::vector<InputSpec>(3, f32({64, 14, 14, 65})), {}});
  return cases;
}

// add_n_cases with each activation, over values past relu6's upper clamp.
std::vector<KernelCase> fused_add_n_cases() {
  std::vector<KernelCase> cases = add_n_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    for (InputSpec& input : cases[i].inputs) input.lo = -8.0, input.hi = 8.0;
    cases[i].attrs = {{"activation", activation(i)}};
  }
  // A residual block's sum: two operands, many vectors per thread.
  cases.push_back({"large_x2", std::vector<InputSpec>(2, f32({2, 28, 28, 65}, -8.0, 8.0)),
                   {{"activation", std::string("relu")}}});
  return cases;
}

// Gru / Lstm in every direction; GRU with and without linear_before_reset, LSTM with and without
// initial states and peepholes; weights frozen (rearranged on the first run only) or fed; steps
// small enough for one thread per direction, and one large enough for all threads.
std::vector<KernelCase> recurrent_cases(bool lstm) {
  struct Form {
    std::string name, direction;
    bool option;  // GRU: linear_before_reset; LSTM: peepholes
    bool states, frozen;
    int64_t steps, batch, hidden = 6;
  };
  const std::vector<Form> forms = {
      {"forward", "forward", false, false, true, 5, 3},
      {"reverse_option_states", "reverse", true, true, true, 4, 2},
      {"bidirectional_states_fed", "bidirectional", false, true, false, 3, 3},
      {"bidirectional_option_one_step", "bidirectional", true, false, true, 1, 1},
      {"forward_option_fed", "forward", true, false, false, 2, 5},
      {"bidirectional_large_step", "bidirectional", true, true, true, 1, 16, 105}};
  const int64_t gates = lstm ? 4 : 3, in = 7;
  std::vector<KernelCase> cases;
  for (const Form& f : forms) {
    const int64_t dirs = f.direction == "bidirectional" ? 2 : 1, hidden = f.hidden;
    const auto weight = [&](Shape shape) {
      InputSpec s = f32(std::move(shape));
      s.constant = f.frozen;
      return s;
    };
    const Shape state{dirs, f.batch, hidden};
    const InputSpec initial = f.states ? f32(state) : f32(state, 0.0, 0.0);
    KernelCase c{
        f.name,
        {f32({f.steps, f.batch, in}), weight({dirs, gates * hidden, in}),
         weight({dirs, gates * hidden, hidden}), weight({dirs, 2 * gates * hidden}), initial},
        {{"direction", f.direction}}};
    if (lstm) {
      c.inputs.push_back(initial);
      c.inputs.push_back(weight({dirs, 3 * hidden}));
      c.attrs.set("peepholes", f.option);
    } else {
      c.attrs.set("linear_before_reset", f.option);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

// ---- the integer ops ---------------------------------------------------------------------------

// Output params for accumulators of `depth` products of the inputs quantized_inputs() draws,
// whose real values spread about 0.5 * sqrt(depth): ±4 spreads (zero point 128), or the
// positive half for relu and relu6 (zero point 0), as calibration would choose.
InputSpec out_params(int64_t depth, const std::string& act) {
  const double spread = 0.5 * std::sqrt(static_cast<double>(depth)) + 1.0;  // + the bias
  return act == "none" ? params(static_cast<float>(8 * spread / 255), 128)
                       : params(static_cast<float>(4 * spread / 255), 0);
}

// x, x_params, w, w_scales, bias of the quantized conv and matmul: source zero points 0 (inputs
// that follow a ReLU) and not, per-channel and per-tensor scales; `frozen`: all but x are
// Consts, as in a calibrated model, the weights pruned to `zeros`.
std::vector<InputSpec> quantized_inputs(const Shape& x, const Shape& w, bool frozen, double zeros,
                                        int64_t zero_block, size_t index) {
  const int64_t channels = w.back();
  std::vector<InputSpec> in = {u8(x), params(0.02f, index % 2 == 1 ? 37 : 0), i8(w),
                               f32({index % 3 == 2 ? 1 : channels}, 1e-3, 4e-3),
                               f32({channels}, -2.0, 2.0)};
  if (!frozen) return in;
  for (size_t i = 1; i < in.size(); ++i) in[i].constant = true;
  in[2] = frozen_weights(in[2], zeros, zero_block);
  return in;
}

// QuantizedConv2D and its Requantized form on every conv geometry; the accumulators stay below
// 2^24, where oneDNN's are exact.
std::vector<KernelCase> quantized_conv_cases(bool requantized) {
  std::vector<KernelCase> cases;
  for (const ConvGeometry& c : kConvGeometries) {
    KernelCase k{c.name, quantized_inputs(c.x, c.w, c.frozen, c.zeros, 1, cases.size()),
                 ops::conv2d_attrs(c.options)};
    if (requantized) {
      const std::string act = activation(cases.size());
      k.inputs.push_back(out_params(c.w[0] * c.w[1] * c.w[2], act));
      k.inputs.back().constant = c.frozen;
      k.attrs.set("activation", act);
    }
    cases.push_back(std::move(k));
  }
  return cases;
}

// QuantizedMatMul and its Requantized form (which have no transposes).
std::vector<KernelCase> quantized_matmul_cases(bool requantized) {
  std::vector<KernelCase> cases;
  for (const MatMulGeometry& c : kMatMulGeometries) {
    if (c.transpose_a || c.transpose_b) continue;
    KernelCase k{
        c.name,
        quantized_inputs({c.m, c.k}, {c.k, c.n}, c.frozen, c.zeros, c.zero_block, cases.size()),
        {}};
    if (requantized) {
      const std::string act = activation(cases.size());
      k.inputs.push_back(out_params(c.k, act));
      k.inputs.back().constant = c.frozen;
      k.attrs.set("activation", act);
    }
    cases.push_back(std::move(k));
  }
  return cases;
}

// QuantizedMaxPool and QuantizedAvgPool (which counts only the pixels inside) on every pool
// geometry; averages also of windows of 255s, whose exact integer averages float division must
// not fall short of, and of a global window.
std::vector<KernelCase> quantized_pool_cases(bool average) {
  std::vector<KernelCase> cases;
  for (const PoolGeometry& c : kPoolGeometries) {
    cases.push_back({c.name, {u8(c.x)}, ops::pool2d_attrs(c.options)});
  }
  if (average) {
    cases.push_back({"all_255",
                     {u8({1, 7, 9, 17}, 255, 255)},
                     ops::pool2d_attrs({.ksize = {3, 3}, .strides = {2, 2}, .padding = "SAME"})});
    cases.push_back(
        {"global", {u8({1, 7, 7, 130})}, ops::pool2d_attrs({.ksize = {7, 7}, .strides = {1, 1}})});
  }
  return cases;
}

const float kQuantizeScales[] = {0.02f, 0.1f, 1.0f / 255.0f, 3.0f};
const int kQuantizeZeroPoints[] = {128, 0, 255, 7};

// Floats to u8 over the range of each params, also on values half a step apart (ties).
std::vector<KernelCase> quantize_cases() {
  std::vector<KernelCase> cases;
  for (const Shape& shape : kElementwiseShapes) {
    const size_t i = cases.size() % 4;
    cases.push_back({shape_str(shape),
                     {f32(shape, -3.0, 3.0), params(kQuantizeScales[i], kQuantizeZeroPoints[i])},
                     {}});
  }
  InputSpec ties = f32({3, 41}, -1.0, 1.0);
  ties.step = 0.01;
  cases.push_back({"ties", {ties, params(0.02f, 128)}, {}});
  return cases;
}

std::vector<KernelCase> dequantize_cases() {
  std::vector<KernelCase> cases;
  for (const Shape& shape : kElementwiseShapes)
    cases.push_back(
        {shape_str(shape),
         {u8(shape), params(cases.size() % 2 ? 0.3f : 0.02f, cases.size() % 2 ? 0 : 128)},
         {}});
  return cases;
}

// Ranges of both signs, positive only and negative only; an empty tensor.
std::vector<KernelCase> choose_qparams_cases() {
  const std::pair<double, double> ranges[] = {{-3.0, 5.0}, {0.5, 2.0}, {-4.0, -1.0}};
  std::vector<KernelCase> cases;
  for (const Shape& shape : kElementwiseShapes) {
    const auto [lo, hi] = ranges[cases.size() % 3];
    cases.push_back({shape_str(shape), {f32(shape, lo, hi)}, {}});
  }
  cases.push_back({"empty", {f32({0, 3})}, {}});
  return cases;
}

// Requantize (`out`) or RequantizationRange of accumulators far beyond 16 bits, with per-channel
// and per-tensor scales, each activation; RequantizationRange also of an empty tensor.
std::vector<KernelCase> requantize_cases(bool out) {
  std::vector<KernelCase> cases;
  for (const Shape& shape : kElementwiseShapes) {
    const size_t i = cases.size();
    KernelCase k{shape_str(shape),
                 {i32(shape, -3e6, 3e6), params(0.02f, 7),
                  out ? f32({i % 2 ? 1 : shape.back()}, 1e-4, 4e-3)
                      : f32({i % 2 ? 1 : shape.back()}, 1e-5, 4e-4)},
                 {{"activation", activation(i)}}};
    if (out) k.inputs.push_back(params(3.0f, 60));
    cases.push_back(std::move(k));
  }
  if (!out)
    cases.push_back({"empty",
                     {i32({0, 4}, 0, 0), params(0.02f, 7), f32({4}, 1e-5, 4e-4)},
                     {{"activation", std::string("none")}}});
  return cases;
}

// Params of a, b and the output: typical ones, all zero points 0, extreme zero points, and a
// multiplier too small for the vector code.
std::vector<KernelCase> quantized_add_cases() {
  const std::pair<float, int> param_sets[][3] = {{{0.02f, 128}, {0.05f, 10}, {0.06f, 90}},
                                                 {{0.1f, 0}, {0.1f, 0}, {0.2f, 0}},
                                                 {{0.003f, 255}, {0.5f, 3}, {0.4f, 50}},
                                                 {{1e-10f, 255}, {0.5f, 3}, {0.4f, 50}}};
  std::vector<KernelCase> cases;
  for (const Shape& shape : kElementwiseShapes) {
    const size_t i = cases.size();
    const auto& p = param_sets[i % 4];
    cases.push_back({shape_str(shape),
                     {u8(shape), params(p[0].first, p[0].second), u8(shape),
                      params(p[1].first, p[1].second), params(p[2].first, p[2].second)},
                     {{"activation", activation(i)}}});
  }
  return cases;
}

// QuantizedConcat with rows of each length its AVX-512 loop splits differently (whole vectors, a
// half vector, a masked tail), inputs in the output's params (copied) and in others (mapped; the
// last saturates at both ends), along the channels and along an outer axis.
std::vector<KernelCase> quantized_concat_cases() {
  const std::pair<float, int> out = {0.05f, 40};
  const std::pair<float, int> param_sets[] = {out, {0.02f, 128}, {0.3f, 100}};
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> layouts = {
      {{1, 5, 32}, 3}, {{64, 100, 7}, 3}, {{97, 31, 33, 128}, 3}, {{3, 1, 2}, 1}};
  std::vector<KernelCase> cases;
  for (const auto& [sizes, axis] : layouts)
    for (size_t first = 0; first < std::size(param_sets); ++first) {
      KernelCase c{"axis" + std::to_string(axis) + "_first" + std::to_string(sizes[0]) +
                       "_params" + std::to_string(first),
                   {},
                   {{"axis", axis}}};
      for (size_t i = 0; i < sizes.size(); ++i) {
        Shape shape = {2, 3, 5, 4};
        shape[static_cast<size_t>(axis)] = sizes[i];
        const auto& p = param_sets[(first + i) % std::size(param_sets)];
        c.inputs.push_back(u8(shape));
        c.inputs.push_back(params(p.first, p.second));
      }
      c.inputs.push_back(params(out.first, out.second));
      cases.push_back(std::move(c));
    }
  return cases;
}

// ---- packed sign bits (ops/binary_ops.h) -----------------------------------------------------

// SignBits on rows of any length and MaxPoolSignBits on every pool geometry; values on a 0.5
// grid, so that some are exactly 0 (bit 0, as BinarizeActivation reads them).
[[maybe_unused]] std::vector<KernelCase> sign_bits_cases(bool pool) {
  std::vector<KernelCase> cases;
  for (const PoolGeometry& c : kPoolGeometries) {
    InputSpec x = f32(c.x);
    x.step = 0.5;
    cases.push_back({c.name, {x}, pool ? ops::pool2d_attrs(c.options) : Attrs{}});
  }
  if (!pool)
    for (const Shape& shape :
         {Shape{1, 1}, Shape{3, 31}, Shape{2, 64}, Shape{1, 3136}, Shape{5, 97}})
      cases.push_back({shape_str(shape), {{.shape = shape, .step = 0.5}}, {}});
  return cases;
}

// XnorConv2D and XnorMatMul: bits with every bit random, those past the channels included
// (ignored), and frozen weights in {-1, 0, +1} (ternary levels of scale 1, which the binary
// kernels take; also binary ones where no weight rounds to 0).
std::vector<KernelCase> xnor_cases(bool conv) {
  auto bits = [](Shape shape) {
    return InputSpec{
        .dtype = DType::i32, .shape = std::move(shape), .lo = -2147483648.0, .hi = 2147483647.0};
  };
  auto levels = [](Shape shape, double lo) {
    return InputSpec{.shape = std::move(shape), .lo = lo, .hi = 1.0, .step = 1.0, .constant = true};
  };
  std::vector<KernelCase> cases;
  if (conv) {
    struct Geometry {
      const char* name;
      Shape x, w;  // x: the values' shape
      ops::Conv2DOptions options;
    };
    const Geometry geometries[] = {
        {"deep_mnist_conv2", {1, 14, 14, 32}, {5, 5, 32, 64}, {.padding = "SAME"}},
        {"batch64_odd_channels", {64, 5, 4, 25}, {3, 3, 25, 17}, {.padding = "SAME"}},
        {"strided_explicit",
         {2, 9, 8, 100},
         {3, 2, 100, 70},
         {.strides = {2, 1}, .padding = "EXPLICIT", .pads = {1, 2, 0, 1}}},
        {"dilated_small_channels",
         {1, 10, 9, 7},
         {3, 3, 7, 5},
         {.padding = "SAME", .dilations = {2, 2}}},
    };
    int i = 0;
    for (const Geometry& g : geometries) {
      Shape packed = g.x;
      packed[3] = sign_bit_elements(g.x[3]);
      Attrs attrs = ops::conv2d_attrs(g.options);
      attrs.set("activation", activation(static_cast<size_t>(i)));
      // Odd cases: [0.5, 1] rounds to 1, binary weights (the others ternary).
      cases.push_back(
          {g.name, {bits(packed), levels(g.w, i % 2 ? 0.5 : -1.0), f32({g.w[3]})}, attrs});
      ++i;
    }
    return cases;
  }
  const std::pair<Shape, Shape> shapes[] = {
      {{1, 98}, {3136, 33}}, {{64, 5}, {129, 11}}, {{3, 1}, {1, 2}}, {{2, 7, 7, 2}, {3136, 16}}};
  int i = 0;
  for (const auto& [a, b] : shapes) {
    cases.push_back({shape_str(a) + "x" + shape_str(b),
                     {bits(a), levels(b, i % 2 ? 0.5 : -1.0), f32({b[1]})},
                     {{"activation", activation(static_cast<size_t>(i))}}});
    ++i;
  }
  return cases;
}

std::map<std::string, ShapeSet> build_shape_sets() {
  // Float kernels sum in other orders (and Winograd transforms): within 1e-3 on values of
  // magnitude 1. Integer kernels are exact but where oneDNN requantizes in float (one unit).
  const Tolerance close{.rtol = 1e-4, .atol = 1e-3};
  const Tolerance exact{.rtol = 0.0, .atol = 0.0};
  std::map<std::string, ShapeSet> sets;
  for (const char* op :
       {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "FusedConv2D", "FusedConv2DAdd"})
    sets[op] = {float_conv_cases(op), close};
  sets["MatMul"] = {float_matmul_cases(false), close};
  sets["BatchMatMul"] = {batch_matmul_cases(), close};
  sets["FusedBatchMatMul"] = {fused_batch_matmul_cases(), close};
  sets["FusedMatMul"] = {float_matmul_cases(true), close};
  sets["MaxPool"] = {float_pool_cases("MaxPool"), exact};
  sets["MaxPoolWindowArgmax"] = {float_pool_cases("MaxPoolWindowArgmax"), exact};
  sets["MaxPoolGradWindowArgmax"] = {float_pool_cases("MaxPoolGradWindowArgmax"), exact};
  sets["FusedConv2DMaxPool"] = {conv_max_pool_cases(false), close};
  sets["FusedConv2DMaxPoolGrad"] = {conv_max_pool_cases(true), close};
  for (const char* op : {"MaxPoolGrad", "AvgPool", "AvgPoolGrad"})
    sets[op] = {float_pool_cases(op), close};
  sets["GlobalAvgPool"] = {global_avg_pool_cases(), close};
  for (const char* op : {"BiasAdd", "BiasAddRelu"}) sets[op] = {float_elementwise_cases(op), exact};
  sets["BiasAddGrad"] = {float_elementwise_cases("BiasAddGrad"), close};
  sets["BatchNorm"] = {batch_norm_cases(false), close};
  sets["BatchNormGrad"] = {batch_norm_cases(true), close};
  std::vector<KernelCase> fused_batch_norm = batch_norm_cases(false, "relu");
  for (KernelCase& k : batch_norm_cases(false, "relu6")) fused_batch_norm.push_back(std::move(k));
  sets["FusedBatchNorm"] = {std::move(fused_batch_norm), close};
  std::vector<KernelCase> fused_batch_norm_grad = batch_norm_cases(true, "relu");
  for (KernelCase& k : batch_norm_cases(true, "relu6"))
    fused_batch_norm_grad.push_back(std::move(k));
  sets["FusedBatchNormGrad"] = {std::move(fused_batch_norm_grad), close};
  // Inference passes x through; the training masks are compared in OpsNormTest.
  sets["Dropout"] = {float_elementwise_cases("Dropout"), exact};
  sets["Transpose"] = {transpose_cases(), exact};
  sets["Add"] = {add_cases(), exact};
  sets["AddN"] = {add_n_cases(), exact};
  sets["FusedAddN"] = {fused_add_n_cases(), exact};
  sets["StridedSlice"] = {slice_cases(), exact};
  // Sums in float in other orders; erf by a rational approximation (a few float roundings).
  for (const char* op : {"LayerNorm", "Gelu", "Softmax"})
    sets[op] = {last_axis_cases(op), {.rtol = 1e-5, .atol = 1e-5}};
  // Gates are sums of ~13 products through sigmoid / tanh; oneDNN sums in float.
  sets["Gru"] = {recurrent_cases(false), {.rtol = 1e-5, .atol = 1e-5}};
  sets["Lstm"] = {recurrent_cases(true), {.rtol = 1e-5, .atol = 1e-5}};
  sets["QuantizedConv2D"] = {quantized_conv_cases(false), exact};
  sets["QuantizedConv2DRequantized"] = {quantized_conv_cases(true), {.units = 1}};
  sets["QuantizedMatMul"] = {quantized_matmul_cases(false), exact};
  sets["QuantizedMatMulRequantized"] = {quantized_matmul_cases(true), {.units = 1}};
  sets["QuantizedMaxPool"] = {quantized_pool_cases(false), exact};
  sets["QuantizedAvgPool"] = {quantized_pool_cases(true), exact};
  sets["Quantize"] = {quantize_cases(), exact};
  sets["Dequantize"] = {dequantize_cases(), exact};
  sets["ChooseQParams"] = {choose_qparams_cases(), exact};
  sets["Requantize"] = {requantize_cases(true), exact};
  sets["RequantizationRange"] = {requantize_cases(false), exact};
  sets["QuantizedAdd"] = {quantized_add_cases(), exact};
  sets["QuantizedConcat"] = {quantized_concat_cases(), exact};
#if defined(__x86_64__)
  // Only x86-64 has packing kernels beside the reference (AVX-512 VPOPCNTDQ).
  sets["SignBits"] = {sign_bits_cases(false), exact};
  sets["MaxPoolSignBits"] = {sign_bits_cases(true), exact};
#endif
  // The reference sums +-1 * w in double; the binary kernels count bits, then scale once.
  sets["XnorConv2D"] = {xnor_cases(true), close};
  sets["XnorMatMul"] = {xnor_cases(false), close};
  return sets;
}

// Writes `value` (whole for integer dtypes) to element k.
void set_element(Tensor& t, int64_t k, double value) {
  switch (t.dtype()) {
    case DType::f32:
      t.data<float>()[k] = static_cast<float>(value);
      return;
    case DType::i32:
      t.data<int32_t>()[k] = static_cast<int32_t>(value);
      return;
    case DType::i64:
      t.data<int64_t>()[k] = static_cast<int64_t>(value);
      return;
    case DType::u8:
      t.data<uint8_t>()[k] = static_cast<uint8_t>(value);
      return;
    case DType::i8:
      t.data<int8_t>()[k] = static_cast<int8_t>(value);
      return;
  }
}

Tensor draw(const InputSpec& s, uint32_t seed) {
  Tensor t(s.dtype, s.shape);
  if (!s.values.empty()) {
    SF_CHECK(static_cast<int64_t>(s.values.size()) == t.numel(), "{} literal values for {}",
             s.values.size(), shape_str(s.shape));
    for (int64_t k = 0; k < t.numel(); ++k) set_element(t, k, s.values[static_cast<size_t>(k)]);
    return t;
  }
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> real(s.lo, s.hi);
  std::uniform_int_distribution<int64_t> whole(static_cast<int64_t>(s.lo),
                                               static_cast<int64_t>(s.hi));
  for (int64_t k = 0; k < t.numel(); ++k) {
    double v = s.dtype == DType::f32 ? real(rng) : static_cast<double>(whole(rng));
    if (s.step > 0) v = std::round(v / s.step) * s.step;
    set_element(t, k, v);
  }
  if (s.zeros <= 0.0 || t.numel() == 0) return t;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int64_t row = s.shape.back();
  for (int64_t start = 0; start < t.numel(); start += row)
    for (int64_t run = 0; run < row; run += s.zero_block)
      if (unit(rng) < s.zeros)
        for (int64_t k = run; k < std::min(row, run + s.zero_block); ++k)
          set_element(t, start + k, 0.0);
  return t;
}

}  // namespace

const std::map<std::string, ShapeSet>& kernel_shape_sets() {
  static const std::map<std::string, ShapeSet> sets = build_shape_sets();
  return sets;
}

std::vector<Tensor> make_inputs(const KernelCase& c, uint32_t seed) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const InputSpec& s = c.inputs[i];
    if (s.output_of.empty()) {
      inputs.push_back(draw(s, seed + static_cast<uint32_t>(i)));
      continue;
    }
    // The case's attributes that op has (MaxPool takes MaxPoolGrad's but relu).
    Attrs attrs;
    for (const AttrSpec& a : OpRegistry::global().get(s.output_of, "kernel cases").attrs)
      if (c.attrs.has(a.name)) attrs.set(a.name, c.attrs.all().at(a.name));
    inputs.push_back(run_once(
        [&](Graph& g, const std::vector<Output>& in) { return g.add(s.output_of, {in[0]}, attrs); },
        {inputs[0]}, "reference"));
  }
  return inputs;
}

}  // namespace sf::testing
