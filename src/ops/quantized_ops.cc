// The integer ("eightbit") inference ops made by the quantization rewrite.
//
// Representation: an activation is a u8 tensor plus params f32[2] = [scale, zero_point], with
// real = scale * (q - zero_point); weights are symmetric i8 with scales f32[1] (per tensor) or
// f32[C] (per output channel, the last axis). Convs and matmuls accumulate in i32 and are
// brought back to u8 by Requantize (or the fused *Requantized forms) with fixed-point
// multipliers (codec/fixed_point.h).
//
// Window and channel checks defer to Conv2D's, MaxPool's and AvgPool's shape functions, fed the
// same shapes as f32, so the geometry rules live once.
#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/quantized_ops.h"
#include "ops/register.h"

namespace sf {

namespace {

const AttrValue kNoActivation{activation_name(Activation::None)};

std::vector<AttrSpec> with(std::vector<AttrSpec> specs, std::vector<AttrSpec> more) {
  specs.insert(specs.end(), more.begin(), more.end());
  return specs;
}

std::vector<AttrSpec> with_activation(std::vector<AttrSpec> specs) {
  return with(std::move(specs), {{"activation", AttrKind::String, kNoActivation}});
}

void expect_activation(const InferContext& ctx) { activation_of(ctx.node()); }

// Input i is an activation's params: f32[2] = [scale, zero_point].
void expect_params(const InferContext& ctx, int i, const char* what) {
  ctx.expect_dtype(i, DType::f32, what);
  if (ctx.shape(i) != Shape{2})
    ctx.fail("input '{}' must be f32[2] = [scale, zero_point], got {}", what,
             shape_str(ctx.shape(i)));
}

// Input i holds weight scales: f32[1] (per tensor) or f32[channels] (per output channel).
void expect_scales(const InferContext& ctx, int i, const char* what, int64_t channels) {
  ctx.expect_dtype(i, DType::f32, what);
  const Shape& s = ctx.shape(i);
  if (s.size() != 1 || (s[0] != 1 && s[0] != channels))
    ctx.fail("input '{}' must be f32[1] or f32[{}] (one per output channel), got {}", what,
             channels, shape_str(s));
}

void expect_bias(const InferContext& ctx, int i, int64_t channels) {
  ctx.expect_dtype(i, DType::f32, "bias");
  if (ctx.shape(i) != Shape{channels})
    ctx.fail("bias {} must be [{}] (the output's last dimension)", shape_str(ctx.shape(i)),
             channels);
}

// Runs `base_op`'s shape function on f32 stand-ins for the given inputs of this node, so that
// its window and channel checks (and their messages, which name this node) are reused.
Shape base_shape(const InferContext& ctx, const char* base_op, const std::vector<int>& inputs) {
  std::vector<TensorType> as_f32;
  for (int i : inputs) as_f32.push_back(TensorType{DType::f32, ctx.shape(i)});
  InferContext base_ctx(ctx.node(), as_f32);
  const OpDef& base = OpRegistry::global().get(base_op, "node '" + ctx.node().name + "'");
  return base.infer(base_ctx).at(0).shape;
}

std::vector<TensorType> typed(DType dtype, Shape shape) {
  return {TensorType{dtype, std::move(shape)}};
}

// --- float <-> u8 ---

std::vector<TensorType> infer_choose_qparams(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  return typed(DType::f32, {2});
}

std::vector<TensorType> infer_quantize(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "x");
  expect_params(ctx, 1, "params");
  return typed(DType::u8, ctx.shape(0));
}

std::vector<TensorType> infer_dequantize(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::u8, "q");
  expect_params(ctx, 1, "params");
  return typed(DType::f32, ctx.shape(0));
}

// --- conv and matmul ---

// x, x_params, w, w_scales, bias: the i32 accumulator shape.
Shape quantized_conv_shape(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::u8, "x");
  expect_params(ctx, 1, "x_params");
  ctx.expect_dtype(2, DType::i8, "w");
  ctx.expect_rank(0, 4, "x");
  ctx.expect_rank(2, 4, "w");
  Shape y = base_shape(ctx, op_names::kConv2D, {0, 2});
  expect_scales(ctx, 3, "w_scales", y.back());
  expect_bias(ctx, 4, y.back());
  return y;
}

// a, a_params, b, b_scales, bias: the i32 accumulator shape.
Shape quantized_matmul_shape(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::u8, "a");
  expect_params(ctx, 1, "a_params");
  ctx.expect_dtype(2, DType::i8, "b");
  ctx.expect_rank(0, 2, "a");
  ctx.expect_rank(2, 2, "b");
  const Shape& a = ctx.shape(0);
  const Shape& b = ctx.shape(2);
  if (a[1] != b[0])
    ctx.fail("inner dimensions differ: a {} vs b {}", shape_str(a), shape_str(b));
  expect_scales(ctx, 3, "b_scales", b[1]);
  expect_bias(ctx, 4, b[1]);
  return {a[0], b[1]};
}

std::vector<TensorType> infer_quantized_conv2d(const InferContext& ctx) {
  return typed(DType::i32, quantized_conv_shape(ctx));
}

std::vector<TensorType> infer_quantized_matmul(const InferContext& ctx) {
  return typed(DType::i32, quantized_matmul_shape(ctx));
}

std::vector<TensorType> infer_quantized_conv2d_requantized(const InferContext& ctx) {
  expect_activation(ctx);
  Shape y = quantized_conv_shape(ctx);
  expect_params(ctx, 5, "out_params");
  return typed(DType::u8, y);
}

std::vector<TensorType> infer_quantized_matmul_requantized(const InferContext& ctx) {
  expect_activation(ctx);
  Shape y = quantized_matmul_shape(ctx);
  expect_params(ctx, 5, "out_params");
  return typed(DType::u8, y);
}

// --- requantization ---

// acc, x_params, w_scales: checks them and returns acc's shape.
Shape accumulator_shape(const InferContext& ctx) {
  expect_activation(ctx);
  ctx.expect_dtype(0, DType::i32, "acc");
  const Shape& acc = ctx.shape(0);
  if (acc.empty()) ctx.fail("acc must have rank >= 1, got a scalar");
  expect_params(ctx, 1, "x_params");
  expect_scales(ctx, 2, "w_scales", acc.back());
  return acc;
}

std::vector<TensorType> infer_requantization_range(const InferContext& ctx) {
  accumulator_shape(ctx);
  return typed(DType::f32, {2});
}

std::vector<TensorType> infer_requantize(const InferContext& ctx) {
  Shape acc = accumulator_shape(ctx);
  expect_params(ctx, 3, "out_params");
  return typed(DType::u8, acc);
}

// --- pooling, add, concat ---

InferFn quantized_pool_infer(const char* base_op) {
  return [base_op](const InferContext& ctx) -> std::vector<TensorType> {
    ctx.expect_dtype(0, DType::u8, "x");
    ctx.expect_rank(0, 4, "x");
    // Padding counted in an average would be worth the input's zero point, which the op is not
    // given, so only the default (padding excluded) is supported.
    if (ctx.attrs().has("count_include_pad") && ctx.attrs().get_bool("count_include_pad"))
      ctx.fail("count_include_pad is not supported on quantized data");
    return typed(DType::u8, base_shape(ctx, base_op, {0}));
  };
}

std::vector<TensorType> infer_quantized_add(const InferContext& ctx) {
  expect_activation(ctx);
  ctx.expect_dtype(0, DType::u8, "a");
  expect_params(ctx, 1, "a_params");
  ctx.expect_dtype(2, DType::u8, "b");
  expect_params(ctx, 3, "b_params");
  expect_params(ctx, 4, "out_params");
  if (ctx.shape(0) != ctx.shape(2))
    ctx.fail("a {} and b {} must have the same shape (no broadcasting)", shape_str(ctx.shape(0)),
             shape_str(ctx.shape(2)));
  return typed(DType::u8, ctx.shape(0));
}

// Inputs: x0, p0, x1, p1, ..., out_params.
std::vector<TensorType> infer_quantized_concat(const InferContext& ctx) {
  const int n = ctx.num_inputs();
  if (n < 3 || n % 2 == 0)
    ctx.fail("expects (data, params) pairs then out_params (an odd number >= 3), got {} inputs",
             n);
  for (int i = 0; i + 1 < n; i += 2) {
    if (ctx.dtype(i) != DType::u8)
      ctx.fail("input {} must be u8, got {}", i, type_str(ctx.input(i)));
    if (ctx.dtype(i + 1) != DType::f32 || ctx.shape(i + 1) != Shape{2})
      ctx.fail("input {} must be f32[2] = [scale, zero_point] (the params of input {}), got {}",
               i + 1, i, type_str(ctx.input(i + 1)));
  }
  if (ctx.dtype(n - 1) != DType::f32 || ctx.shape(n - 1) != Shape{2})
    ctx.fail("last input (out_params) must be f32[2] = [scale, zero_point], got {}",
             type_str(ctx.input(n - 1)));
  Shape out = ctx.shape(0);
  const int64_t rank = static_cast<int64_t>(out.size());
  if (rank == 0) ctx.fail("cannot concatenate scalars");
  int64_t axis = ctx.attrs().get_int("axis");
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank)
    ctx.fail("axis {} is out of range for input {}", ctx.attrs().get_int("axis"),
             shape_str(ctx.shape(0)));
  const size_t a = static_cast<size_t>(axis);
  for (int i = 2; i + 1 < n; i += 2) {
    const Shape& s = ctx.shape(i);
    bool fits = s.size() == out.size();
    for (size_t d = 0; fits && d < s.size(); ++d) fits = d == a || s[d] == ctx.shape(0)[d];
    if (!fits)
      ctx.fail("input {} {} vs input 0 {}: shapes must match except on axis {}", i,
               shape_str(s), shape_str(ctx.shape(0)), axis);
    out[a] += s[a];
  }
  return typed(DType::u8, out);
}

}  // namespace

void register_quantized_ops(OpRegistry& r) {
  // Copies: adding to the registry may move its entries.
  const std::vector<AttrSpec> conv_attrs = r.get(op_names::kConv2D, "quantized ops").attrs;
  const std::vector<AttrSpec> max_pool_attrs = r.get(op_names::kMaxPool, "quantized ops").attrs;
  const std::vector<AttrSpec> avg_pool_attrs = r.get(op_names::kAvgPool, "quantized ops").attrs;
  r.add(OpDef{.name = op_names::kChooseQParams, .inputs = {"x"}, .infer = infer_choose_qparams});
  r.add(OpDef{.name = op_names::kQuantize, .inputs = {"x", "params"}, .infer = infer_quantize});
  r.add(OpDef{.name = op_names::kDequantize, .inputs = {"q", "params"}, .infer = infer_dequantize});
  // The i8 weights w / b [.., out]: output channels last, as their per-channel scales.
  const std::vector<WeightInput> weights{{.input = 2, .channel_axis = -1}};
  // Multiply-accumulates count as 2 OPs, as the float ops count theirs (bench --profile's
  // GOP/s, the placement log's per-device totals).
  const auto conv_ops = [](const Node& node, const std::vector<Shape>& inputs) {
    const Shape& w = inputs[2];  // [kh, kw, in, out]
    return 2.0 * static_cast<double>(num_elements(node.outputs[0].shape)) *
           static_cast<double>(w[0] * w[1] * w[2]);
  };
  const auto matmul_ops = [](const Node& node, const std::vector<Shape>& inputs) {
    return 2.0 * static_cast<double>(num_elements(node.outputs[0].shape)) *
           static_cast<double>(inputs[0].back());
  };
  r.add(OpDef{.name = op_names::kQuantizedConv2D,
              .inputs = {"x", "x_params", "w", "w_scales", "bias"},
              .attrs = conv_attrs,
              .infer = infer_quantized_conv2d,
              .weights = weights,
              .flops = conv_ops});
  r.add(OpDef{.name = op_names::kQuantizedMatMul,
              .inputs = {"a", "a_params", "b", "b_scales", "bias"},
              .infer = infer_quantized_matmul,
              .weights = weights,
              .flops = matmul_ops});
  r.add(OpDef{.name = op_names::kRequantizationRange,
              .inputs = {"acc", "x_params", "w_scales"},
              .attrs = with_activation({}),
              .infer = infer_requantization_range});
  r.add(OpDef{.name = op_names::kRequantize,
              .inputs = {"acc", "x_params", "w_scales", "out_params"},
              .attrs = with_activation({}),
              .infer = infer_requantize});
  r.add(OpDef{.name = op_names::kQuantizedConv2DRequantized,
              .inputs = {"x", "x_params", "w", "w_scales", "bias", "out_params"},
              .attrs = with_activation(conv_attrs),
              .infer = infer_quantized_conv2d_requantized,
              .weights = weights,
              .flops = conv_ops});
  r.add(OpDef{.name = op_names::kQuantizedMatMulRequantized,
              .inputs = {"a", "a_params", "b", "b_scales", "bias", "out_params"},
              .attrs = with_activation({}),
              .infer = infer_quantized_matmul_requantized,
              .weights = weights,
              .flops = matmul_ops});
  r.add(OpDef{.name = op_names::kQuantizedMaxPool,
              .inputs = {"x"},
              .attrs = max_pool_attrs,
              .infer = quantized_pool_infer(op_names::kMaxPool)});
  r.add(OpDef{.name = op_names::kQuantizedAvgPool,
              .inputs = {"x"},
              .attrs = avg_pool_attrs,
              .infer = quantized_pool_infer(op_names::kAvgPool)});
  r.add(OpDef{.name = op_names::kQuantizedAdd,
              .inputs = {"a", "a_params", "b", "b_params", "out_params"},
              .attrs = with_activation({}),
              .infer = infer_quantized_add});
  r.add(OpDef{.name = op_names::kQuantizedConcat,
              .inputs = {"xs"},
              .variadic = true,
              .attrs = {{"axis", AttrKind::Int, std::nullopt}},
              .infer = infer_quantized_concat});
}

namespace ops {

Output choose_qparams(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kChooseQParams, {x}, {}, name);
}

Output quantize(Graph& g, Output x, Output params, const std::string& name) {
  return g.add(op_names::kQuantize, {x, params}, {}, name);
}

Output dequantize(Graph& g, Output q, Output params, const std::string& name) {
  return g.add(op_names::kDequantize, {q, params}, {}, name);
}

Output quantized_conv2d(Graph& g, const QuantizedConvInputs& in, const Conv2DOptions& options,
                        const std::string& name) {
  return g.add(op_names::kQuantizedConv2D, {in.x, in.x_params, in.w, in.w_scales, in.bias},
               conv2d_attrs(options), name);
}

Output quantized_conv2d_requantized(Graph& g, const QuantizedConvInputs& in, Output out_params,
                                    const Conv2DOptions& options, Activation activation,
                                    const std::string& name) {
  Attrs a = conv2d_attrs(options);
  a.set("activation", activation_name(activation));
  return g.add(op_names::kQuantizedConv2DRequantized,
               {in.x, in.x_params, in.w, in.w_scales, in.bias, out_params}, a, name);
}

Output quantized_matmul(Graph& g, const QuantizedConvInputs& in, const std::string& name) {
  return g.add(op_names::kQuantizedMatMul, {in.x, in.x_params, in.w, in.w_scales, in.bias}, {},
               name);
}

Output quantized_matmul_requantized(Graph& g, const QuantizedConvInputs& in, Output out_params,
                                    Activation activation, const std::string& name) {
  return g.add(op_names::kQuantizedMatMulRequantized,
               {in.x, in.x_params, in.w, in.w_scales, in.bias, out_params},
               {{"activation", activation_name(activation)}}, name);
}

Output requantization_range(Graph& g, Output acc, Output x_params, Output w_scales,
                            Activation activation, const std::string& name) {
  return g.add(op_names::kRequantizationRange, {acc, x_params, w_scales},
               {{"activation", activation_name(activation)}}, name);
}

Output requantize(Graph& g, Output acc, Output x_params, Output w_scales, Output out_params,
                  Activation activation, const std::string& name) {
  return g.add(op_names::kRequantize, {acc, x_params, w_scales, out_params},
               {{"activation", activation_name(activation)}}, name);
}

Output quantized_max_pool(Graph& g, Output x, const PoolOptions& options,
                          const std::string& name) {
  return g.add(op_names::kQuantizedMaxPool, {x}, pool2d_attrs(options), name);
}

Output quantized_avg_pool(Graph& g, Output x, const PoolOptions& options,
                          const std::string& name) {
  Attrs a = pool2d_attrs(options);
  a.set("count_include_pad", options.count_include_pad);
  return g.add(op_names::kQuantizedAvgPool, {x}, a, name);
}

Output quantized_add(Graph& g, Output a, Output a_params, Output b, Output b_params,
                     Output out_params, Activation activation, const std::string& name) {
  return g.add(op_names::kQuantizedAdd, {a, a_params, b, b_params, out_params},
               {{"activation", activation_name(activation)}}, name);
}

Output quantized_concat(Graph& g, const std::vector<std::pair<Output, Output>>& inputs,
                        Output out_params, int64_t axis, const std::string& name) {
  std::vector<Output> flat;
  for (const auto& [data, params] : inputs) {
    flat.push_back(data);
    flat.push_back(params);
  }
  flat.push_back(out_params);
  return g.add(op_names::kQuantizedConcat, flat, {{"axis", axis}}, name);
}

}  // namespace ops
}  // namespace sf
