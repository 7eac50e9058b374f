// The traits ops declare beside their shape functions: which inputs are weights and along which
// axis their output channels run (read by quantize, size-report, freeze and prune), and FLOPs
// (read by bench's profile), checked against hand counts.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "graph/op_registry.h"
#include "modelfile/model_file.h"
#include "ops/binary_ops.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/quantized_ops.h"
#include "support/cli.h"
#include "support/temp_files.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

struct ExpectedWeight {
  int input;
  std::string input_name;
  int channel_axis;
  std::string transposed_by;
};

TEST(OpTraits, EachWeightedOpNamesItsWeightInputAndChannelAxis) {
  using namespace op_names;
  const std::map<std::string, ExpectedWeight> expected = {
      {kConv2D, {1, "filter", -1, ""}},
      {kFusedConv2D, {1, "filter", -1, ""}},
      {kFusedConv2DAdd, {1, "filter", -1, ""}},
      {kFusedConv2DMaxPool, {1, "filter", -1, ""}},
      {kMatMul, {1, "b", -1, "transpose_b"}},
      {kFusedMatMul, {1, "b", -1, "transpose_b"}},
      {kConvTranspose2D, {1, "filter", 2, ""}},
      {kQuantizedConv2D, {2, "w", -1, ""}},
      {kQuantizedConv2DRequantized, {2, "w", -1, ""}},
      {kQuantizedMatMul, {2, "b", -1, ""}},
      {kQuantizedMatMulRequantized, {2, "b", -1, ""}},
      {kConvInteger2D, {1, "w", -1, ""}},
      {kQLinearConv2D, {3, "w", -1, ""}},
      {kMatMulInteger, {1, "b", -1, ""}},
      {kQLinearMatMul, {3, "b", -1, ""}},
      {kXnorConv2D, {1, "filter", -1, ""}},
      {kXnorMatMul, {1, "b", -1, ""}},
  };
  const OpRegistry& registry = OpRegistry::global();
  for (const std::string& name : registry.names()) {
    SCOPED_TRACE(name);
    const OpDef& def = registry.get(name, "test");
    const auto it = expected.find(name);
    if (it == expected.end()) {
      EXPECT_TRUE(def.weights.empty()) << "declares weights the test does not expect";
      continue;
    }
    ASSERT_EQ(def.weights.size(), 1u);
    const WeightInput& w = def.weights[0];
    EXPECT_EQ(w.input, it->second.input);
    EXPECT_EQ(def.inputs.at(static_cast<size_t>(w.input)), it->second.input_name);
    EXPECT_EQ(w.channel_axis, it->second.channel_axis);
    EXPECT_EQ(w.transposed_by, it->second.transposed_by);
  }
}

TEST(OpTraits, ChannelAxisFollowsTheRankAndTransposition) {
  const WeightInput conv{.input = 1, .channel_axis = -1};
  EXPECT_EQ(conv.channel_axis_for({}, 4), 3);
  const WeightInput matmul{.input = 1, .channel_axis = -1, .transposed_by = "transpose_b"};
  EXPECT_EQ(matmul.channel_axis_for({{"transpose_b", false}}, 2), 1);
  EXPECT_EQ(matmul.channel_axis_for({{"transpose_b", true}}, 2), 0);
  const WeightInput conv_transpose{.input = 1, .channel_axis = 2};
  EXPECT_EQ(conv_transpose.channel_axis_for({}, 4), 2);
}

TEST(OpTraits, WeightUsesListEachLayersWeightInGraphOrder) {
  Graph g;
  Output x = ops::placeholder(g, DType::f32, {1, 6, 6, 3}, "x");
  Output filter = ops::constant(g, testing::random_tensor({3, 3, 3, 4}, 1), "conv/weights");
  Output h = ops::conv2d(g, x, filter, {}, "conv");
  h = ops::reshape(g, h, {1, 64}, "flat");
  Output fc = ops::constant(g, testing::random_tensor({10, 64}, 2), "fc/weights");
  ops::matmul(g, h, fc, false, true, "fc");
  const std::vector<WeightUse> uses = weight_uses(g);
  ASSERT_EQ(uses.size(), 2u);
  EXPECT_EQ(g.node(uses[0].layer).name, "conv");
  EXPECT_EQ(uses[0].weight, filter);
  EXPECT_EQ(uses[0].channel_axis, 3);
  EXPECT_EQ(g.node(uses[1].layer).name, "fc");
  EXPECT_EQ(uses[1].weight, fc);
  EXPECT_EQ(uses[1].channel_axis, 0);  // [N, K] under transpose_b
}

TEST(OpTraits, FlopsAreTwiceTheMultiplyAdds) {
  Graph g;
  // Conv 3x3, 3 -> 4 channels, SAME on 5x5: 5*5*4 outputs of 3*3*3 multiply-adds each.
  Output x = ops::placeholder(g, DType::f32, {1, 5, 5, 3}, "x");
  Output conv = ops::conv2d(g, x, ops::constant(g, testing::random_tensor({3, 3, 3, 4}, 1)),
                            {.padding = "SAME"}, "conv");
  // Grouped 1x1, 4 -> 6 channels in 2 groups on 5x5: 5*5*6 outputs of 2 multiply-adds each.
  ops::conv2d(g, conv, ops::constant(g, testing::random_tensor({1, 1, 2, 6}, 2)), {.groups = 2},
              "grouped");
  // [2,3] x [3,5]: 2*5 outputs of 3 multiply-adds; the same with a stored as [3,2].
  Output a = ops::placeholder(g, DType::f32, {2, 3}, "a");
  Output at = ops::placeholder(g, DType::f32, {3, 2}, "at");
  Output b = ops::constant(g, testing::random_tensor({3, 5}, 3));
  ops::matmul(g, a, b, false, false, "mm");
  ops::matmul(g, at, b, true, false, "mm_ta");
  // The fused forms count their conv or matmul only (not the bias, addend or activation).
  Output bias4 = ops::constant(g, testing::random_tensor({4}, 5));
  Output w = ops::constant(g, testing::random_tensor({3, 3, 3, 4}, 6));
  Attrs fused = ops::conv2d_attrs({.padding = "SAME"});
  g.add(op_names::kFusedConv2D, {x, w, bias4}, fused, "fused_conv");
  g.add(op_names::kFusedConv2DAdd, {x, w, bias4, conv}, fused, "fused_conv_add");
  g.add(op_names::kFusedMatMul, {a, b, ops::constant(g, testing::random_tensor({5}, 7))}, {},
        "fused_mm");
  Output y = ops::relu(g, a, "relu");
  ops::bias_add(g, y, ops::constant(g, testing::random_tensor({3}, 4)), "bias");

  auto flops = [&](const std::string& name) { return node_flops(g, g.id_of(name)); };
  EXPECT_EQ(flops("conv"), 2.0 * (5 * 5 * 4) * (3 * 3 * 3));
  EXPECT_EQ(flops("grouped"), 2.0 * (5 * 5 * 6) * 2);
  EXPECT_EQ(flops("mm"), 2.0 * (2 * 5) * 3);
  EXPECT_EQ(flops("mm_ta"), 2.0 * (2 * 5) * 3);
  EXPECT_EQ(flops("fused_conv"), flops("conv"));
  EXPECT_EQ(flops("fused_conv_add"), flops("conv"));
  EXPECT_EQ(flops("fused_mm"), flops("mm"));
  EXPECT_EQ(flops("relu"), 0.0);
  EXPECT_EQ(flops("bias"), 0.0);
}

// An int8 product does as many multiply-accumulates as its float form (bench/op_rates.py puts
// the int8 kernels' GOP/s next to the AMX / VNNI ceilings).
TEST(OpTraits, QuantizedConvAndMatMulCountTheFlopsOfTheirFloatForms) {
  Graph g;
  auto input = [&](DType dtype, Shape shape, const std::string& name) {
    return ops::placeholder(g, dtype, std::move(shape), name);
  };
  Output params = input(DType::f32, {2}, "params");
  Output x = input(DType::u8, {1, 5, 5, 3}, "x");
  Output w = input(DType::i8, {3, 3, 3, 4}, "w");
  Output scales4 = input(DType::f32, {4}, "scales4"), bias4 = input(DType::f32, {4}, "bias4");
  ops::quantized_conv2d(g, {x, params, w, scales4, bias4}, {.padding = "SAME"}, "qconv");
  ops::quantized_conv2d_requantized(g, {x, params, w, scales4, bias4}, params,
                                    {.padding = "SAME"}, Activation::Relu, "qconv_rq");
  Output a = input(DType::u8, {2, 3}, "a");
  Output b = input(DType::i8, {3, 5}, "b");
  Output scales5 = input(DType::f32, {5}, "scales5"), bias5 = input(DType::f32, {5}, "bias5");
  ops::quantized_matmul(g, {a, params, b, scales5, bias5}, "qmm");
  ops::quantized_matmul_requantized(g, {a, params, b, scales5, bias5}, params, Activation::None,
                                    "qmm_rq");
  auto flops = [&](const std::string& name) { return node_flops(g, g.id_of(name)); };
  EXPECT_EQ(flops("qconv"), 2.0 * (5 * 5 * 4) * (3 * 3 * 3));
  EXPECT_EQ(flops("qconv_rq"), flops("qconv"));
  EXPECT_EQ(flops("qmm"), 2.0 * (2 * 5) * 3);
  EXPECT_EQ(flops("qmm_rq"), flops("qmm"));
}

// bench --profile reports GFLOP/s = FLOPs / time, so FLOPs = GFLOP/s x ms x 1e6 per node.
TEST(OpTraits, BenchProfileCountsTheFlopsOfAConvAndAMatMul) {
  const std::string dir = testing::make_temp_dir("sf-op-traits");
  ModelFile model;
  Graph& g = model.graph;
  Output x = ops::placeholder(g, DType::f32, {1, 5, 5, 3}, "x");
  Output h = ops::conv2d(g, x, ops::constant(g, testing::random_tensor({3, 3, 3, 4}, 1), "w"),
                         {.padding = "SAME"}, "conv");
  h = ops::reshape(g, h, {1, 100}, "flat");
  ops::matmul(g, h, ops::constant(g, testing::random_tensor({100, 7}, 2), "fc_w"), false, false,
              "fc");
  model.inputs = {"x"};
  model.outputs = {"fc"};
  save_model(dir + "/model.sfm", model);

  const testing::CliResult r = testing::run_cli(
      "bench --model " + dir + "/model.sfm --threads 1 --runs 3 --warmup 1 --json --profile",
      false);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(testing::non_empty_lines(r.out).back());
  std::map<std::string, double> flops;
  for (const nlohmann::json& row : j["profile"])
    flops[row["node"].get<std::string>()] =
        row["gflops"].get<double>() * row["ms"].get<double>() * 1e6;
  ASSERT_TRUE(flops.count("conv") && flops.count("fc")) << j.dump();
  EXPECT_NEAR(flops["conv"], 2.0 * (5 * 5 * 4) * (3 * 3 * 3), 1e-6);
  EXPECT_NEAR(flops["fc"], 2.0 * 7 * 100, 1e-6);
}

}  // namespace
}  // namespace sf
