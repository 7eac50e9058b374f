// What a cross-device edge costs in one process: a chain of `edges` Relu nodes on a 16-float
// tensor whose nodes alternate between /cpu:0 and /cpu:1 (every edge crosses devices), against
// the same chain on one device. bench/placement.py turns the two into microseconds per edge.
#include <benchmark/benchmark.h>

#include <string>

#include "ops/ops.h"
#include "runtime/session.h"

namespace {

constexpr int kEdges = 64;

void chain(benchmark::State& state, bool split) {
  sf::Graph g;
  sf::Output x = sf::ops::placeholder(g, sf::DType::f32, {16}, "x");
  sf::Output y = x;
  for (int i = 0; i < kEdges; ++i) {
    y = sf::ops::relu(g, y);
    if (split) g.mutable_node(y.node).device = i % 2 == 0 ? "/cpu:1" : "/cpu:0";
  }
  sf::Session session(g, sf::SessionOptions{.threads = 1});
  const sf::Tensor input(sf::DType::f32, {16});
  for (auto _ : state) benchmark::DoNotOptimize(session.run({{x, input}}, {y})[0].raw());
  state.counters["edges"] = split ? kEdges : 0;
  state.SetItemsProcessed(state.iterations() * kEdges);
}

BENCHMARK_CAPTURE(chain, one_device, false)->UseRealTime();
BENCHMARK_CAPTURE(chain, two_devices, true)->UseRealTime();

}  // namespace
