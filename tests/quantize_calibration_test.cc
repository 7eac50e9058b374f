#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "io/image.h"
#include "io/npy.h"
#include "ops/ops.h"
#include "quantize/calibration.h"
#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/testing.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

Tensor gaussian(int64_t count, uint32_t seed, double mean = 0.0, double stddev = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(static_cast<float>(mean), static_cast<float>(stddev));
  Tensor t(DType::f32, {count});
  for (int64_t i = 0; i < count; ++i) t.data<float>()[i] = dist(rng);
  return t;
}

Tensor uniform(int64_t count, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::f32, {count});
  for (int64_t i = 0; i < count; ++i) t.data<float>()[i] = dist(rng);
  return t;
}

RangeOptions method(RangeMethod m, double percentile = 99.99) {
  RangeOptions o;
  o.method = m;
  o.percentile = percentile;
  return o;
}

TEST(QuantizeCalibrationTest, ParsesMethodNames) {
  EXPECT_EQ(parse_range_method("minmax"), RangeMethod::minmax);
  EXPECT_EQ(parse_range_method("percentile"), RangeMethod::percentile);
  EXPECT_EQ(parse_range_method("entropy"), RangeMethod::entropy);
  EXPECT_STREQ(range_method_name(RangeMethod::entropy), "entropy");
  try {
    parse_range_method("kl");
    FAIL() << "expected sf::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'kl'"), std::string::npos) << e.what();
  }
}

TEST(QuantizeCalibrationTest, MinMaxIsTheObservedExtremesAndAlwaysHoldsZero) {
  Tensor t = Tensor::from_vector<float>({5}, {-2.0f, 0.5f, 3.0f, 1.0f, -0.25f});
  TensorRange r = estimate_range(t, method(RangeMethod::minmax));
  EXPECT_EQ(r.min, -2.0f);
  EXPECT_EQ(r.max, 3.0f);
  // Positive-only data: zero must still be exactly representable.
  TensorRange p =
      estimate_range(Tensor::from_vector<float>({2}, {1.0f, 2.0f}), method(RangeMethod::minmax));
  EXPECT_EQ(p.min, 0.0f);
  EXPECT_EQ(p.max, 2.0f);
  // Non-finite values are ignored rather than stretching the range to infinity.
  TensorRange f = estimate_range(Tensor::from_vector<float>({3}, {1.0f, INFINITY, std::nanf("")}),
                                 method(RangeMethod::minmax));
  EXPECT_EQ(f.max, 1.0f);
  for (RangeMethod m : {RangeMethod::minmax, RangeMethod::percentile, RangeMethod::entropy}) {
    TensorRange z = estimate_range(Tensor(DType::f32, {10}), method(m));
    EXPECT_EQ(z.min, 0.0f);
    EXPECT_EQ(z.max, 0.0f);
  }
}

TEST(QuantizeCalibrationTest, PercentileClipsAnOutlier) {
  Tensor t = uniform(100000, 1, 0.0f, 1.0f);
  t.data<float>()[123] = 100.0f;
  EXPECT_EQ(estimate_range(t, method(RangeMethod::minmax)).max, 100.0f);
  TensorRange r = estimate_range(t, method(RangeMethod::percentile, 99.9));
  EXPECT_EQ(r.min, 0.0f);
  EXPECT_GT(r.max, 0.9f);
  EXPECT_LT(r.max, 1.2f);  // one 2048th of 100 is the histogram's resolution
}

TEST(QuantizeCalibrationTest, PercentileCutsEachTailSeparately) {
  // A gaussian shifted to be mostly positive, with outliers on both sides.
  Tensor t = gaussian(200000, 2, 2.0, 1.0);
  t.data<float>()[0] = -50.0f;
  t.data<float>()[1] = 60.0f;
  TensorRange r = estimate_range(t, method(RangeMethod::percentile, 99.99));
  // 99.99% of N(2, 1) lies below 2 + 3.72; 0.01% lies below 2 - 3.72.
  EXPECT_GT(r.max, 5.0f);
  EXPECT_LT(r.max, 6.5f);
  EXPECT_LT(r.min, -1.0f);
  EXPECT_GT(r.min, -2.5f);
  EXPECT_THROW(estimate_range(t, method(RangeMethod::percentile, 0.0)), Error);
  EXPECT_THROW(estimate_range(t, method(RangeMethod::percentile, 100.5)), Error);
  // 100 keeps everything.
  TensorRange all = estimate_range(t, method(RangeMethod::percentile, 100.0));
  EXPECT_EQ(all.min, -50.0f);
  EXPECT_EQ(all.max, 60.0f);
}

TEST(QuantizeCalibrationTest, EntropyThresholdIsBelowTheMaxForAGaussianWithAnOutlier) {
  Tensor t = gaussian(200000, 3);
  t.data<float>()[7] = 40.0f;
  TensorRange r = estimate_range(t, method(RangeMethod::entropy));
  EXPECT_LT(r.max, 10.0f);
  EXPECT_GT(r.max, 2.0f);
  // Signed data is clipped symmetrically (and never beyond the observed minimum).
  EXPECT_GE(r.min, -r.max);
  EXPECT_LT(r.min, -2.0f);

  // After a ReLU: one-sided, all 255 levels above zero.
  Tensor relu = t.clone();
  for (int64_t i = 0; i < relu.numel(); ++i)
    relu.data<float>()[i] = std::max(relu.data<float>()[i], 0.0f);
  TensorRange h = estimate_range(relu, method(RangeMethod::entropy));
  EXPECT_EQ(h.min, 0.0f);
  EXPECT_LT(h.max, 10.0f);
  EXPECT_GT(h.max, 2.0f);
}

TEST(QuantizeCalibrationTest, EntropyKeepsTheWholeRangeOfAUniformDistribution) {
  // Nothing to gain by clipping: every cut loses mass that requantization would have kept.
  std::vector<int64_t> flat(2048, 100);
  EXPECT_DOUBLE_EQ(entropy_threshold(flat, 0.5, 128), 2048 * 0.5);
  // A histogram no wider than the target needs no search.
  EXPECT_DOUBLE_EQ(entropy_threshold(std::vector<int64_t>(100, 1), 1.0, 128), 100.0);
}

// x [N,3] -> relu -> scale by 2 (Add x to itself): three tensors to calibrate.
struct SmallNet {
  Graph graph;
  SmallNet() {
    Output x = ops::placeholder(graph, DType::f32, {1, 3}, "x");
    Output r = ops::relu(graph, x, "relu");
    ops::add(graph, r, r, "double");
  }
};

TEST(QuantizeCalibrationTest, CalibrateMeasuresTheGraphsTensorsWhateverTheBatchSize) {
  SmallNet net;
  Tensor data = gaussian(3 * 50, 4).reshaped({50, 3});
  data.data<float>()[5] = 7.0f;
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < data.numel(); ++i) {
    lo = std::min(lo, data.data<float>()[i]);
    hi = std::max(hi, data.data<float>()[i]);
  }
  const std::vector<std::string> tensors = {"x", "relu", "double"};
  for (RangeMethod m : {RangeMethod::minmax, RangeMethod::percentile, RangeMethod::entropy}) {
    TensorRanges reference;
    for (int64_t batch : {1, 7, 64}) {
      TensorSource source({data});
      CalibrationOptions options;
      options.range = method(m, 99.0);
      options.batch_size = batch;
      options.threads = 1;
      TensorRanges ranges = calibrate(net.graph, {"x"}, tensors, source, options);
      ASSERT_EQ(ranges.size(), 3u);
      if (m == RangeMethod::minmax) {
        EXPECT_EQ(ranges["x"].min, lo);
        EXPECT_EQ(ranges["x"].max, hi);
        EXPECT_EQ(ranges["relu"].min, 0.0f);
        EXPECT_EQ(ranges["relu"].max, hi);
        EXPECT_EQ(ranges["double"].max, 2 * hi);
      }
      if (reference.empty()) reference = ranges;
      for (const std::string& name : tensors) {
        EXPECT_EQ(ranges[name].min, reference[name].min) << name << " batch " << batch;
        EXPECT_EQ(ranges[name].max, reference[name].max) << name << " batch " << batch;
      }
    }
    if (m == RangeMethod::percentile) {
      EXPECT_LT(reference["relu"].max, 7.0f);
    }
  }
}

TEST(QuantizeCalibrationTest, CalibrateNamesWhatDoesNotFit) {
  SmallNet net;
  TensorSource source({Tensor(DType::f32, {4, 3})});
  auto message = [&](const std::vector<std::string>& inputs,
                     const std::vector<std::string>& tensors) {
    try {
      calibrate(net.graph, inputs, tensors, source);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({"x"}, {"nope"}).find("'nope'"), std::string::npos);
  EXPECT_NE(message({"relu"}, {"x"}).find("'relu'"), std::string::npos);
  EXPECT_NE(message({"x", "x"}, {"x"}).find("1 tensors, the graph 2 inputs"), std::string::npos);
}

void write_idx_u8(const std::string& path, const std::vector<uint32_t>& dims,
                  const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const uint8_t magic[4] = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  std::fwrite(magic, 1, 4, f);
  for (uint32_t d : dims) {
    const uint8_t be[4] = {static_cast<uint8_t>(d >> 24), static_cast<uint8_t>(d >> 16),
                           static_cast<uint8_t>(d >> 8), static_cast<uint8_t>(d)};
    std::fwrite(be, 1, 4, f);
  }
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

// Example inputs as .npy (a model whose inputs are not images): each input gets its file, by
// name or in order, examples along dimension 0, fed as they are.
TEST(QuantizeCalibrationTest, NpySourceFeedsEachInputItsExamplesAsTheyAre) {
  const std::string dir = testing::make_temp_dir("calib-npy");
  Graph g;
  ops::placeholder(g, DType::f32, {1, 3}, "tokens");
  ops::placeholder(g, DType::f32, {1, 2, 2}, "mask");
  Tensor tokens(DType::f32, {5, 3}), mask(DType::f32, {5, 2, 2});
  for (int64_t i = 0; i < tokens.numel(); ++i) tokens.data<float>()[i] = static_cast<float>(i);
  for (int64_t i = 0; i < mask.numel(); ++i) mask.data<float>()[i] = -static_cast<float>(i);
  write_npy(dir + "/tokens.npy", tokens);
  write_npy(dir + "/mask.npy", mask);
  const std::vector<std::string> inputs = {"tokens", "mask"};
  EXPECT_TRUE(names_npy_examples("x.npy"));
  EXPECT_TRUE(names_npy_examples("a=x.npy,b=y.npy"));
  EXPECT_FALSE(names_npy_examples("mnist"));

  auto named = open_npy_source("mask=" + dir + "/mask.npy,tokens=" + dir + "/tokens.npy", 0, g,
                               inputs);
  ASSERT_EQ(named->size(), 5);
  const std::vector<Tensor> batch = named->batch(1, 3);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(batch[0].data<float>()[0], 3.0f);  // example 1 of tokens
  EXPECT_EQ(batch[1].shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(batch[1].data<float>()[0], -4.0f);  // example 1 of mask
  auto in_order = open_npy_source(dir + "/tokens.npy," + dir + "/mask.npy", 2, g, inputs);
  EXPECT_EQ(in_order->size(), 2);  // --calib-count

  auto message = [&](const std::string& spec) {
    try {
      open_npy_source(spec, 0, g, inputs);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string t = dir + "/tokens.npy", m = dir + "/mask.npy";
  EXPECT_EQ(message(t), "calibration data '" + t +
                            "': no .npy file for input 'mask' (give INPUT=FILE.npy for each of: "
                            "tokens, mask)");
  EXPECT_EQ(message("nope=" + t), "calibration data 'nope=" + t +
                                      "': the model has no input 'nope' (inputs: tokens, mask)");
  EXPECT_EQ(message("tokens=" + t + ",tokens=" + t + ",mask=" + m),
            "calibration data 'tokens=" + t + ",tokens=" + t + ",mask=" + m +
                "': input 'tokens' is given twice");
  EXPECT_EQ(message(m + "," + t), m + ": examples for input 'tokens' must be f32[N,3] (N "
                                      "examples), the file holds f32[5,2,2]");
  Tensor fewer(DType::f32, {4, 2, 2});
  write_npy(dir + "/fewer.npy", fewer);
  EXPECT_EQ(message(t + "," + dir + "/fewer.npy"),
            dir + "/fewer.npy: 4 examples, but " + t + " holds 5");
  Tensor ints(DType::i32, {5, 3});
  write_npy(dir + "/ints.npy", ints);
  EXPECT_NE(message(dir + "/ints.npy," + m)
                .find("must be f32[N,3] (N examples), the file holds i32[5,3]"),
            std::string::npos);
  EXPECT_NE(message(dir + "/missing.npy," + m).find(dir + "/missing.npy"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(QuantizeCalibrationTest, ImageSourcesScaleAndLayOutLikeTheModel) {
  const std::string dir = testing::make_temp_dir("sf-calib");
  // Five 2x3 gray images; image k holds pixels k*10 + position.
  std::vector<uint8_t> pixels;
  for (int k = 0; k < 5; ++k)
    for (int i = 0; i < 6; ++i) pixels.push_back(static_cast<uint8_t>(k * 10 + i));
  write_idx_u8(dir + "/images.idx", {5, 2, 3}, pixels);

  ImageInputSpec spec;
  spec.height = 2;
  spec.width = 3;
  spec.channels = 1;
  spec.mean = 1.0f;
  spec.std = 2.0f;
  auto source = open_image_source(dir + "/images.idx", 4, spec);
  ASSERT_EQ(source->size(), 4);
  std::vector<Tensor> b = source->batch(1, 3);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].shape(), (Shape{2, 2, 3, 1}));
  EXPECT_FLOAT_EQ(b[0].data<float>()[0], (10.0f - 1.0f) / 2.0f);
  EXPECT_FLOAT_EQ(b[0].data<float>()[11], (25.0f - 1.0f) / 2.0f);

  // Three channels, NCHW: gray is replicated, channels become dimension 1.
  spec.channels = 3;
  spec.nchw = true;
  spec.mean = 0.0f;
  spec.std = 1.0f;
  Tensor nchw = open_image_source(dir + "/images.idx", 0, spec)->batch(0, 5)[0];
  EXPECT_EQ(nchw.shape(), (Shape{5, 3, 2, 3}));
  EXPECT_FLOAT_EQ(nchw.data<float>()[1 * 6 + 4], 4.0f);             // image 0, channel 1, (1, 1)
  EXPECT_FLOAT_EQ(nchw.data<float>()[(4 * 3 + 2) * 6 + 5], 45.0f);  // image 4, channel 2, (1, 2)

  // A folder of images, in subfolders: every fourth of the sorted files when 2 of 8 are asked.
  for (int k = 0; k < 8; ++k) {
    std::filesystem::create_directories(dir + "/folder/class" + std::to_string(k / 4));
    std::vector<uint8_t> gray(4, static_cast<uint8_t>(k * 20));
    write_png(dir + "/folder/class" + std::to_string(k / 4) + "/" + std::to_string(k) + ".png",
              gray.data(), 2, 2);
  }
  std::FILE* note = std::fopen((dir + "/folder/README.txt").c_str(), "w");
  std::fclose(note);
  spec = ImageInputSpec{2, 2, 1};
  spec.std = 1.0f;
  auto folder = open_image_source(dir + "/folder", 2, spec);
  ASSERT_EQ(folder->size(), 2);
  Tensor f = folder->batch(0, 2)[0];
  EXPECT_FLOAT_EQ(f.data<float>()[0], 0.0f);
  EXPECT_FLOAT_EQ(f.data<float>()[4], 80.0f);

  EXPECT_THROW(open_image_source(dir + "/missing", 2, spec), Error);
  std::filesystem::create_directories(dir + "/empty");
  EXPECT_THROW(open_image_source(dir + "/empty", 2, spec), Error);
  std::filesystem::remove_all(dir);
}

TEST(QuantizeCalibrationTest, MnistSourceUsesTheTrainingImages) {
  REQUIRE_MNIST();
  auto source = open_image_source("mnist", 10, ImageInputSpec{28, 28, 1});
  ASSERT_EQ(source->size(), 10);
  Tensor b = source->batch(0, 10)[0];
  EXPECT_EQ(b.shape(), (Shape{10, 28, 28, 1}));
  float hi = 0.0f, lo = 1.0f;
  for (int64_t i = 0; i < b.numel(); ++i) {
    hi = std::max(hi, b.data<float>()[i]);
    lo = std::min(lo, b.data<float>()[i]);
  }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
}

}  // namespace
}  // namespace sf
