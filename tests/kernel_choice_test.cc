// KernelRegistry's choices: the best accepting kernel, a named one, and the next one below a
// given rank (where a sparse kernel hands dense weights).
#include <gtest/gtest.h>

#include "graph/graph.h"
#include "kernels/kernel.h"
#include "ops/ops.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

KernelDef relu_kernel(const std::string& impl, int priority, const bool* accepting = nullptr) {
  KernelDef def = simple_kernel("Relu", DType::f32, impl, [](KernelContext&) {}, priority);
  if (accepting != nullptr) def.accepts = [accepting](const KernelSpec&) { return *accepting; };
  return def;
}

TEST(KernelRegistryChoice, BelowARankTheNextAcceptingKernelRuns) {
  bool vendor_accepts = true;
  KernelRegistry registry;
  registry.add(relu_kernel("reference", 0));
  registry.add(relu_kernel("only_when_asked", -1));
  registry.add(relu_kernel("vendor", 10, &vendor_accepts));
  registry.add(relu_kernel("sparse", 20));
  Graph g;
  const Output x = ops::placeholder(g, DType::f32, {4}, "x");
  const Output y = ops::relu(g, x, "r");
  const KernelSpec spec{g.node(y.node), {g.type(x)}};

  EXPECT_EQ(registry.select(spec).impl, "sparse");
  EXPECT_EQ(registry.select_below(spec, 20).impl, "vendor");
  vendor_accepts = false;
  EXPECT_EQ(registry.select_below(spec, 20).impl, "reference");
  EXPECT_EQ(registry.select(spec, "only_when_asked").impl, "only_when_asked");
}

}  // namespace
}  // namespace sf
