// 3-D Conv and ConvTranspose ([N, C, D, H, W]) import as 2-D ones over (H, W), one per depth
// tap; checked against the definitions written as plain loops, and their imported graphs'
// gradients (through StridedSlice, Pad, Reshape, Conv2D / ConvTranspose2D) against finite
// differences.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <string>

#include "autodiff/gradients.h"
#include "onnx/importer.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/fed_gradients.h"
#include "support/onnx_models.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

struct Conv3dCase {
  std::string name;
  bool transpose = false;
  Shape x;  // [N, C, D, H, W]
  int64_t out_channels = 2, groups = 1;
  std::vector<int64_t> kernel, strides{1, 1, 1}, dilations{1, 1, 1}, pad_begin{0, 0, 0},
      pad_end{0, 0, 0}, output_padding{0, 0, 0};
  std::string auto_pad = "NOTSET";
  std::vector<int64_t> output_shape;  // ConvTranspose only; spatial entries
  bool filter_is_input = false;       // the filter is a graph input, not an initializer
};

// Per axis: the begin padding and the output size the ONNX definitions give.
void window_geometry(const Conv3dCase& t, size_t a, int64_t& begin, int64_t& size) {
  const int64_t in = t.x[2 + a], k = t.kernel[a], s = t.strides[a], d = t.dilations[a];
  const int64_t extent = (k - 1) * d + 1;
  const bool same = t.auto_pad == "SAME_UPPER" || t.auto_pad == "SAME_LOWER";
  const bool lower = t.auto_pad == "SAME_LOWER";
  if (!t.transpose) {
    if (same) {
      size = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>((size - 1) * s + extent - in, 0);
      begin = lower ? total - total / 2 : total / 2;
    } else {
      begin = t.pad_begin[a];
      size = (in + t.pad_begin[a] + t.pad_end[a] - extent) / s + 1;
    }
    return;
  }
  const int64_t natural = s * (in - 1) + t.output_padding[a] + extent;
  if (same || !t.output_shape.empty()) {
    size = same ? in * s : t.output_shape[a];
    const int64_t total = natural - size;
    begin = total < 0 ? 0 : (lower ? total - total / 2 : total / 2);
  } else {
    begin = t.pad_begin[a];
    size = natural - t.pad_begin[a] - t.pad_end[a];
  }
}

Tensor reference(const Conv3dCase& t, const Tensor& x, const std::vector<float>& w,
                 const std::vector<float>& bias) {
  const int64_t n = t.x[0], ci = t.x[1], co = t.out_channels, g = t.groups;
  const Shape in{t.x[2], t.x[3], t.x[4]};
  Shape out(3);
  std::vector<int64_t> begin(3);
  for (size_t a = 0; a < 3; ++a) window_geometry(t, a, begin[a], out[a]);
  Tensor y(DType::f32, {n, co, out[0], out[1], out[2]});
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  const int64_t out_plane = out[0] * out[1] * out[2], in_plane = in[0] * in[1] * in[2];
  const int64_t taps = t.kernel[0] * t.kernel[1] * t.kernel[2];
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < co; ++o)
      for (int64_t i = 0; i < out_plane; ++i)
        yp[(b * co + o) * out_plane + i] = bias[static_cast<size_t>(o)];
  // Visits every (input position, output position, filter tap) the op connects.
  for (int64_t b = 0; b < n; ++b)
    for (int64_t c = 0; c < ci; ++c)
      for (int64_t ocg = 0; ocg < co / g; ++ocg) {
        const int64_t group = c / (ci / g), o = group * (co / g) + ocg;
        for (int64_t kd = 0; kd < t.kernel[0]; ++kd)
          for (int64_t kh = 0; kh < t.kernel[1]; ++kh)
            for (int64_t kw = 0; kw < t.kernel[2]; ++kw) {
              const int64_t tap = (kd * t.kernel[1] + kh) * t.kernel[2] + kw;
              const float wv =
                  t.transpose ? w[static_cast<size_t>((c * (co / g) + ocg) * taps + tap)]
                              : w[static_cast<size_t>((o * (ci / g) + c % (ci / g)) * taps + tap)];
              const std::vector<int64_t> k{kd, kh, kw};
              // Conv: output p reads input p * s - begin + k * d; ConvTranspose: input p
              // writes output p * s - begin + k * d.
              const Shape& from = t.transpose ? in : out;
              const Shape& to = t.transpose ? out : in;
              for (int64_t p0 = 0; p0 < from[0]; ++p0)
                for (int64_t p1 = 0; p1 < from[1]; ++p1)
                  for (int64_t p2 = 0; p2 < from[2]; ++p2) {
                    const std::vector<int64_t> p{p0, p1, p2};
                    std::vector<int64_t> q(3);
                    bool inside = true;
                    for (size_t a = 0; a < 3; ++a) {
                      q[a] = p[a] * t.strides[a] - begin[a] + k[a] * t.dilations[a];
                      inside = inside && q[a] >= 0 && q[a] < to[a];
                    }
                    if (!inside) continue;
                    const std::vector<int64_t>& xi = t.transpose ? p : q;
                    const std::vector<int64_t>& yi = t.transpose ? q : p;
                    yp[(b * co + o) * out_plane + (yi[0] * out[1] + yi[1]) * out[2] + yi[2]] +=
                        wv * xp[(b * ci + c) * in_plane + (xi[0] * in[1] + xi[1]) * in[2] + xi[2]];
                  }
            }
      }
  return y;
}

Shape filter_shape(const Conv3dCase& t) {
  return t.transpose
             ? Shape{t.x[1], t.out_channels / t.groups, t.kernel[0], t.kernel[1], t.kernel[2]}
             : Shape{t.out_channels, t.x[1] / t.groups, t.kernel[0], t.kernel[1], t.kernel[2]};
}

// The one-node ONNX model of `t`, serialized: weights w (an initializer unless the case feeds
// them) and bias b.
std::string conv3d_model(const Conv3dCase& t, const std::vector<float>& w,
                         const std::vector<float>& bias) {
  const Shape w_shape = filter_shape(t);
  onnx::ModelProto m = testing::new_onnx_model(13);
  testing::add_input(m, "x", t.x);
  if (t.filter_is_input)
    testing::add_input(m, "w", w_shape);
  else
    testing::add_init(m, "w", w_shape, w);
  testing::add_init(m, "b", {t.out_channels}, bias);
  testing::add_output(m, "y");
  onnx::NodeProto* node = testing::add_node(m, t.transpose ? "ConvTranspose" : "Conv",
                                            {"x", "w", "b"}, {"y"}, "conv3d");
  testing::set_ints(node, "kernel_shape", t.kernel);
  testing::set_ints(node, "strides", t.strides);
  testing::set_ints(node, "dilations", t.dilations);
  testing::set_int(node, "group", t.groups);
  if (t.auto_pad != "NOTSET")
    testing::set_string(node, "auto_pad", t.auto_pad);
  else
    testing::set_ints(
        node, "pads",
        {t.pad_begin[0], t.pad_begin[1], t.pad_begin[2], t.pad_end[0], t.pad_end[1], t.pad_end[2]});
  if (t.transpose) testing::set_ints(node, "output_padding", t.output_padding);
  if (!t.output_shape.empty()) testing::set_ints(node, "output_shape", t.output_shape);
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  return bytes;
}

void expect_matches_reference(const Conv3dCase& t) {
  SCOPED_TRACE(t.name);
  const Shape w_shape = filter_shape(t);
  const std::vector<float> w =
      testing::random_values(static_cast<size_t>(num_elements(w_shape)), 11);
  const std::vector<float> bias = testing::random_values(static_cast<size_t>(t.out_channels), 12);
  const ModelFile model = import_onnx_bytes(conv3d_model(t, w, bias), "conv3d.onnx");
  const Tensor x = testing::random_tensor(t.x, 13);
  std::vector<std::pair<Output, Tensor>> feeds{
      {Output{model.graph.id_of(model.inputs.at(0)), 0}, x}};
  if (t.filter_is_input)
    feeds.push_back(
        {Output{model.graph.id_of(model.inputs.at(1)), 0}, Tensor::from_vector<float>(w_shape, w)});
  Session s(model.graph);
  const Tensor y = s.run(feeds, {Output{model.graph.id_of(model.outputs.at(0)), 0}}).at(0);
  const Tensor want = reference(t, x, w, bias);
  ASSERT_EQ(y.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(y.data<float>()[i], want.data<float>()[i], 1e-4) << "at element " << i;
}

TEST(OnnxConv3d, ConvMatchesTheDefinition) {
  std::vector<Conv3dCase> cases;
  cases.push_back({.name = "plain 3x3x3, pads 1",
                   .x = {1, 2, 4, 5, 6},
                   .out_channels = 3,
                   .kernel = {3, 3, 3},
                   .pad_begin = {1, 1, 1},
                   .pad_end = {1, 1, 1}});
  cases.push_back({.name = "strides, dilations, uneven pads, groups",
                   .x = {2, 4, 7, 6, 5},
                   .out_channels = 6,
                   .groups = 2,
                   .kernel = {3, 2, 2},
                   .strides = {2, 1, 2},
                   .dilations = {2, 2, 1},
                   .pad_begin = {2, 0, 1},
                   .pad_end = {1, 1, 0}});
  cases.push_back({.name = "SAME_LOWER with stride 2",
                   .x = {1, 3, 6, 5, 4},
                   .out_channels = 2,
                   .kernel = {2, 3, 2},
                   .strides = {2, 2, 1},
                   .auto_pad = "SAME_LOWER"});
  cases.push_back({.name = "SAME_UPPER, depthwise",
                   .x = {1, 3, 5, 4, 4},
                   .out_channels = 3,
                   .groups = 3,
                   .kernel = {2, 2, 3},
                   .strides = {3, 1, 1},
                   .auto_pad = "SAME_UPPER"});
  cases.push_back({.name = "filter as a graph input",
                   .x = {1, 2, 5, 3, 4},
                   .out_channels = 2,
                   .kernel = {3, 1, 2},
                   .strides = {2, 1, 1},
                   .pad_begin = {1, 0, 0},
                   .pad_end = {0, 0, 1},
                   .filter_is_input = true});
  for (const Conv3dCase& t : cases) expect_matches_reference(t);
}

TEST(OnnxConv3d, ConvTransposeMatchesTheDefinition) {
  std::vector<Conv3dCase> cases;
  cases.push_back({.name = "plain",
                   .transpose = true,
                   .x = {1, 2, 3, 4, 3},
                   .out_channels = 3,
                   .kernel = {3, 3, 2}});
  cases.push_back({.name = "strides, dilations, pads, output_padding, groups",
                   .transpose = true,
                   .x = {2, 4, 4, 3, 5},
                   .out_channels = 6,
                   .groups = 2,
                   .kernel = {3, 2, 3},
                   .strides = {2, 3, 1},
                   .dilations = {2, 1, 2},
                   .pad_begin = {1, 0, 2},
                   .pad_end = {2, 1, 0},
                   .output_padding = {1, 2, 0}});
  cases.push_back({.name = "stride 3 > kernel",
                   .transpose = true,
                   .x = {1, 2, 3, 2, 2},
                   .out_channels = 2,
                   .kernel = {2, 2, 1},
                   .strides = {3, 2, 2},
                   .output_padding = {2, 1, 0}});
  cases.push_back({.name = "output_shape (crop and extend)",
                   .transpose = true,
                   .x = {1, 2, 3, 3, 2},
                   .out_channels = 2,
                   .kernel = {3, 3, 2},
                   .strides = {2, 2, 1},
                   .output_shape = {6, 8, 3}});
  cases.push_back({.name = "SAME_UPPER",
                   .transpose = true,
                   .x = {1, 2, 3, 2, 3},
                   .out_channels = 2,
                   .kernel = {3, 2, 3},
                   .strides = {2, 2, 1},
                   .auto_pad = "SAME_UPPER"});
  cases.push_back({.name = "SAME_LOWER",
                   .transpose = true,
                   .x = {1, 2, 3, 2, 3},
                   .out_channels = 2,
                   .kernel = {4, 3, 3},
                   .strides = {2, 1, 2},
                   .auto_pad = "SAME_LOWER"});
  cases.push_back({.name = "filter as a graph input",
                   .transpose = true,
                   .x = {1, 2, 3, 2, 2},
                   .out_channels = 2,
                   .kernel = {2, 2, 2},
                   .strides = {2, 1, 1},
                   .pad_begin = {1, 0, 0},
                   .filter_is_input = true});
  for (const Conv3dCase& t : cases) expect_matches_reference(t);
}

// The imported graph trains: d(sum(y * R)) / d(x) and / d(w) (the filter fed as a graph input)
// match central differences of the loss the same session computes.
void expect_gradients_match_finite_differences(const Conv3dCase& t) {
  SCOPED_TRACE(t.name);
  const Shape w_shape = filter_shape(t);
  const std::vector<float> w =
      testing::random_values(static_cast<size_t>(num_elements(w_shape)), 21);
  const std::vector<float> bias = testing::random_values(static_cast<size_t>(t.out_channels), 22);
  ModelFile model = import_onnx_bytes(conv3d_model(t, w, bias), "conv3d.onnx");
  Graph& g = model.graph;
  const Output x{g.id_of(model.inputs.at(0)), 0}, wp{g.id_of(model.inputs.at(1)), 0};
  const Output y{g.id_of(model.outputs.at(0)), 0};
  const Shape y_shape = g.type(y).shape;
  std::vector<int64_t> axes(y_shape.size());
  for (size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int64_t>(i);
  Output loss =
      ops::reduce_sum(g, ops::mul(g, y, ops::constant(g, testing::random_tensor(y_shape, 23))),
                      axes, false, "loss");
  const std::vector<Output> grads = gradients(g, loss, {x, wp});
  std::vector<Tensor> values{testing::random_tensor(t.x, 24),
                             Tensor::from_vector<float>(w_shape, w)};
  Session session(g);
  testing::expect_fed_gradients_match(session, loss, {x, wp}, values, grads);
}

TEST(OnnxConv3d, ImportedConvsTrainWithGradientsMatchingFiniteDifferences) {
  expect_gradients_match_finite_differences({.name = "Conv: strides, dilations, pads, groups",
                                             .x = {1, 4, 5, 4, 3},
                                             .out_channels = 2,
                                             .groups = 2,
                                             .kernel = {2, 2, 2},
                                             .strides = {2, 1, 1},
                                             .dilations = {2, 1, 1},
                                             .pad_begin = {1, 1, 0},
                                             .pad_end = {1, 0, 1},
                                             .filter_is_input = true});
  expect_gradients_match_finite_differences({.name = "ConvTranspose: stride, pads, output_padding",
                                             .transpose = true,
                                             .x = {1, 2, 3, 2, 3},
                                             .out_channels = 2,
                                             .kernel = {2, 2, 2},
                                             .strides = {2, 2, 1},
                                             .pad_begin = {1, 0, 0},
                                             .pad_end = {0, 1, 0},
                                             .output_padding = {1, 1, 0},
                                             .filter_is_input = true});
}

TEST(OnnxConv3d, A4dFilterForA5dInputIsRefusedNamingTheNode) {
  onnx::ModelProto m = testing::new_onnx_model(13);
  testing::add_input(m, "x", {1, 2, 3, 4, 4});
  testing::add_init(m, "w", {2, 2, 3, 3}, testing::random_values(36, 1));
  testing::add_output(m, "y");
  testing::add_node(m, "Conv", {"x", "w"}, {"y"}, "bad_conv");
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  try {
    import_onnx_bytes(bytes, "bad.onnx");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad_conv"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("5-D filter"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sf
