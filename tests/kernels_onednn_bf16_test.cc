// bf16 products (SessionOptions::precision = bf16): oneDNN rounds the float inputs and weights to
// bf16 and accumulates in fp32, so its result equals the fp32 reference kernel run on inputs
// rounded to bf16 the same way (round to nearest even), to fp32 summation tolerance. Against
// the unrounded reference the error is bf16's: about 2^-8 of the products' magnitudes.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "autodiff/gradients.h"
#include "cpu/cpu_features.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/testing.h"
#include "train/optimizer.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::random_tensor;
using testing::rounded_to_bf16;

struct Case {
  std::string op;  // FusedConv2D or FusedMatMul
  Shape x, w;
  Attrs attrs;
};

// Runs the case's one node on x, w (a frozen Const) and bias; returns the output and what ran.
std::pair<Tensor, std::string> run_node(const Case& c, const Tensor& x, const Tensor& w,
                                        const Tensor& bias, SessionOptions options) {
  Graph g;
  Output in = ops::placeholder(g, DType::f32, c.x);
  Output y = g.add(c.op, {in, ops::constant(g, w), ops::constant(g, bias)}, c.attrs);
  Session session(g, options);
  session.set_profiling(true);
  Tensor out = session.run({{in, x}}, {y})[0].clone();
  std::string impl;
  for (const NodeProfile& p : session.profile())
    if (p.op == c.op) impl = p.impl;
  return {out, impl};
}

std::vector<Case> cases() {
  auto conv = [](Shape x, Shape w, std::string padding, int64_t groups, std::string act) {
    return Case{"FusedConv2D", x, w,
                Attrs{{"strides", std::vector<int64_t>{1, 1}},
                      {"padding", padding},
                      {"pads", std::vector<int64_t>{0, 0, 0, 0}},
                      {"dilations", std::vector<int64_t>{1, 1}},
                      {"groups", groups},
                      {"activation", act}}};
  };
  auto matmul = [](int64_t m, int64_t k, int64_t n, std::string act) {
    return Case{"FusedMatMul",
                {m, k},
                {k, n},
                Attrs{{"transpose_a", false}, {"transpose_b", false}, {"activation", act}}};
  };
  return {conv({1, 28, 28, 1}, {5, 5, 1, 32}, "SAME", 1, "relu"),
          conv({2, 14, 14, 32}, {5, 5, 32, 64}, "SAME", 1, "relu"),
          conv({1, 9, 9, 16}, {3, 3, 1, 16}, "SAME", 16, "relu6"),
          conv({3, 7, 7, 17}, {1, 1, 17, 33}, "VALID", 1, "none"),
          matmul(1, 3136, 1024, "relu"),
          matmul(64, 1024, 10, "none"),
          matmul(5, 33, 17, "relu6")};
}

TEST(OneDnnBf16, EqualsTheReferenceOnBf16RoundedInputs) {
  const bool native = cpu_features().avx512_bf16 || cpu_features().amx_bf16;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.op + " x " + shape_str(c.x) + " w " + shape_str(c.w));
    const Tensor x = random_tensor(c.x, 1), w = random_tensor(c.w, 2),
                 bias = random_tensor({c.w.back()}, 3);
    const auto [got, impl] = run_node(c, x, w, bias, SessionOptions{.precision = Precision::bf16});
    if (c.op == "FusedConv2D" && c.attrs.get_int("groups") > 1 && c.w[2] == 1) {
      // Depthwise convs stay fp32 (bf16 products save a memory-bound layer nothing).
      EXPECT_EQ(impl.find("bf16"), std::string::npos) << impl;
      continue;
    }
    if (impl.find("bf16") == std::string::npos) {
      // Per-layer fallback: no bf16 kernel here, the fp32 one ran.
      EXPECT_FALSE(native) << "a CPU with bf16 instructions ran " << impl;
      continue;
    }
    const Tensor want = run_node(c, rounded_to_bf16(x), rounded_to_bf16(w), bias,
                                 SessionOptions{.kernel_impl = "reference"})
                            .first;
    testing::expect_close(want, got, {.rtol = 1e-4, .atol = 1e-3}, "bf16 vs rounded reference");
    const Tensor exact = run_node(c, x, w, bias, SessionOptions{.kernel_impl = "reference"}).first;
    // Random inputs in [-1, 1): each product off by at most 2^-8 relative.
    const double k = static_cast<double>(num_elements(c.w) / c.w.back());
    testing::expect_close(exact, got, {.rtol = 1e-2, .atol = k / 256.0}, "bf16 vs fp32 reference");
  }
}

TEST(OneDnnBf16, Fp32SessionsKeepFp32Products) {
  const Case c = cases()[1];
  const auto [y, impl] = run_node(c, random_tensor(c.x, 1), random_tensor(c.w, 2),
                                  random_tensor({c.w.back()}, 3), SessionOptions{});
  EXPECT_EQ(impl.find("bf16"), std::string::npos) << impl;
}

// A layer kept in fp32 (quantize --mode bf16 --exclude L) stays fp32 in every node a pass split
// it into (named under it: L/part, L/part_1, ...), and its neighbours still compute in bf16.
TEST(OneDnnBf16, ExcludedLayerStaysFp32InEveryPart) {
  if (!cpu_features().avx512_bf16 && !cpu_features().amx_bf16) GTEST_SKIP() << "no bf16 kernels";
  const Case c{"FusedMatMul",
               {4, 32},
               {32, 32},
               Attrs{{"transpose_a", false}, {"transpose_b", false}, {"activation", "relu"}}};
  Graph g;
  Output in = ops::placeholder(g, DType::f32, c.x);
  auto layer = [&](Output x, const std::string& name, uint32_t seed) {
    return g.add(c.op,
                 {x, ops::constant(g, random_tensor(c.w, seed)),
                  ops::constant(g, random_tensor({c.w.back()}, seed + 1))},
                 c.attrs, name);
  };
  Output y = layer(layer(layer(in, "fc/part", 1), "fc", 3), "fc2", 5);
  Session session(g, SessionOptions{.precision = Precision::bf16, .fp32_layers = {"fc"}});
  session.set_profiling(true);
  session.run({{in, random_tensor(c.x, 7)}}, {y});
  std::map<std::string, std::string> impl;
  for (const NodeProfile& p : session.profile()) impl[p.name] = p.impl;
  EXPECT_EQ(impl.at("fc/part").find("bf16"), std::string::npos) << impl.at("fc/part");
  EXPECT_EQ(impl.at("fc").find("bf16"), std::string::npos) << impl.at("fc");
  EXPECT_NE(impl.at("fc2").find("bf16"), std::string::npos) << impl.at("fc2");
}

// Products that read one variable in one run (the micro-batch copies of a layer, a layer's
// forward product and its input gradient's, which reads it transposed) share its rounding to
// bf16 (RunShared): the results are those of separate roundings, and a variable the optimizer
// changed between runs is rounded again.
TEST(OneDnnBf16, ProductsOfOneVariableShareItsRoundingWithinARun) {
  if (!cpu_features().avx512_bf16 && !cpu_features().amx_bf16) GTEST_SKIP() << "no bf16 kernels";
  Graph g;
  const Output x1 = ops::placeholder(g, DType::f32, {4, 64}, "x1");
  const Output x2 = ops::placeholder(g, DType::f32, {4, 64}, "x2");
  const Output w = ops::variable(g, DType::f32, {64, 32}, "w");
  const Output y1 = ops::matmul(g, x1, w, false, false, "y1");
  const Output y2 = ops::matmul(g, x2, w, false, false, "y2");
  const Output dx = ops::matmul(g, y2, w, false, true, "dx");  // the same rounding, transposed
  const SessionOptions bf16{.precision = Precision::bf16};
  auto store = std::make_shared<VariableStore>();
  store->set("w", random_tensor({64, 32}, 1));
  const Feeds feeds = {{x1, random_tensor({4, 64}, 2)}, {x2, random_tensor({4, 64}, 3)}};
  Session shared(g, bf16, store);
  for (uint32_t step = 0; step < 2; ++step) {
    if (step == 1) {  // the optimizer writes the variable in place between runs
      const Tensor next = random_tensor({64, 32}, 4);
      std::memcpy(store->get("w").raw(), next.raw(), next.bytes());
    }
    const std::vector<Tensor> got = shared.run(feeds, {y1, y2, dx});
    for (size_t i = 0; i < 3; ++i) {
      // Each product alone in a fresh session rounds w itself.
      const Output fetch = std::vector<Output>{y1, y2, dx}[i];
      Session alone(g, bf16, store);
      const Tensor want = alone.run(feeds, {fetch})[0];
      ASSERT_EQ(got[i].bytes(), want.bytes());
      EXPECT_EQ(std::memcmp(got[i].raw(), want.raw(), want.bytes()), 0)
          << "step " << step << " fetch " << i;
    }
  }
}

// An activation that several kernels of a run stage alike (a conv's x for its forward and filter
// gradient, dy for both gradients; a matmul's operands, read transposed or not) is staged once a
// run for all of them (activation_form): every result is what the kernel computes alone, in
// fp32 and bf16 sessions, also after the fed tensors change in place between runs; and a chain
// of like convs, whose activations the planner may place in one another's memory, gives what its
// convs give one at a time.
TEST(OneDnnStaging, KernelsThatStageOneActivationAlikeShareItWithinARun) {
  std::vector<Precision> precisions = {Precision::fp32};
  if (cpu_features().avx512_bf16 || cpu_features().amx_bf16) precisions.push_back(Precision::bf16);
  for (const Precision precision : precisions) {
    SCOPED_TRACE(precision == Precision::bf16 ? "bf16" : "fp32");
    const SessionOptions options{.precision = precision};
    Graph g;
    const Output x = ops::placeholder(g, DType::f32, {2, 9, 9, 20}, "x");
    const Output w = ops::variable(g, DType::f32, {3, 3, 20, 32}, "w");
    const Output a = ops::placeholder(g, DType::f32, {6, 40}, "a");
    const Output b = ops::variable(g, DType::f32, {40, 24}, "b");
    ops::Conv2DOptions same;
    same.padding = "SAME";
    const Output y = ops::conv2d(g, x, w, same);
    const Output z = ops::matmul(g, a, b, false, false);
    const Output ry = ops::placeholder(g, DType::f32, g.type(y).shape, "ry");
    const Output rz = ops::placeholder(g, DType::f32, g.type(z).shape, "rz");
    const Output loss = ops::add(g, ops::reduce_sum(g, ops::mul(g, y, ry), {0, 1, 2, 3}),
                                 ops::reduce_sum(g, ops::mul(g, z, rz), {0, 1}));
    std::vector<Output> fetches = gradients(g, loss, {x, w, a, b});
    fetches.insert(fetches.end(), {y, z});
    auto store = std::make_shared<VariableStore>();
    store->set("w", random_tensor({3, 3, 20, 32}, 1));
    store->set("b", random_tensor({40, 24}, 2));
    Feeds feeds;
    uint32_t seed = 10;
    for (Output in : {x, a, ry, rz})
      feeds.emplace_back(in, random_tensor(g.type(in).shape, ++seed));
    Session session(g, options, store);
    for (int step = 0; step < 2; ++step) {
      if (step == 1)  // the same tensors, new values: the next run must stage them again
        for (auto& [in, tensor] : feeds) {
          const Tensor next = random_tensor(tensor.shape(), ++seed);
          std::memcpy(tensor.raw(), next.raw(), next.bytes());
        }
      const std::vector<Tensor> got = session.run(feeds, fetches);
      for (size_t i = 0; i < fetches.size(); ++i) {
        Session alone(g, options, store);
        const Tensor want = alone.run(feeds, {fetches[i]})[0];
        ASSERT_EQ(got[i].bytes(), want.bytes());
        EXPECT_EQ(std::memcmp(got[i].raw(), want.raw(), want.bytes()), 0)
            << "step " << step << " fetch " << i;
      }
    }

    Graph chain;
    const Shape shape = {2, 7, 7, 16};
    const Output image_in = ops::placeholder(chain, DType::f32, shape, "in");
    Output in = image_in;
    std::vector<Tensor> filters;
    for (uint32_t layer = 0; layer < 4; ++layer) {
      filters.push_back(random_tensor({3, 3, 16, 16}, 30 + layer));
      in = ops::relu(chain, ops::conv2d(chain, in,
                                        ops::variable(chain, DType::f32, {3, 3, 16, 16},
                                                      fmt::format("w{}", layer)),
                                        same));
    }
    auto chain_store = std::make_shared<VariableStore>();
    for (size_t layer = 0; layer < filters.size(); ++layer)
      chain_store->set(fmt::format("w{}", layer), filters[layer]);
    const Tensor image = random_tensor(shape, 40);
    const Tensor got = Session(chain, options, chain_store).run({{image_in, image}}, {in})[0];
    Tensor want = image;
    for (const Tensor& filter : filters) {
      Graph one;
      const Output x1 = ops::placeholder(one, DType::f32, shape, "x");
      const Output w1 = ops::variable(one, DType::f32, filter.shape(), "w");
      auto one_store = std::make_shared<VariableStore>();
      one_store->set("w", filter);
      const Output y1 = ops::relu(one, ops::conv2d(one, x1, w1, same));
      want = Session(one, options, one_store).run({{x1, want}}, {y1})[0].clone();
    }
    ASSERT_EQ(got.bytes(), want.bytes());
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.bytes()), 0);
  }
}

// The optimizer may round a variable into the products' shared copy as it updates it
// (Session::bf16_for_next_run): the next run's products then skip their own rounding and
// compute exactly what they would have, for each optimizer and for sizes off the vector width.
// Only a run that follows the update reads the copy so written; the one after rounds again.
TEST(OneDnnBf16, AnUpdateThatRoundsAsItWritesGivesTheProductsOwnResults) {
  if (!cpu_features().avx512_bf16 && !cpu_features().amx_bf16) GTEST_SKIP() << "no bf16 kernels";
  for (const char* kind : {"adam", "sgd", "momentum"}) {
    for (const int64_t rows : {64, 37}) {
      SCOPED_TRACE(fmt::format("{}, w [{},33]", kind, rows));
      Graph g;
      const Output x = ops::placeholder(g, DType::f32, {4, rows}, "x");
      const Output w = ops::variable(g, DType::f32, {rows, 33}, "w");
      const Output y = ops::matmul(g, x, w, false, false, "y");
      const Output dx = ops::matmul(g, y, w, false, true, "dx");
      const SessionOptions bf16{.precision = Precision::bf16};
      auto store = std::make_shared<VariableStore>();
      store->set("w", random_tensor({rows, 33}, 1));
      const Feeds feeds = {{x, random_tensor({4, rows}, 2)}};
      Session session(g, bf16, store);
      EXPECT_EQ(session.bf16_for_next_run(store->get("w")), nullptr) << "no product ran yet";
      Optimizer optimizer(OptimizerConfig{.kind = kind});
      for (uint32_t step = 0; step < 3; ++step) {
        const std::vector<Tensor> got = session.run(feeds, {y, dx});
        Session alone(g, bf16, store);
        const std::vector<Tensor> want = alone.run(feeds, {y, dx});
        for (size_t i = 0; i < 2; ++i) {
          ASSERT_EQ(got[i].bytes(), want[i].bytes());
          EXPECT_EQ(std::memcmp(got[i].raw(), want[i].raw(), want[i].bytes()), 0)
              << "step " << step << " fetch " << i;
        }
        optimizer.begin_step();
        // Steps 0 and 1 round into the copy; step 2 changes w behind its back, which the run
        // after must see (it rounds w itself, as the copy is not counted filled for it).
        uint16_t* rounded = step < 2 ? session.bf16_for_next_run(store->get("w")) : nullptr;
        if (step < 2) {
          ASSERT_NE(rounded, nullptr);
        }
        optimizer.apply("w", store->get("w"), random_tensor({rows, 33}, 10 + step), 0.01, false,
                        rounded);
        if (step == 2) {
          std::vector<Tensor> after = session.run(feeds, {y, dx});
          Session fresh(g, bf16, store);
          const std::vector<Tensor> expected = fresh.run(feeds, {y, dx});
          EXPECT_EQ(std::memcmp(after[0].raw(), expected[0].raw(), expected[0].bytes()), 0);
        }
      }
    }
  }
}

// Mixed-precision training: the gradients of a conv and of a matmul (Conv2DBackpropInput and
// Conv2DBackpropFilter, MatMuls with transposes) in a bf16 session against an fp32 one, on
// random shapes. Each product's two inputs are rounded to bf16 (relative error at most 2^-8
// each), so a sum of K products of values in [-1, 1) is off by at most K * 2^-7; fp32
// accumulation adds nothing near that.
TEST(OneDnnBf16, TrainingGradientsTrackFp32WithinBf16Tolerance) {
  const bool native = cpu_features().avx512_bf16 || cpu_features().amx_bf16;
  const uint32_t seed = 17;
  std::mt19937 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 4; ++round) {
    const int64_t n = pick(1, 3), h = pick(5, 11), c = pick(1, 9), o = pick(2, 17), k = pick(1, 3);
    const int64_t m = pick(1, 9), inner = pick(3, 40), cols = pick(2, 19);
    const bool tb = round % 2 == 1;
    SCOPED_TRACE(fmt::format(
        "seed {} round {}: conv x [{},{},{},{}] w [{},{},{},{}]; matmul "
        "[{},{}] x [{},{}]{}",
        seed, round, n, h, h, c, k, k, c, o, m, inner, inner, cols, tb ? " (b transposed)" : ""));
    Graph g;
    Output x = ops::placeholder(g, DType::f32, {n, h, h, c}, "x");
    Output w = ops::placeholder(g, DType::f32, {k, k, c, o}, "w");
    Output a = ops::placeholder(g, DType::f32, {m, inner}, "a");
    Output b = ops::placeholder(g, DType::f32, tb ? Shape{cols, inner} : Shape{inner, cols}, "b");
    ops::Conv2DOptions same;
    same.padding = "SAME";
    Output y = ops::conv2d(g, x, w, same);
    Output z = ops::matmul(g, a, b, false, tb);
    // Weighting each output by a fixed random tensor makes the incoming gradients random too.
    Output ry = ops::placeholder(g, DType::f32, g.type(y).shape, "ry");
    Output rz = ops::placeholder(g, DType::f32, g.type(z).shape, "rz");
    Output loss = ops::add(g, ops::reduce_sum(g, ops::mul(g, y, ry), {0, 1, 2, 3}),
                           ops::reduce_sum(g, ops::mul(g, z, rz), {0, 1}));
    const std::vector<Output> grads = gradients(g, loss, {x, w, a, b});
    Feeds feeds;
    uint32_t s = 100 * static_cast<uint32_t>(round);
    for (Output in : {x, w, a, b, ry, rz})
      feeds.emplace_back(in, random_tensor(g.type(in).shape, ++s));
    std::vector<Output> fetches = grads;
    fetches.push_back(loss);  // so that the forward products run too
    auto run = [&](Precision precision) {
      Session session(g, SessionOptions{.precision = precision});
      session.set_profiling(true);
      std::vector<Tensor> out = session.run(feeds, fetches);
      for (Tensor& t : out) t = t.clone();
      int bf16_products = 0;
      for (const NodeProfile& p : session.profile())
        bf16_products += p.impl.find("bf16") != std::string::npos;
      return std::make_pair(out, bf16_products);
    };
    const auto [want, none] = run(Precision::fp32);
    const auto [got, bf16_products] = run(Precision::bf16);
    EXPECT_EQ(none, 0);
    // Forward conv, both conv gradients, forward matmul and both matmul gradients.
    if (native) {
      EXPECT_EQ(bf16_products, 6);
    }
    const double reductions[] = {static_cast<double>(k * k * o),  // dx: over the filter's outputs
                                 static_cast<double>(n * h * h),  // dw: over the batch and pixels
                                 static_cast<double>(cols),       // da = dz b^T
                                 static_cast<double>(m)};         // db = a^T dz
    const char* names[] = {"dx", "dw", "da", "db"};
    for (size_t i = 0; i < grads.size(); ++i)
      testing::expect_close(want[i], got[i], {.rtol = 0.0, .atol = reductions[i] / 128.0},
                            names[i]);
  }
}

TEST(Precision, AutoFollowsAmxAndBadNamesAreErrors) {
  EXPECT_EQ(choose_precision("fp32", "--precision").precision, Precision::fp32);
  EXPECT_EQ(choose_precision("bf16", "--precision").precision, Precision::bf16);
  const PrecisionChoice automatic = choose_precision("auto", "--precision");
  EXPECT_EQ(automatic.precision, cpu_features().amx_bf16 ? Precision::bf16 : Precision::fp32);
  EXPECT_NE(automatic.reason.find("AMX"), std::string::npos) << automatic.reason;
  try {
    choose_precision("fp8", "--precision");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--precision 'fp8': expected fp32, bf16 or auto");
  }
}

}  // namespace
}  // namespace sf::SLIMFLOW_TEST_FILE_ID
