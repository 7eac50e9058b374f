// Dense NN ops: Conv2D and its two backprops, MatMul, BiasAdd, max/average/global pooling and
// their gradients. Images are NHWC, filters HWIO [kh, kw, in/groups, out]; all window geometry
// comes from ops/conv_geometry.h.
//
// The backprop ops carry the forward input's shape as an attribute (input_shape), but take the
// batch size from dy, so a graph re-inferred for another batch size stays valid.
#include <string>
#include <utility>

#include "graph/op_registry.h"
#include "ops/conv_geometry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace sf {

namespace {

const AttrValue kOnePair{std::vector<int64_t>{1, 1}};
const AttrValue kTwoPair{std::vector<int64_t>{2, 2}};
const AttrValue kNoPads{std::vector<int64_t>{0, 0, 0, 0}};
const AttrValue kValid{std::string("VALID")};

std::vector<AttrSpec> conv_attr_specs() {
  return {{"strides", AttrKind::Ints, kOnePair},
          {"padding", AttrKind::String, kValid},
          {"pads", AttrKind::Ints, kNoPads},
          {"dilations", AttrKind::Ints, kOnePair},
          {"groups", AttrKind::Int, AttrValue{int64_t{1}}}};
}

std::vector<AttrSpec> with(std::vector<AttrSpec> specs, std::vector<AttrSpec> more) {
  specs.insert(specs.end(), more.begin(), more.end());
  return specs;
}

std::vector<AttrSpec> pool_attr_specs() {
  return {{"ksize", AttrKind::Ints, kTwoPair},
          {"strides", AttrKind::Ints, kTwoPair},
          {"padding", AttrKind::String, kValid},
          {"pads", AttrKind::Ints, kNoPads}};
}

// The attributes of `node` named by `specs`, for gradient nodes that reuse them.
Attrs copy_attrs(const Attrs& from, const std::vector<AttrSpec>& specs) {
  Attrs out;
  for (const AttrSpec& s : specs)
    if (from.has(s.name)) out.set(s.name, from.all().at(s.name));
  return out;
}

void expect_f32(const InferContext& ctx) {
  const OpDef& def = OpRegistry::global().get(ctx.node().op, "");
  for (int i = 0; i < ctx.num_inputs(); ++i)
    ctx.expect_dtype(i, DType::f32, def.inputs.at(static_cast<size_t>(i)).c_str());
}

// Checks a rank-4 shape given as an attribute.
Shape attr_image_shape(const InferContext& ctx, const char* attr) {
  Shape s = ctx.attrs().get_ints(attr);
  if (s.size() != 4) ctx.fail("{} must have rank 4, got {}", attr, shape_str(s));
  for (int64_t d : s)
    if (d < 0) ctx.fail("{} {} has a negative dimension", attr, shape_str(s));
  return s;
}

// The forward Conv2D output shape for x and filter w; fails naming the node and the shapes.
Shape conv_output(const InferContext& ctx, const Shape& x, const Shape& w) {
  const int64_t groups = ctx.attrs().get_int("groups");
  if (groups < 1) ctx.fail("groups must be positive, got {}", groups);
  if (w[2] * groups != x[3])
    ctx.fail("filter {} expects {} input channels, x {} has {}", shape_str(w), w[2] * groups,
             shape_str(x), x[3]);
  if (w[3] % groups != 0)
    ctx.fail("filter {} has {} output channels, not divisible by groups {}", shape_str(w), w[3],
             groups);
  Window2D g;
  std::string err = window_2d(x[1], x[2], w[0], w[1], window_attrs(ctx.attrs()), &g);
  if (!err.empty()) ctx.fail("x {}, filter {}: {}", shape_str(x), shape_str(w), err);
  return {x[0], g.h.out, g.w.out, w[3]};
}

Shape pool_output(const InferContext& ctx, const Shape& x) {
  WindowAttrs a = window_attrs(ctx.attrs(), "ksize");
  if (a.window.size() != 2) ctx.fail("ksize must have 2 entries, got {}", shape_str(a.window));
  Window2D g;
  std::string err = window_2d(x[1], x[2], a.window[0], a.window[1], a, &g);
  if (!err.empty()) ctx.fail("x {}: {}", shape_str(x), err);
  err = pool_pads_inside_windows(g);
  if (!err.empty()) ctx.fail("{}", err);
  return {x[0], g.h.out, g.w.out, x[3]};
}

// input_shape with dy's batch size.
Shape batch_of(const Shape& dy, Shape shape) {
  shape[0] = dy[0];
  return shape;
}

void expect_dy(const InferContext& ctx, const Shape& dy, const Shape& want) {
  if (dy != want)
    ctx.fail("dy {} does not match the forward output {}", shape_str(dy), shape_str(want));
}

std::vector<TensorType> f32(Shape shape) { return {TensorType{DType::f32, std::move(shape)}}; }

// --- Conv2D ---

std::vector<TensorType> infer_conv2d(const InferContext& ctx) {
  expect_f32(ctx);
  ctx.expect_rank(0, 4, "x");
  ctx.expect_rank(1, 4, "filter");
  return f32(conv_output(ctx, ctx.shape(0), ctx.shape(1)));
}

std::vector<TensorType> infer_conv2d_backprop_input(const InferContext& ctx) {
  expect_f32(ctx);
  ctx.expect_rank(0, 4, "dy");
  ctx.expect_rank(1, 4, "filter");
  Shape x = batch_of(ctx.shape(0), attr_image_shape(ctx, "input_shape"));
  expect_dy(ctx, ctx.shape(0), conv_output(ctx, x, ctx.shape(1)));
  return f32(x);
}

std::vector<TensorType> infer_conv2d_backprop_filter(const InferContext& ctx) {
  expect_f32(ctx);
  ctx.expect_rank(0, 4, "x");
  ctx.expect_rank(1, 4, "dy");
  Shape w = attr_image_shape(ctx, "filter_shape");
  expect_dy(ctx, ctx.shape(1), conv_output(ctx, ctx.shape(0), w));
  return f32(w);
}

// Each output element is kh * kw * in/groups multiply-adds (filter HWIO, input 1).
double conv2d_flops(const Node& node, const std::vector<Shape>& inputs) {
  const Shape& w = inputs[1];
  return 2.0 * static_cast<double>(num_elements(node.outputs[0].shape)) *
         static_cast<double>(w[0] * w[1] * w[2]);
}

Attrs conv_attrs_of(const Attrs& attrs) { return copy_attrs(attrs, conv_attr_specs()); }

Output conv2d_node(Graph& g, Output x, Output w, const Attrs& conv, const std::string& name) {
  return g.add(op_names::kConv2D, {x, w}, conv, name);
}

Output conv2d_backprop_input(Graph& g, Output dy, Output w, const Shape& input_shape,
                             const Attrs& conv, const std::string& name) {
  Attrs a = conv;
  a.set("input_shape", input_shape);
  return g.add(op_names::kConv2DBackpropInput, {dy, w}, a, name);
}

Output conv2d_backprop_filter(Graph& g, Output x, Output dy, const Shape& filter_shape,
                              const Attrs& conv, const std::string& name) {
  Attrs a = conv;
  a.set("filter_shape", filter_shape);
  return g.add(op_names::kConv2DBackpropFilter, {x, dy}, a, name);
}

// y = conv(x, w) is bilinear, so every gradient below is another of the three conv ops.
std::vector<Output> grad_conv2d(GradContext& ctx) {
  Attrs conv = conv_attrs_of(ctx.attrs());
  Output x = ctx.input(0), w = ctx.input(1);
  return {conv2d_backprop_input(ctx.graph, ctx.grad(), w, ctx.graph.type(x).shape, conv,
                                ctx.name("input")),
          conv2d_backprop_filter(ctx.graph, x, ctx.grad(), ctx.graph.type(w).shape, conv,
                                 ctx.name("filter"))};
}

std::vector<Output> grad_conv2d_backprop_input(GradContext& ctx) {
  Attrs conv = conv_attrs_of(ctx.attrs());
  Output dy = ctx.input(0), w = ctx.input(1);
  return {conv2d_node(ctx.graph, ctx.grad(), w, conv, ctx.name("dy")),
          conv2d_backprop_filter(ctx.graph, ctx.grad(), dy, ctx.graph.type(w).shape, conv,
                                 ctx.name("filter"))};
}

std::vector<Output> grad_conv2d_backprop_filter(GradContext& ctx) {
  Attrs conv = conv_attrs_of(ctx.attrs());
  Output x = ctx.input(0), dy = ctx.input(1);
  return {conv2d_backprop_input(ctx.graph, dy, ctx.grad(), ctx.graph.type(x).shape, conv,
                                ctx.name("input")),
          conv2d_node(ctx.graph, x, ctx.grad(), conv, ctx.name("dy"))};
}

// --- MatMul ---

std::vector<TensorType> infer_matmul(const InferContext& ctx) {
  expect_f32(ctx);
  ctx.expect_rank(0, 2, "a");
  ctx.expect_rank(1, 2, "b");
  const Shape& a = ctx.shape(0);
  const Shape& b = ctx.shape(1);
  const bool ta = ctx.attrs().get_bool("transpose_a");
  const bool tb = ctx.attrs().get_bool("transpose_b");
  if ((ta ? a[0] : a[1]) != (tb ? b[1] : b[0]))
    ctx.fail("inner dimensions differ: a {}{} vs b {}{}", shape_str(a), ta ? " (transposed)" : "",
             shape_str(b), tb ? " (transposed)" : "");
  return f32({ta ? a[1] : a[0], tb ? b[0] : b[1]});
}

// Each output element is K multiply-adds (K: a's inner dimension).
double matmul_flops(const Node& node, const std::vector<Shape>& inputs) {
  const Shape& a = inputs[0];
  const int64_t k = node.attrs.get_bool("transpose_a") ? a[0] : a[1];
  return 2.0 * static_cast<double>(num_elements(node.outputs[0].shape)) * static_cast<double>(k);
}

// The gradients of y = op(a)·op(b) with op a transpose where asked, as two products made by
// `product(x, y, transpose_x, transpose_y, name)`: MatMul and BatchMatMul share this table.
template <typename Product>
std::pair<Output, Output> product_grads(bool ta, bool tb, Output a, Output b, Output dy,
                                        const std::string& na, const std::string& nb,
                                        Product product) {
  if (!ta && !tb) return {product(dy, b, false, true, na), product(a, dy, true, false, nb)};
  if (ta && !tb) return {product(b, dy, false, true, na), product(a, dy, false, false, nb)};
  if (!ta && tb) return {product(dy, b, false, false, na), product(dy, a, true, false, nb)};
  return {product(b, dy, true, true, na), product(dy, a, true, true, nb)};
}

std::vector<Output> grad_matmul(GradContext& ctx) {
  Graph& g = ctx.graph;
  auto [da, db] = product_grads(
      ctx.attrs().get_bool("transpose_a"), ctx.attrs().get_bool("transpose_b"), ctx.input(0),
      ctx.input(1), ctx.grad(), ctx.name("a"), ctx.name("b"),
      [&](Output x, Output y, bool tx, bool ty, const std::string& name) {
        return ops::matmul(g, x, y, tx, ty, name);
      });
  return {da, db};
}

// --- BatchMatMul ---

std::vector<TensorType> infer_batch_matmul(const InferContext& ctx) {
  expect_f32(ctx);
  const Shape& a = ctx.shape(0);
  const Shape& b = ctx.shape(1);
  if (a.size() < 2 || b.size() < 2)
    ctx.fail("a and b need rank >= 2, got {} and {}", shape_str(a), shape_str(b));
  const bool ta = ctx.attrs().get_bool("transpose_a");
  const bool tb = ctx.attrs().get_bool("transpose_b");
  const size_t ra = a.size(), rb = b.size();
  const int64_t m = ta ? a[ra - 1] : a[ra - 2], k = ta ? a[ra - 2] : a[ra - 1];
  const int64_t kb = tb ? b[rb - 1] : b[rb - 2], n = tb ? b[rb - 2] : b[rb - 1];
  if (k != kb)
    ctx.fail("inner dimensions differ: a {}{} vs b {}{}", shape_str(a), ta ? " (transposed)" : "",
             shape_str(b), tb ? " (transposed)" : "");
  const size_t batch_rank = std::max(ra, rb) - 2;
  Shape out(batch_rank + 2, 1);
  for (size_t i = 0; i < batch_rank; ++i) {
    const int64_t da = i + ra - 2 >= batch_rank ? a[i + ra - 2 - batch_rank] : 1;
    const int64_t db = i + rb - 2 >= batch_rank ? b[i + rb - 2 - batch_rank] : 1;
    if (da != db && da != 1 && db != 1)
      ctx.fail("batch dimensions do not broadcast: a {} vs b {}", shape_str(a), shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  out[batch_rank] = m;
  out[batch_rank + 1] = n;
  return f32(out);
}

double batch_matmul_flops(const Node& node, const std::vector<Shape>& inputs) {
  const Shape& a = inputs[0];
  const int64_t k = node.attrs.get_bool("transpose_a") ? a[a.size() - 2] : a.back();
  return 2.0 * static_cast<double>(num_elements(node.outputs[0].shape)) * static_cast<double>(k);
}

// As for MatMul, then summed over the batch dimensions an operand was broadcast along.
std::vector<Output> grad_batch_matmul(GradContext& ctx) {
  Graph& g = ctx.graph;
  Output a = ctx.input(0), b = ctx.input(1);
  auto [da, db] = product_grads(
      ctx.attrs().get_bool("transpose_a"), ctx.attrs().get_bool("transpose_b"), a, b, ctx.grad(),
      ctx.name("a_full"), ctx.name("b_full"),
      [&](Output x, Output y, bool tx, bool ty, const std::string& name) {
        return ops::batch_matmul(g, x, y, tx, ty, name);
      });
  return {ops::sum_to_like(g, da, a, ctx.name("a")), ops::sum_to_like(g, db, b, ctx.name("b"))};
}

// --- BiasAdd ---

std::vector<TensorType> infer_bias_add(const InferContext& ctx) {
  expect_f32(ctx);
  ctx.expect_rank(1, 1, "bias");
  const Shape& x = ctx.shape(0);
  if (x.empty()) ctx.fail("x must have rank >= 1, got a scalar");
  if (ctx.shape(1)[0] != x.back())
    ctx.fail("bias {} does not match the last dimension of x {}", shape_str(ctx.shape(1)),
             shape_str(x));
  return f32(x);
}

std::vector<TensorType> infer_bias_add_grad(const InferContext& ctx) {
  expect_f32(ctx);
  if (ctx.shape(0).empty()) ctx.fail("dy must have rank >= 1, got a scalar");
  return f32({ctx.shape(0).back()});
}

// --- pooling ---

std::vector<TensorType> infer_pool(const InferContext& ctx) {
  expect_f32(ctx);
  ctx.expect_rank(0, 4, "x");
  return f32(pool_output(ctx, ctx.shape(0)));
}

// Max pooling also takes u8 and i8 images (ONNX): the maximum needs no arithmetic.
std::vector<TensorType> infer_max_pool(const InferContext& ctx) {
  const DType dtype = ctx.dtype(0);
  if (dtype != DType::f32 && dtype != DType::u8 && dtype != DType::i8)
    ctx.fail("x is {}; expected f32, u8 or i8", dtype_name(dtype));
  ctx.expect_rank(0, 4, "x");
  return {TensorType{dtype, pool_output(ctx, ctx.shape(0))}};
}

// y as MaxPool, and where each maximum was: an i64 flat index into x in NHWC order, or with
// nchw_index in the order of x's NCHW form, as ONNX's MaxPool Indices output counts (each
// image plane column-major with column_major, ONNX's storage_order=1).
std::vector<TensorType> infer_max_pool_with_argmax(const InferContext& ctx) {
  std::vector<TensorType> y = infer_max_pool(ctx);
  y.push_back(TensorType{DType::i64, y[0].shape});
  return y;
}

std::vector<TensorType> infer_max_pool_grad(const InferContext& ctx) {
  expect_f32(ctx);
  ctx.expect_rank(0, 4, "x");
  Shape y = pool_output(ctx, ctx.shape(0));
  if (ctx.shape(1) != y)
    ctx.fail("y {} does not match the pooled x {}", shape_str(ctx.shape(1)), shape_str(y));
  expect_dy(ctx, ctx.shape(2), y);
  return f32(ctx.shape(0));
}

// Window positions are counted in a u8, whose largest value says "no position".
void expect_window_argmax_fits(const InferContext& ctx, const Shape& x) {
  const Window2D g = pool_window(ctx.attrs(), x);
  if (g.h.k * g.w.k > kNoWindowArgmax)
    ctx.fail("a {}x{} window has more than {} positions", g.h.k, g.w.k, int{kNoWindowArgmax});
}

std::vector<TensorType> infer_max_pool_window_argmax(const InferContext& ctx) {
  expect_f32(ctx);
  ctx.expect_rank(0, 4, "x");
  const Shape y = pool_output(ctx, ctx.shape(0));
  expect_window_argmax_fits(ctx, ctx.shape(0));
  return {TensorType{DType::f32, y}, TensorType{DType::u8, y}};
}

std::vector<TensorType> infer_max_pool_grad_window_argmax(const InferContext& ctx) {
  ctx.expect_dtype(0, DType::f32, "dy");
  ctx.expect_dtype(1, DType::u8, "argmax");
  ctx.expect_rank(0, 4, "dy");
  const Shape x = batch_of(ctx.shape(0), attr_image_shape(ctx, "input_shape"));
  expect_dy(ctx, ctx.shape(0), pool_output(ctx, x));
  if (ctx.shape(1) != ctx.shape(0))
    ctx.fail("argmax {} does not match dy {}", shape_str(ctx.shape(1)), shape_str(ctx.shape(0)));
  expect_window_argmax_fits(ctx, x);
  return f32(x);
}

std::vector<TensorType> infer_avg_pool_grad(const InferContext& ctx) {
  expect_f32(ctx);
  ctx.expect_rank(0, 4, "dy");
  Shape x = batch_of(ctx.shape(0), attr_image_shape(ctx, "input_shape"));
  expect_dy(ctx, ctx.shape(0), pool_output(ctx, x));
  return f32(x);
}

std::vector<TensorType> infer_global_avg_pool(const InferContext& ctx) {
  expect_f32(ctx);
  ctx.expect_rank(0, 4, "x");
  return f32({ctx.shape(0)[0], ctx.shape(0)[3]});
}

std::vector<TensorType> infer_global_avg_pool_grad(const InferContext& ctx) {
  expect_f32(ctx);
  ctx.expect_rank(0, 2, "dy");
  Shape x = batch_of(ctx.shape(0), attr_image_shape(ctx, "input_shape"));
  if (ctx.shape(0)[1] != x[3])
    ctx.fail("dy {} does not match the channels of input_shape {}", shape_str(ctx.shape(0)),
             shape_str(x));
  return f32(x);
}

std::vector<AttrSpec> avg_pool_attr_specs() {
  return with(pool_attr_specs(), {{"count_include_pad", AttrKind::Bool, AttrValue{false}}});
}

std::vector<Output> grad_avg_pool(GradContext& ctx) {
  Attrs a = copy_attrs(ctx.attrs(), avg_pool_attr_specs());
  a.set("input_shape", ctx.graph.type(ctx.input(0)).shape);
  return {ctx.graph.add(op_names::kAvgPoolGrad, {ctx.grad()}, a, ctx.name("x"))};
}

}  // namespace

void register_nn_ops(OpRegistry& r) {
  const AttrValue no{false};
  r.add(OpDef{.name = op_names::kConv2D,
              .inputs = {"x", "filter"},
              .attrs = conv_attr_specs(),
              .infer = infer_conv2d,
              .grad = grad_conv2d,
              .weights = {{.input = 1, .channel_axis = -1}},  // HWIO: output channels last
              .flops = conv2d_flops});
  r.add(OpDef{.name = op_names::kConv2DBackpropInput,
              .inputs = {"dy", "filter"},
              .attrs = with(conv_attr_specs(), {{"input_shape", AttrKind::Ints, std::nullopt}}),
              .infer = infer_conv2d_backprop_input,
              .grad = grad_conv2d_backprop_input});
  r.add(OpDef{.name = op_names::kConv2DBackpropFilter,
              .inputs = {"x", "dy"},
              .attrs = with(conv_attr_specs(), {{"filter_shape", AttrKind::Ints, std::nullopt}}),
              .infer = infer_conv2d_backprop_filter,
              .grad = grad_conv2d_backprop_filter});
  r.add(OpDef{.name = op_names::kMatMul,
              .inputs = {"a", "b"},
              .attrs = {{"transpose_a", AttrKind::Bool, no}, {"transpose_b", AttrKind::Bool, no}},
              .infer = infer_matmul,
              .grad = grad_matmul,
              // b [K, N]: output channels last, first when stored transposed.
              .weights = {{.input = 1, .channel_axis = -1, .transposed_by = "transpose_b"}},
              .flops = matmul_flops});
  r.add(OpDef{.name = op_names::kBatchMatMul,
              .inputs = {"a", "b"},
              .attrs = {{"transpose_a", AttrKind::Bool, no}, {"transpose_b", AttrKind::Bool, no}},
              .infer = infer_batch_matmul,
              .grad = grad_batch_matmul,
              .flops = batch_matmul_flops});
  r.add(OpDef{.name = op_names::kBiasAdd,
              .inputs = {"x", "bias"},
              .infer = infer_bias_add,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                return {ctx.grad(),
                        ctx.graph.add(op_names::kBiasAddGrad, {ctx.grad()}, {}, ctx.name("bias"))};
              }});
  r.add(OpDef{.name = op_names::kBiasAddGrad, .inputs = {"dy"}, .infer = infer_bias_add_grad});
  // Relu(BiasAdd(x, bias)) in one pass, made by transforms/training_passes.h in training graphs
  // after their gradients (so it has none of its own).
  r.add(OpDef{.name = op_names::kBiasAddRelu, .inputs = {"x", "bias"}, .infer = infer_bias_add});
  r.add(OpDef{.name = op_names::kMaxPool,
              .inputs = {"x"},
              .attrs = pool_attr_specs(),
              .infer = infer_max_pool,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                return {ctx.graph.add(op_names::kMaxPoolGrad,
                                      {ctx.input(0), ctx.output(0), ctx.grad()},
                                      copy_attrs(ctx.attrs(), pool_attr_specs()), ctx.name("x"))};
              }});
  r.add(OpDef{
      .name = op_names::kMaxPoolWithArgmax,
      .inputs = {"x"},
      .attrs = with(pool_attr_specs(),
                    {{"nchw_index", AttrKind::Bool, no}, {"column_major", AttrKind::Bool, no}}),
      .infer = infer_max_pool_with_argmax,
      .grad = [](GradContext& ctx) -> std::vector<Output> {
        return {ctx.graph.add(op_names::kMaxPoolGrad, {ctx.input(0), ctx.output(0), ctx.grad(0)},
                              copy_attrs(ctx.attrs(), pool_attr_specs()), ctx.name("x"))};
      }});
  // relu: x is a Relu's output and that Relu's gradient is folded in (dx zero where x is not
  // positive), as transforms/training_passes.h writes it for training graphs.
  r.add(OpDef{.name = op_names::kMaxPoolGrad,
              .inputs = {"x", "y", "dy"},
              .attrs = with(pool_attr_specs(), {{"relu", AttrKind::Bool, no}}),
              .infer = infer_max_pool_grad});
  // MaxPool and MaxPoolGrad (relu as there) as transforms/training_passes.h pairs them in
  // training graphs, after their gradients (so they have none of their own): the forward pass
  // also writes where each window's first maximum is, and the gradient routes dy by that alone.
  r.add(OpDef{.name = op_names::kMaxPoolWindowArgmax,
              .inputs = {"x"},
              .attrs = with(pool_attr_specs(), {{"relu", AttrKind::Bool, no}}),
              .infer = infer_max_pool_window_argmax});
  r.add(OpDef{.name = op_names::kMaxPoolGradWindowArgmax,
              .inputs = {"dy", "argmax"},
              .attrs = with(pool_attr_specs(), {{"input_shape", AttrKind::Ints, std::nullopt}}),
              .infer = infer_max_pool_grad_window_argmax});
  r.add(OpDef{.name = op_names::kAvgPool,
              .inputs = {"x"},
              .attrs = avg_pool_attr_specs(),
              .infer = infer_pool,
              .grad = grad_avg_pool});
  r.add(OpDef{.name = op_names::kAvgPoolGrad,
              .inputs = {"dy"},
              .attrs = with(avg_pool_attr_specs(), {{"input_shape", AttrKind::Ints, std::nullopt}}),
              .infer = infer_avg_pool_grad,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                // AvgPoolGrad is the adjoint of the linear AvgPool.
                return {ctx.graph.add(op_names::kAvgPool, {ctx.grad()},
                                      copy_attrs(ctx.attrs(), avg_pool_attr_specs()),
                                      ctx.name("dy"))};
              }});
  r.add(OpDef{.name = op_names::kGlobalAvgPool,
              .inputs = {"x"},
              .infer = infer_global_avg_pool,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                return {ctx.graph.add(op_names::kGlobalAvgPoolGrad, {ctx.grad()},
                                      {{"input_shape", ctx.graph.type(ctx.input(0)).shape}},
                                      ctx.name("x"))};
              }});
  r.add(OpDef{.name = op_names::kGlobalAvgPoolGrad,
              .inputs = {"dy"},
              .attrs = {{"input_shape", AttrKind::Ints, std::nullopt}},
              .infer = infer_global_avg_pool_grad,
              .grad = [](GradContext& ctx) -> std::vector<Output> {
                return {ctx.graph.add(op_names::kGlobalAvgPool, {ctx.grad()}, {}, ctx.name("dy"))};
              }});
}

namespace ops {

Attrs pool2d_attrs(const PoolOptions& o) {
  return {{"ksize", o.ksize}, {"strides", o.strides}, {"padding", o.padding}, {"pads", o.pads}};
}

Attrs conv2d_attrs(const Conv2DOptions& o) {
  return {{"strides", o.strides},
          {"padding", o.padding},
          {"pads", o.pads},
          {"dilations", o.dilations},
          {"groups", o.groups}};
}

Output conv2d(Graph& g, Output x, Output w, const Conv2DOptions& o, const std::string& name) {
  return g.add(op_names::kConv2D, {x, w}, conv2d_attrs(o), name);
}

Output max_pool(Graph& g, Output x, const PoolOptions& o, const std::string& name) {
  return g.add(op_names::kMaxPool, {x}, pool2d_attrs(o), name);
}

Output avg_pool(Graph& g, Output x, const PoolOptions& o, const std::string& name) {
  Attrs a = pool2d_attrs(o);
  a.set("count_include_pad", o.count_include_pad);
  return g.add(op_names::kAvgPool, {x}, a, name);
}

Output global_avg_pool(Graph& g, Output x, const std::string& name) {
  return g.add(op_names::kGlobalAvgPool, {x}, {}, name);
}

Output matmul(Graph& g, Output a, Output b, bool transpose_a, bool transpose_b,
              const std::string& name) {
  return g.add(op_names::kMatMul, {a, b},
               {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}}, name);
}

Output batch_matmul(Graph& g, Output a, Output b, bool transpose_a, bool transpose_b,
                    const std::string& name) {
  return g.add(op_names::kBatchMatMul, {a, b},
               {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}}, name);
}

Output bias_add(Graph& g, Output x, Output b, const std::string& name) {
  return g.add(op_names::kBiasAdd, {x, b}, {}, name);
}

}  // namespace ops
}  // namespace sf
