// Kernels are tested by being registered (as in ggml's test-backend-ops and TF Lite's kernel
// map): every op has a reference kernel for each dtype it has any kernel of, and every other
// registered kernel runs against the reference on its op's shape set (support/kernel_cases.cc).
// A new kernel is covered as soon as it is registered, and fails here until its op has cases,
// one of which it accepts.
#include <gtest/gtest.h>

#include <cctype>
#include <iostream>
#include <oneapi/dnnl/dnnl.hpp>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cpu/cpu_features.h"
#include "graph/op_registry.h"
#include "kernels/kernel.h"
#include "support/kernel_cases.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

using testing::kernel_shape_sets;

// Ops the session binds itself (feeds, constants, variables), which have no kernels.
const std::set<std::string> kSessionOps = {"Placeholder", "Const", "Variable"};

struct KernelKey {
  std::string op, device;
  DType dtype;
  std::string impl;
};

std::string key_name(const KernelKey& k) {
  return k.op + "/" + k.device + "/" + dtype_name(k.dtype) + "/" + k.impl;
}

void PrintTo(const KernelKey& k, std::ostream* os) { *os << key_name(k); }

KernelKey key_of(const KernelDef& d) { return {d.op, d.device, d.dtype, d.impl}; }

TEST(KernelRegistry, EveryOpHasAReferenceKernelForEachDtypeItHasKernelsFor) {
  std::string missing;
  for (const std::string& op : OpRegistry::global().names()) {
    if (kSessionOps.count(op) != 0) continue;
    std::set<std::pair<std::string, DType>> any, reference;
    for (const KernelDef& d : KernelRegistry::global().all()) {
      if (d.op != op) continue;
      any.insert({d.device, d.dtype});
      if (d.impl == "reference") reference.insert({d.device, d.dtype});
    }
    if (any.empty()) missing += "\n  " + op + ": no kernel at all";
    for (const auto& [device, dtype] : any)
      if (reference.count({device, dtype}) == 0)
        missing += "\n  " + op + ": no reference kernel for " + device + "/" + dtype_name(dtype);
  }
  EXPECT_TRUE(missing.empty()) << "missing reference kernels:" << missing;
}

// The reference kernels are the fallback of every node, so they must not decline any; kernels
// of undeclared ops could never run.
TEST(KernelRegistry, KernelsAreOfDeclaredOpsAndReferenceKernelsAcceptEveryNode) {
  for (const KernelDef& d : KernelRegistry::global().all()) {
    EXPECT_NE(OpRegistry::global().find(d.op), nullptr) << key_name(key_of(d));
    if (d.impl == "reference") {
      EXPECT_FALSE(static_cast<bool>(d.accepts)) << key_name(key_of(d)) << " has an accepts check";
    }
  }
}

// SessionOptions::kernel_impl names an implementation, so two kernels under one key could not
// be told apart (nor tested one by one).
TEST(KernelRegistry, EachKernelHasItsOwnKey) {
  std::set<std::tuple<std::string, std::string, DType, std::string>> seen;
  for (const KernelDef& d : KernelRegistry::global().all())
    EXPECT_TRUE(seen.insert({d.op, d.device, d.dtype, d.impl}).second)
        << key_name(key_of(d)) << " is registered twice";
}

// A shape set whose op has only a reference kernel tests nothing: a leftover.
TEST(KernelRegistry, EveryShapeSetIsForAnOpWithOtherKernels) {
  for (const auto& [op, set] : kernel_shape_sets()) {
    EXPECT_NE(OpRegistry::global().find(op), nullptr) << "shape set of unknown op " << op;
    bool other = false;
    for (const KernelDef& d : KernelRegistry::global().all())
      other = other || (d.op == op && d.impl != "reference");
    EXPECT_TRUE(other) << "op " << op << " has a shape set but no kernel besides the reference";
    EXPECT_FALSE(set.cases.empty()) << op;
  }
}

// The CPU features the registered kernels need between them: oneDNN's int8 kernels want VNNI in
// oneDNN's ISA (which ONEDNN_MAX_CPU_ISA may lower), the RGB transpose AVX-512, and kernels of
// bf16 products only (`bf16_products`) AMX. Empty when the CPU has them all.
std::string missing_cpu_features(bool bf16_products) {
  std::string missing;
  auto lacks = [&missing](const char* feature) {
    missing += (missing.empty() ? "" : ", ") + std::string(feature);
  };
  const CpuFeatures& cpu = cpu_features();
  if (!cpu.avx512f) lacks("avx512f");
  if (!cpu.avx512bw) lacks("avx512bw");
  if (!cpu.avx512vl) lacks("avx512vl");
  if (!cpu.avx512_vnni) lacks("avx512vnni");
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto vnni = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_vnni);
  if ((isa & vnni) != vnni) lacks("avx512_core_vnni in oneDNN's ISA");
  if (bf16_products && !cpu.amx_bf16) lacks("amx_bf16");
  return missing;
}

class RegisteredKernel : public ::testing::TestWithParam<KernelKey> {};

// Every case of the kernel's dtype that the kernel accepts runs with it forced and with the
// reference kernels; the cases it declines are left to the kernels that accept them. A kernel
// that takes none in an fp32 session is tried in a bf16 one (a kernel of bf16 products only),
// against the reference on the inputs rounded to bf16.
TEST_P(RegisteredKernel, MatchesTheReferenceOnItsOpsShapeSet) {
  const KernelKey& k = GetParam();
  const std::string name = key_name(k);
  const auto set = kernel_shape_sets().find(k.op);
  ASSERT_NE(set, kernel_shape_sets().end())
      << name << " is registered but op " << k.op
      << " has no shape set: add its cases to kernel_shape_sets() (tests/support/kernel_cases.cc)";
  int of_dtype = 0;
  std::string accepted, declined;
  auto run_cases = [&](Precision precision) {
    of_dtype = 0;
    accepted.clear();
    declined.clear();
    for (size_t i = 0; i < set->second.cases.size(); ++i) {
      const testing::KernelCase& c = set->second.cases[i];
      if (c.inputs.at(0).dtype != k.dtype) continue;  // a case for another dtype's kernels
      ++of_dtype;
      const uint32_t seed = 1000 * static_cast<uint32_t>(i + 1);
      SCOPED_TRACE(::testing::Message() << name << ", case " << c.name << " (seed " << seed << ", "
                                        << precision_name(precision) << ")");
      std::vector<bool> constant;
      for (const testing::InputSpec& s : c.inputs) constant.push_back(s.constant);
      try {
        const std::string chosen = testing::compare_with_reference(
            [&](Graph& g, const std::vector<Output>& in) {
              return g.add(k.op, in, c.attrs, "node");
            },
            testing::make_inputs(c, seed), constant, k.impl, set->second.tolerance, precision);
        (chosen == k.impl ? accepted : declined) += " " + c.name;
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    }
  };
  run_cases(Precision::fp32);
  const bool bf16_products = accepted.empty() && !HasFailure() && k.dtype == DType::f32;
  if (bf16_products) run_cases(Precision::bf16);
  ASSERT_GT(of_dtype, 0) << name << ": op " << k.op << " has no case of dtype "
                         << dtype_name(k.dtype)
                         << ": add some to kernel_shape_sets() (tests/support/kernel_cases.cc)";
  std::cout << name << ": ran" << (accepted.empty() ? " none" : accepted) << "; declined"
            << (declined.empty() ? " none" : declined) << "\n";
  if (!accepted.empty() || HasFailure()) return;
  const std::string missing = missing_cpu_features(bf16_products);
  if (!missing.empty())
    GTEST_SKIP() << name << " accepts none of the " << of_dtype << " cases of " << k.op
                 << " on this CPU, which lacks " << missing;
  FAIL() << name << " accepts none of the " << of_dtype << " cases of " << k.op
         << ": add one it accepts to kernel_shape_sets() (tests/support/kernel_cases.cc)";
}

std::vector<KernelKey> non_reference_kernels() {
  std::vector<KernelKey> keys;
  for (const KernelDef& d : KernelRegistry::global().all())
    if (d.impl != "reference") keys.push_back(key_of(d));
  return keys;
}

std::string test_name(const ::testing::TestParamInfo<KernelKey>& info) {
  const KernelKey& k = info.param;
  std::string name = k.op + "_" + k.device + "_" + dtype_name(k.dtype) + "_" + k.impl;
  for (char& ch : name)
    if (std::isalnum(static_cast<unsigned char>(ch)) == 0) ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Registry, RegisteredKernel, ::testing::ValuesIn(non_reference_kernels()),
                         test_name);

}  // namespace
}  // namespace sf::SLIMFLOW_TEST_FILE_ID
