// The Deep-MNIST layers at batch 64 (28x28x1 -> conv5x5x32 SAME -> maxpool2 -> conv5x5x64 SAME
// -> maxpool2 -> fc 3136x1024 -> fc 1024x10): each dense kernel forward and backward, oneDNN,
// float_loops (pooling, conv1's filter gradient, bias) and reference, plus one whole training
// step (forward and all weight gradients).
//
//   kernel_bench --benchmark_filter=onednn   # the reference kernels take seconds per call
//
// The pruned-model cases (sparse/...) time the inference nodes with frozen weights of a given
// sparsity, oneDNN's dense kernel against the sparse one, to find the crossovers in
// kernels/sparse/sparse_kernels.h; sparse/<layer>/sparse_only/block<R>/<percent> prune whole
// blocks of R adjacent outputs (prune --block R), which the MatMul kernel runs as blocks:
//
//   OMP_NUM_THREADS=1 kernel_bench --benchmark_filter='^sparse/' --benchmark_repetitions=5
//
// (one thread and the best CPU time of the repetitions when other jobs share the cores; with
// OMP_NUM_THREADS=2 for the figures of an idle machine). sparse_only forces the sparse path.
// sparse_int8/... do the same for fc1 and conv2 quantized (QuantizedMatMulRequantized and
// QuantizedConv2DRequantized, frozen i8 weights, calibrated params): oneDNN's dense int8 kernel
// against the sparse int8 one, for the crossovers in kernels/sparse/int8_sparse_*_kernel.cc.
#include <benchmark/benchmark.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autodiff/gradients.h"
#include "graph/graph.h"
#include "ops/ops.h"
#include "ops/quantized_ops.h"
#include "runtime/session.h"

namespace sf {
namespace {

constexpr int64_t kBatch = 64;

Tensor random_tensor(Shape shape, uint32_t seed) {
  Tensor t(DType::f32, std::move(shape));
  uint32_t state = seed * 2654435761u + 1;
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    p[i] = static_cast<float>(state >> 8) / static_cast<float>(1 << 24) - 0.5f;
  }
  return t;
}

using Build = std::function<Output(Graph&, const std::vector<Output>&)>;

// Times one node built from placeholders of the given shapes, with kernels of `impl`.
void run_node(benchmark::State& state, const std::string& impl, const std::vector<Shape>& inputs,
              const Build& build) {
  Graph g;
  std::vector<Output> in;
  Feeds feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in.push_back(ops::placeholder(g, DType::f32, inputs[i]));
    feeds.emplace_back(in.back(), random_tensor(inputs[i], static_cast<uint32_t>(i + 1)));
  }
  Output y = build(g, in);
  Session session(g, SessionOptions{.kernel_impl = impl});
  session.run(feeds, {y});  // plans and creates the kernel
  if (session.kernel_choices()[g.node(y.node).name] != impl)
    state.SkipWithError(("no " + impl + " kernel for this node").c_str());
  for (auto _ : state) benchmark::DoNotOptimize(session.run(feeds, {y}));
}

const ops::Conv2DOptions kSame{.padding = "SAME"};

Attrs same_conv_attrs() { return {{"padding", std::string("SAME")}}; }

Build conv_forward() {
  return
      [](Graph& g, const std::vector<Output>& in) { return ops::conv2d(g, in[0], in[1], kSame); };
}
Build conv_backprop_input(Shape x) {
  return [x](Graph& g, const std::vector<Output>& in) {
    Attrs a = same_conv_attrs();
    a.set("input_shape", x);
    return g.add("Conv2DBackpropInput", {in[0], in[1]}, a);
  };
}
Build conv_backprop_filter(Shape w) {
  return [w](Graph& g, const std::vector<Output>& in) {
    Attrs a = same_conv_attrs();
    a.set("filter_shape", w);
    return g.add("Conv2DBackpropFilter", {in[0], in[1]}, a);
  };
}
Build matmul(bool ta, bool tb) {
  return
      [=](Graph& g, const std::vector<Output>& in) { return ops::matmul(g, in[0], in[1], ta, tb); };
}
Build max_pool() {
  return [](Graph& g, const std::vector<Output>& in) { return ops::max_pool(g, in[0]); };
}
Build max_pool_grad() {
  return [](Graph& g, const std::vector<Output>& in) {
    return g.add("MaxPoolGrad", {in[0], ops::max_pool(g, in[0]), in[1]}, {});
  };
}

Build bias_add() {
  return [](Graph& g, const std::vector<Output>& in) { return ops::bias_add(g, in[0], in[1]); };
}
Build bias_add_grad() {
  return [](Graph& g, const std::vector<Output>& in) { return g.add("BiasAddGrad", {in[0]}); };
}

const Shape kX1{kBatch, 28, 28, 1}, kW1{5, 5, 1, 32}, kY1{kBatch, 28, 28, 32};
const Shape kX2{kBatch, 14, 14, 32}, kW2{5, 5, 32, 64}, kY2{kBatch, 14, 14, 64};
const Shape kP2{kBatch, 7, 7, 64};

// name, input shapes, graph. MaxPoolGrad's input 1 is dy (y is computed in the graph).
struct Case {
  const char* name;
  std::vector<Shape> inputs;
  Build build;
};

std::vector<Case> cases() {
  return {
      {"conv1/forward", {kX1, kW1}, conv_forward()},
      {"conv1/backprop_input", {kY1, kW1}, conv_backprop_input(kX1)},
      {"conv1/backprop_filter", {kX1, kY1}, conv_backprop_filter(kW1)},
      {"conv2/forward", {kX2, kW2}, conv_forward()},
      {"conv2/backprop_input", {kY2, kW2}, conv_backprop_input(kX2)},
      {"conv2/backprop_filter", {kX2, kY2}, conv_backprop_filter(kW2)},
      {"fc1/forward", {{kBatch, 3136}, {3136, 1024}}, matmul(false, false)},
      {"fc1/backprop_a", {{kBatch, 1024}, {3136, 1024}}, matmul(false, true)},
      {"fc1/backprop_b", {{kBatch, 3136}, {kBatch, 1024}}, matmul(true, false)},
      {"fc2/forward", {{kBatch, 1024}, {1024, 10}}, matmul(false, false)},
      {"pool1/forward", {kY1}, max_pool()},
      {"pool1/backprop", {kY1, {kBatch, 14, 14, 32}}, max_pool_grad()},
      {"pool2/forward", {kY2}, max_pool()},
      {"pool2/backprop", {kY2, kP2}, max_pool_grad()},
      {"bias1/forward", {kY1, {32}}, bias_add()},
      {"bias1/backprop", {kY1}, bias_add_grad()},
  };
}

// One training step of the whole network: forward, loss and the gradients of all weights.
void train_step(benchmark::State& state) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {kBatch, 28, 28, 1}, "x");
  Output labels = ops::placeholder(g, DType::i32, {kBatch}, "labels");
  std::vector<Output> weights;
  auto var = [&](Shape s, const std::string& name) {
    weights.push_back(ops::placeholder(g, DType::f32, s, name));
    return weights.back();
  };
  Output h =
      ops::relu(g, ops::bias_add(g, ops::conv2d(g, x, var(kW1, "w1"), kSame), var({32}, "b1")));
  h = ops::max_pool(g, h);
  h = ops::relu(g, ops::bias_add(g, ops::conv2d(g, h, var(kW2, "w2"), kSame), var({64}, "b2")));
  h = ops::reshape(g, ops::max_pool(g, h), {kBatch, 3136});
  h = ops::relu(g, ops::bias_add(g, ops::matmul(g, h, var({3136, 1024}, "w3")), var({1024}, "b3")));
  Output logits = ops::bias_add(g, ops::matmul(g, h, var({1024, 10}, "w4")), var({10}, "b4"));
  Output loss = ops::softmax_cross_entropy(g, logits, labels);
  std::vector<Output> fetches = gradients(g, loss, weights);
  fetches.push_back(loss);

  Feeds feeds{{x, random_tensor({kBatch, 28, 28, 1}, 1)}};
  Tensor label_values(DType::i32, {kBatch});
  for (int64_t i = 0; i < kBatch; ++i)
    label_values.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  feeds.emplace_back(labels, label_values);
  uint32_t seed = 2;
  for (const Output& w : weights) {
    Tensor value = random_tensor(g.type(w).shape, seed++);
    for (int64_t i = 0; i < value.numel(); ++i) value.data<float>()[i] *= 0.1f;
    feeds.emplace_back(w, value);
  }
  Session session(g);
  session.run(feeds, fetches, true);
  for (auto _ : state) benchmark::DoNotOptimize(session.run(feeds, fetches, true));
  state.counters["images/s"] = benchmark::Counter(static_cast<double>(kBatch),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

// A pruned weight tensor: `sparsity` of its blocks of `block` adjacent entries along the last
// axis (chosen by a hash) exactly zero; block 1 prunes single entries.
Tensor pruned_tensor(const Shape& shape, double sparsity, uint32_t seed, int64_t block = 1) {
  Tensor t = random_tensor(shape, seed);
  float* p = t.data<float>();
  const int64_t row = shape.back();
  const int64_t per_row = (row + block - 1) / block;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint32_t h =
        static_cast<uint32_t>(i / row * per_row + i % row / block) * 2654435761u ^ seed;
    if (static_cast<double>((h * 2246822519u) >> 8) / static_cast<double>(1 << 24) < sparsity)
      p[i] = 0.0f;
  }
  return t;
}

using FrozenBuild = std::function<Output(Graph&, Output x, Output weights, Output bias)>;

// Times one inference node whose weights are a Const (as in a frozen, pruned model).
void run_frozen_node(benchmark::State& state, const std::string& impl, const Shape& x_shape,
                     const Shape& w_shape, double sparsity, int64_t block,
                     const FrozenBuild& build) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, x_shape);
  Output w = ops::constant(g, pruned_tensor(w_shape, sparsity, 2, block));
  Output bias = ops::constant(g, random_tensor({w_shape.back()}, 3));
  Output y = build(g, x, w, bias);
  Feeds feeds{{x, random_tensor(x_shape, 1)}};
  Session session(g, SessionOptions{.kernel_impl = impl});
  session.run(feeds, {y});  // plans, creates the kernel and prepares the weights
  if (session.kernel_choices()[g.node(y.node).name] != impl)
    state.SkipWithError(("no " + impl + " kernel for this node").c_str());
  for (auto _ : state) benchmark::DoNotOptimize(session.run(feeds, {y}));
}

FrozenBuild fused_matmul_relu() {
  return [](Graph& g, Output x, Output w, Output bias) {
    return g.add("FusedMatMul", {x, w, bias}, {{"activation", std::string("relu")}});
  };
}

FrozenBuild fused_conv_relu() {
  return [](Graph& g, Output x, Output w, Output bias) {
    Attrs a = same_conv_attrs();
    a.set("activation", std::string("relu"));
    return g.add("FusedConv2D", {x, w, bias}, a);
  };
}

// fc1 (3136 -> 1024) at batch 1 and 64, conv2 of Deep-MNIST at batch 1 and 64, and 1x1 convs
// (which "sparse" leaves to oneDNN, kernels/sparse/sparse_kernels.h): the dense kernel
// and the sparse one (forced, so that it runs at every sparsity); for fc1 also block-pruned
// weights.
void register_sparse_cases() {
  struct Layer {
    const char* name;
    Shape x, w;
    FrozenBuild build;
  };
  auto add = [](const Layer& layer, const std::string& impl, int64_t block, int percent) {
    const std::string name = std::string("sparse/") + layer.name + "/" + impl +
                             (block > 1 ? "/block" + std::to_string(block) : "") + "/" +
                             std::to_string(percent);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [layer, impl, block, percent](benchmark::State& state) {
                                   run_frozen_node(state, impl, layer.x, layer.w, percent / 100.0,
                                                   block, layer.build);
                                 })
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  };
  const std::vector<Layer> layers = {
      {"fc1_batch1", {1, 3136}, {3136, 1024}, fused_matmul_relu()},
      {"fc1_batch64", {kBatch, 3136}, {3136, 1024}, fused_matmul_relu()},
      {"conv2_batch1", {1, 14, 14, 32}, kW2, fused_conv_relu()},
      {"conv2_batch64", kX2, kW2, fused_conv_relu()},
      // 1x1 convs: resnet-mnist's restore layer, and a wider one (MobileNetV2's 14x14 stage).
      {"pointwise16x32_batch1", {1, 14, 14, 16}, {1, 1, 16, 32}, fused_conv_relu()},
      {"pointwise16x32_batch64", {kBatch, 14, 14, 16}, {1, 1, 16, 32}, fused_conv_relu()},
      {"pointwise64x384_batch1", {1, 14, 14, 64}, {1, 1, 64, 384}, fused_conv_relu()},
  };
  for (const Layer& layer : layers) {
    // The dense kernel does not care about zeros: one sparsity is enough.
    add(layer, "onednn", 1, 90);
    for (int percent : {50, 70, 80, 90, 95, 98}) add(layer, "sparse_only", 1, percent);
  }
  for (const Layer& layer : {layers[0], layers[1]})
    for (int64_t block : {16, 8, 4})
      for (int percent : {30, 50, 70, 80, 90, 95}) add(layer, "sparse_only", block, percent);
}

// pruned_tensor quantized to i8 with one scale, as `quantize --mode eightbit` does: zeros stay
// zero and nothing else becomes zero.
Tensor pruned_i8_tensor(const Shape& shape, double sparsity, uint32_t seed, int64_t block) {
  const Tensor f = pruned_tensor(shape, sparsity, seed, block);
  Tensor q(DType::i8, shape);
  for (int64_t i = 0; i < f.numel(); ++i) {
    const float v = f.data<float>()[i];
    const long code = std::lround(v * 254.0f);
    q.data<int8_t>()[i] = static_cast<int8_t>(v == 0.0f ? 0 : code != 0 ? code : v > 0 ? 1 : -1);
  }
  return q;
}

// Builds a Requantized int8 node (relu, output params [0.05, 0]) from its five other inputs.
using FrozenInt8Build =
    std::function<Output(Graph&, const ops::QuantizedConvInputs& in, Output out_params)>;

// Times one int8 node of a u8 input and frozen, pruned i8 weights with Const params, as in a
// calibrated, frozen model.
void run_int8_frozen_node(benchmark::State& state, const std::string& impl, const Shape& x_shape,
                          const Shape& w_shape, double sparsity, int64_t block,
                          const FrozenInt8Build& build) {
  Graph g;
  Output x = ops::placeholder(g, DType::u8, x_shape);
  auto params = [&](float scale, float zero_point) {
    return ops::constant(g, Tensor::from_vector<float>({2}, {scale, zero_point}));
  };
  const ops::QuantizedConvInputs in{x, params(0.02f, 0.0f),
                                    ops::constant(g, pruned_i8_tensor(w_shape, sparsity, 2, block)),
                                    ops::constant(g, Tensor::from_vector<float>({1}, {0.002f})),
                                    ops::constant(g, random_tensor({w_shape.back()}, 3))};
  Output y = build(g, in, params(0.05f, 0.0f));
  Tensor x_value(DType::u8, x_shape);
  for (int64_t i = 0; i < x_value.numel(); ++i)
    x_value.data<uint8_t>()[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  Feeds feeds{{x, x_value}};
  Session session(g, SessionOptions{.kernel_impl = impl});
  session.run(feeds, {y});  // plans, creates the kernel and prepares the weights
  if (session.kernel_choices()[g.node(y.node).name] != impl)
    state.SkipWithError(("no " + impl + " kernel for this node").c_str());
  for (auto _ : state) benchmark::DoNotOptimize(session.run(feeds, {y}));
}

// fc1 (QuantizedMatMulRequantized, 3136 -> 1024) and conv2 (QuantizedConv2DRequantized,
// 14x14x32 by 5x5x32x64, SAME) at batch 1 and 64: the dense kernel at 90%,
// the sparse one forced at each sparsity, unstructured and in blocks of 16 outputs.
void register_sparse_int8_cases() {
  struct Layer {
    std::string name;
    Shape x, w;
    FrozenInt8Build build;
  };
  const FrozenInt8Build matmul = [](Graph& g, const ops::QuantizedConvInputs& in,
                                    Output out_params) {
    return ops::quantized_matmul_requantized(g, in, out_params, Activation::Relu);
  };
  const FrozenInt8Build conv = [](Graph& g, const ops::QuantizedConvInputs& in, Output out_params) {
    ops::Conv2DOptions same;
    same.padding = "SAME";
    return ops::quantized_conv2d_requantized(g, in, out_params, same, Activation::Relu);
  };
  auto add = [](const Layer& layer, const std::string& impl, int64_t block, int percent) {
    const std::string name = "sparse_int8/" + layer.name + "/" + impl +
                             (block > 1 ? "/block" + std::to_string(block) : "") + "/" +
                             std::to_string(percent);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [layer, impl, block, percent](benchmark::State& state) {
                                   run_int8_frozen_node(state, impl, layer.x, layer.w,
                                                        percent / 100.0, block, layer.build);
                                 })
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  };
  const std::vector<Layer> layers = {
      {"fc1_batch1", {1, 3136}, {3136, 1024}, matmul},
      {"fc1_batch" + std::to_string(kBatch), {kBatch, 3136}, {3136, 1024}, matmul},
      {"conv2_batch1", {1, 14, 14, 32}, kW2, conv},
      {"conv2_batch" + std::to_string(kBatch), kX2, kW2, conv},
      {"pointwise64x384_batch1", {1, 14, 14, 64}, {1, 1, 64, 384}, conv}};
  for (const Layer& layer : layers) {
    add(layer, "onednn", 1, 90);
    for (int percent : {70, 80, 90, 95, 98}) add(layer, "sparse_only", 1, percent);
    for (int percent : {30, 50, 70, 80, 90, 95}) add(layer, "sparse_only", 16, percent);
  }
}

int register_all() {
  register_sparse_cases();
  register_sparse_int8_cases();
  for (const char* impl : {"onednn", "float_loops", "reference"})
    for (const Case& c : cases()) {
      auto* b = benchmark::RegisterBenchmark(
          (std::string(c.name) + "/" + impl).c_str(),
          [c, impl](benchmark::State& state) { run_node(state, impl, c.inputs, c.build); });
      b->Unit(benchmark::kMillisecond)->UseRealTime();
      if (std::string(impl) == "reference") b->Iterations(2);
    }
  benchmark::RegisterBenchmark("deep_mnist/train_step/onednn", train_step)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  return 0;
}

const int registered = register_all();

}  // namespace
}  // namespace sf
