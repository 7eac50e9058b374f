// Binary and ternary layers (`train --binarize`): the Deep-MNIST conv2 (14x14x32, 5x5x32x64
// SAME) and fc1 (3136 -> 1024) at batch 1 and 64, with frozen binary weights, as the binary
// kernels run them (XNOR on +-1 inputs; XNOR on packed sign bits, as the execution pass
// pack_binary_activations makes the layers; BinaryConnect on float inputs; ternary XNOR), next
// to oneDNN's fp32 and int8 kernels on the same layer, and the machine's measured ceiling; and
// conv2's input made by MaxPool + BinarizeActivation vs MaxPoolSignBits:
//
//   OMP_NUM_THREADS=1 build/release/bench/binary_kernel_bench --benchmark_repetitions=3
//
// Each binary case reports bit_MACs/s (one multiply-accumulate of a 1-bit weight and a 1-bit
// activation: batch x outputs x K) and its fraction of binary/ceiling, which runs a
// register-resident XOR + VPOPCNTDQ loop on one core (bench/xor_popcount_ceiling_avx512.cc).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "codec/binary_weights.h"
#include "cpu/cpu_features.h"
#include "graph/graph.h"
#include "ops/binary_ops.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/quantized_ops.h"
#include "runtime/session.h"
#if defined(__x86_64__)
#include "xor_popcount_ceiling.h"
#endif

namespace sf {
namespace {

Tensor random_tensor(Shape shape, uint32_t seed, bool signs = false) {
  Tensor t(DType::f32, std::move(shape));
  uint32_t state = seed * 2654435761u + 1;
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    const float v = static_cast<float>(state >> 8) / static_cast<float>(1 << 24) - 0.5f;
    p[i] = signs ? (v > 0 ? 1.0f : -1.0f) : v;
  }
  return t;
}

// Bit-MACs per second of one core's register-resident XOR + popcount loop (0: no VPOPCNTDQ).
double ceiling_bit_macs_per_second() {
#if defined(__x86_64__)
  if (!cpu_features().avx512f || !cpu_features().avx512_vpopcntdq) return 0.0;
  static const double measured = [] {
    constexpr int64_t kIterations = int64_t{1} << 26;
    double best = 0.0;
    for (int round = 0; round < 3; ++round) {
      const auto start = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(bench::xor_popcount_ceiling_avx512(kIterations, 7));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, static_cast<double>(kIterations * bench::kCeilingBitMacsPerIteration) / s);
    }
    return best;
  }();
  return measured;
#else
  return 0.0;
#endif
}

void ceiling(benchmark::State& state) {
#if defined(__x86_64__)
  if (!cpu_features().avx512f || !cpu_features().avx512_vpopcntdq) {
    state.SkipWithError("this CPU has no AVX-512 VPOPCNTDQ");
    return;
  }
  constexpr int64_t kIterations = int64_t{1} << 24;
  for (auto _ : state) benchmark::DoNotOptimize(bench::xor_popcount_ceiling_avx512(kIterations, 7));
  state.counters["bit_MACs/s"] = benchmark::Counter(
      static_cast<double>(kIterations * bench::kCeilingBitMacsPerIteration),
      benchmark::Counter::kIsIterationInvariantRate);
#else
  state.SkipWithError("the ceiling probe is x86-64 AVX-512 only");
#endif
}

struct Layer {
  std::string name;
  Shape x, w;
  bool conv;
};

// xnor: +-1 floats in, packed by the kernel; xnor_bits: packed sign bits in (XnorConv2D /
// XnorMatMul, what the execution pass makes the layer when its producer writes the bits).
enum class Kind { xnor, xnor_bits, binary_weights, ternary_xnor, fp32, int8 };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::xnor: return "xnor";
    case Kind::xnor_bits: return "xnor_bits";
    case Kind::binary_weights: return "binary_weights";
    case Kind::ternary_xnor: return "ternary_xnor";
    case Kind::fp32: return "fp32";
    case Kind::int8: return "int8";
  }
  return "?";
}

Attrs conv_attrs(bool fused) {
  Attrs a;
  a.set("strides", std::vector<int64_t>{1, 1});
  a.set("padding", std::string("SAME"));
  a.set("pads", std::vector<int64_t>{0, 0, 0, 0});
  a.set("dilations", std::vector<int64_t>{1, 1});
  a.set("groups", int64_t{1});
  if (fused) a.set("activation", std::string("relu"));
  return a;
}

void run_layer(benchmark::State& state, const Layer& layer, Kind kind) {
  Graph g;
  const int64_t k = layer.conv ? layer.w[0] * layer.w[1] * layer.w[2] : layer.w[0];
  const int64_t outputs = layer.conv ? layer.x[0] * layer.x[1] * layer.x[2] * layer.w[3]
                                     : layer.x[0] * layer.w[1];
  Output y, x;
  Feeds feeds;
  std::string impl;
  if (kind == Kind::int8) {
    x = ops::placeholder(g, DType::u8, layer.x);
    Tensor xv(DType::u8, layer.x), wq(DType::i8, layer.w);
    for (int64_t i = 0; i < xv.numel(); ++i) xv.data<uint8_t>()[i] = static_cast<uint8_t>(i * 37);
    for (int64_t i = 0; i < wq.numel(); ++i) wq.data<int8_t>()[i] = static_cast<int8_t>(i * 13 - 7);
    auto params = [&](float s, float z) { return ops::constant(g, Tensor::from_vector<float>({2}, {s, z})); };
    const ops::QuantizedConvInputs in{x, params(0.02f, 0.0f), ops::constant(g, wq),
                                      ops::constant(g, Tensor::from_vector<float>({1}, {0.002f})),
                                      ops::constant(g, random_tensor({layer.w.back()}, 3))};
    ops::Conv2DOptions same;
    same.padding = "SAME";
    y = layer.conv ? ops::quantized_conv2d_requantized(g, in, params(0.05f, 0.0f), same, Activation::Relu)
                   : ops::quantized_matmul_requantized(g, in, params(0.05f, 0.0f), Activation::Relu);
    feeds = {{x, xv}};
    impl = "onednn";
  } else if (kind == Kind::xnor_bits) {
    Shape packed = layer.x;
    packed.back() = sign_bit_elements(packed.back());
    x = ops::placeholder(g, DType::i32, packed);
    Tensor bits(DType::i32, packed);
    uint32_t state = 5;
    for (int64_t i = 0; i < bits.numel(); ++i) bits.data<int32_t>()[i] = static_cast<int32_t>(state = state * 1664525u + 1013904223u);
    Output wc = ops::constant(g, quant::binarize_weights(random_tensor(layer.w, 2)));
    Output bias = ops::constant(g, random_tensor({layer.w.back()}, 3));
    Attrs a = layer.conv ? conv_attrs(true) : Attrs{};
    a.set("activation", std::string("relu"));
    y = g.add(layer.conv ? op_names::kXnorConv2D : op_names::kXnorMatMul, {x, wc, bias}, a);
    feeds = {{x, bits}};
    impl = "binary";
  } else {
    x = ops::placeholder(g, DType::f32, layer.x);
    const Tensor raw = random_tensor(layer.w, 2);
    const Tensor w = kind == Kind::fp32 ? raw
                     : kind == Kind::ternary_xnor ? quant::ternarize_weights(raw)
                                                  : quant::binarize_weights(raw);
    Output wc = ops::constant(g, w), bias = ops::constant(g, random_tensor({layer.w.back()}, 3));
    if (layer.conv) {
      y = g.add("FusedConv2D", {x, wc, bias}, conv_attrs(true));
    } else {
      Attrs a;
      a.set("activation", std::string("relu"));
      y = g.add("FusedMatMul", {x, wc, bias}, a);
    }
    feeds = {{x, random_tensor(layer.x, 1, kind != Kind::binary_weights && kind != Kind::fp32)}};
    // The sign-controlled sums of float inputs run only in binary_reference (binary_kernels.h).
    impl = kind == Kind::fp32 ? "onednn" : kind == Kind::binary_weights ? "binary_reference" : "binary";
  }
  Session session(g, SessionOptions{.kernel_impl = impl});
  session.run(feeds, {y});
  if (session.kernel_choices()[g.node(y.node).name] != impl) {
    state.SkipWithError(("no " + impl + " kernel for this node").c_str());
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(session.run(feeds, {y}));
  const double macs = static_cast<double>(outputs * k);
  state.counters["MACs/s"] = benchmark::Counter(macs, benchmark::Counter::kIsIterationInvariantRate);
  if (kind == Kind::xnor || kind == Kind::xnor_bits || kind == Kind::ternary_xnor) {
    state.counters["bit_MACs/s"] = benchmark::Counter(macs, benchmark::Counter::kIsIterationInvariantRate);
    if (const double top = ceiling_bit_macs_per_second(); top > 0.0)
      state.counters["ceiling_bit_MACs/s"] = top;
  }
}

// What feeds conv2 in a frozen XNOR Deep-MNIST: conv1's output [batch, 28, 28, 32] max-pooled
// then binarized to +-1 floats (two nodes), or max-pooled straight into packed sign bits
// (MaxPoolSignBits, the execution pass's form).
void conv2_input(benchmark::State& state, int64_t batch, bool packed) {
  Graph g;
  const Output x = ops::placeholder(g, DType::f32, {batch, 28, 28, 32});
  const Output y = packed ? g.add(op_names::kMaxPoolSignBits, {x}, ops::pool2d_attrs({}))
                          : ops::binarize_activation(g, ops::max_pool(g, x));
  const Feeds feeds = {{x, random_tensor({batch, 28, 28, 32}, 4)}};
  Session session(g);
  for (auto _ : state) benchmark::DoNotOptimize(session.run(feeds, {y}));
}

int register_all() {
  benchmark::RegisterBenchmark("binary/ceiling/xor_popcount_avx512", ceiling)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  for (int64_t batch : {1, 64})
    for (bool packed : {false, true})
      benchmark::RegisterBenchmark(("binary/conv2_input_batch" + std::to_string(batch) +
                                    (packed ? "/max_pool_sign_bits" : "/max_pool_binarize"))
                                       .c_str(),
                                   [batch, packed](benchmark::State& s) { conv2_input(s, batch, packed); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
  const std::vector<Layer> layers = {
      {"conv2_batch1", {1, 14, 14, 32}, {5, 5, 32, 64}, true},
      {"conv2_batch64", {64, 14, 14, 32}, {5, 5, 32, 64}, true},
      {"fc1_batch1", {1, 3136}, {3136, 1024}, false},
      {"fc1_batch64", {64, 3136}, {3136, 1024}, false},
  };
  for (const Layer& layer : layers)
    for (Kind kind : {Kind::xnor, Kind::xnor_bits, Kind::ternary_xnor, Kind::binary_weights, Kind::fp32,
                      Kind::int8})
      benchmark::RegisterBenchmark(("binary/" + layer.name + "/" + kind_name(kind)).c_str(),
                                   [layer, kind](benchmark::State& s) { run_layer(s, layer, kind); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
  return 0;
}

const int registered = register_all();

}  // namespace
}  // namespace sf
