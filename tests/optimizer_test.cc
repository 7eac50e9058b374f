#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "codec/weight_codec.h"
#include "models/initializers.h"
#include "train/optimizer.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

TEST(OptimizerTest, SgdStepsAgainstTheGradient) {
  Optimizer opt(OptimizerConfig{.kind = "sgd"});
  Tensor w = Tensor::from_vector<float>({2}, {1.0f, -2.0f});
  Tensor g = Tensor::from_vector<float>({2}, {0.5f, 0.25f});
  opt.begin_step();
  opt.apply("w", w, g, 0.1, true);
  EXPECT_FLOAT_EQ(w.data<float>()[0], 0.95f);
  EXPECT_FLOAT_EQ(w.data<float>()[1], -2.025f);
}

TEST(OptimizerTest, MomentumAccumulatesVelocity) {
  Optimizer opt(OptimizerConfig{.kind = "momentum", .momentum = 0.5});
  Tensor w = Tensor::from_vector<float>({1}, {0.0f});
  Tensor g = Tensor::from_vector<float>({1}, {1.0f});
  for (int i = 0; i < 2; ++i) {
    opt.begin_step();
    opt.apply("w", w, g, 1.0, true);
  }
  EXPECT_FLOAT_EQ(w.data<float>()[0], -1.0f - 1.5f);
}

TEST(OptimizerTest, AdamFirstStepIsLearningRateTimesSign) {
  Optimizer opt(OptimizerConfig{.kind = "adam"});
  Tensor w = Tensor::from_vector<float>({2}, {0.0f, 0.0f});
  Tensor g = Tensor::from_vector<float>({2}, {3.0f, -0.01f});
  opt.begin_step();
  opt.apply("w", w, g, 0.01, true);
  EXPECT_NEAR(w.data<float>()[0], -0.01f, 1e-6);
  EXPECT_NEAR(w.data<float>()[1], 0.01f, 1e-5);
}

// An optimizer's weight against the formula computed one float at a time: equal on x86-64; on
// aarch64 GCC may fuse multiply-adds, differently in the two loops.
::testing::AssertionResult matches_formula(float got, float want) {
#if defined(__x86_64__)
  if (got == want) return ::testing::AssertionSuccess();
#else
  if (std::fabs(got - want) <= 1e-6f * std::max(1.0f, std::fabs(want)))
    return ::testing::AssertionSuccess();
#endif
  return ::testing::AssertionFailure() << got << " against the formula's " << want;
}

// Adam's update (AVX-512 where the CPU has it, on threads for large variables) is the formula
// computed one float at a time in the same order, bit for bit on x86-64: lengths around a vector
// of 16 and past the size that splits over threads, with weight decay, over three steps.
TEST(OptimizerTest, AdamMatchesTheScalarFormulaExactly) {
  const OptimizerConfig config{.kind = "adam", .weight_decay = 0.01};
  for (int64_t n : {1, 15, 17, 100003}) {
    Optimizer opt(config);
    Tensor w(DType::f32, {n}), g(DType::f32, {n});
    std::vector<float> want_w(static_cast<size_t>(n)), m(static_cast<size_t>(n), 0.0f),
        v(static_cast<size_t>(n), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      w.data<float>()[i] = want_w[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i));
      g.data<float>()[i] =
          1e-3f * std::cos(1.3f * static_cast<float>(i)) * static_cast<float>(i % 7);
    }
    const double lr = 0.002;
    for (double t = 1; t <= 3; ++t) {
      opt.begin_step();
      opt.apply("w", w, g, lr, true);
      const auto b1 = static_cast<float>(config.beta1), b2 = static_cast<float>(config.beta2);
      const auto step = static_cast<float>(lr * std::sqrt(1.0 - std::pow(config.beta2, t)) /
                                           (1.0 - std::pow(config.beta1, t)));
      const auto eps = static_cast<float>(config.epsilon);
      const float decay_step = static_cast<float>(lr) * static_cast<float>(config.weight_decay);
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        const float gi = g.data<float>()[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        want_w[i] -= step * m[i] / (std::sqrt(v[i]) + eps) + decay_step * want_w[i];
      }
      for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(matches_formula(w.data<float>()[i], want_w[static_cast<size_t>(i)]))
            << n << " floats, step " << t << ", at " << i;
    }
  }
}

// One more step of `a` and of `b` (restored from a's state) gives the same weights.
void expect_the_same_next_step(Optimizer& a, Optimizer& b, const Tensor& w, const Tensor& g) {
  Tensor w1 = w.clone(), w2 = w.clone();
  a.begin_step();
  a.apply("w", w1, g, 0.1, true);
  b.begin_step();
  b.apply("w", w2, g, 0.1, true);
  for (int64_t i = 0; i < w.numel(); ++i) EXPECT_EQ(w1.data<float>()[i], w2.data<float>()[i]);
}

// One-bit data parallelism gives Adam a second moment from outside (the ranks' own gradients):
// the update is Adam's with that second moment, each step at most the learning rate, bit for bit
// the scalar formula on x86-64 (AVX-512 where the CPU has it, on threads for large variables).
// With somewhere to round to, every optimizer writes the updated weights rounded to bf16 as
// float_to_bf16 rounds them (NaN included), and the weights themselves as without it.
TEST(OptimizerTest, RoundsTheUpdatedWeightsToBf16AsItWrites) {
  const std::vector<OptimizerConfig> configs = {
      {.kind = "sgd"}, {.kind = "momentum"}, {.kind = "adam", .weight_decay = 0.01},
      {.kind = "adam", .second_moment_from_outside = true}};
  for (const OptimizerConfig& config : configs) {
    for (int64_t n : {15, 100003}) {
      SCOPED_TRACE(config.kind + (config.second_moment_from_outside ? " (outside)" : "") +
                   ", n " + std::to_string(n));
      Tensor w(DType::f32, {n}), g(DType::f32, {n}), v(DType::f32, {n});
      for (int64_t i = 0; i < n; ++i) {
        w.data<float>()[i] = std::sin(0.37f * static_cast<float>(i));
        g.data<float>()[i] = 1e-2f * std::cos(1.3f * static_cast<float>(i));
        v.data<float>()[i] = 1e-4f;
      }
      w.data<float>()[n / 2] = std::nanf("");
      Tensor plain_w = w.clone();
      Optimizer rounding(config), plain(config);
      std::vector<uint16_t> rounded(static_cast<size_t>(n));
      for (int step = 0; step < 2; ++step) {
        for (Optimizer* o : {&rounding, &plain}) {
          o->begin_step();
          if (config.second_moment_from_outside) o->set_second_moment("w", v, 1);
        }
        rounding.apply("w", w, g, 0.01, true, rounded.data());
        plain.apply("w", plain_w, g, 0.01, true);
        ASSERT_EQ(std::memcmp(w.raw(), plain_w.raw(), w.bytes()), 0);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(rounded[static_cast<size_t>(i)], quant::float_to_bf16(w.data<float>()[i]))
              << "element " << i << " step " << step;
      }
    }
  }
}

TEST(OptimizerTest, AdamWithASecondMomentFromOutsideMatchesTheScalarFormula) {
  const OptimizerConfig config{.kind = "adam", .weight_decay = 0.01,
                               .second_moment_from_outside = true};
  for (int64_t n : {1, 15, 17, 100003}) {
    Optimizer opt(config);
    Tensor w(DType::f32, {n}), g(DType::f32, {n}), v(DType::f32, {n});
    std::vector<float> want_w(static_cast<size_t>(n)), m(static_cast<size_t>(n), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      w.data<float>()[i] = want_w[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i));
      g.data<float>()[i] = 1e-3f * std::cos(1.3f * static_cast<float>(i));
      // Some second moments far below the gradient's square: those steps are bounded.
      v.data<float>()[i] = i % 3 == 0 ? 1e-14f : 2e-9f * static_cast<float>(i % 5 + 1);
    }
    opt.begin_step();
    EXPECT_THROW(opt.apply("w", w, g, 0.002, true), Error) << "no second moment set yet";
    const double lr = 0.002;
    const int64_t second_steps = 7;
    opt.set_second_moment("w", v, second_steps);
    for (double t = 1; t <= 3; ++t) {
      if (t > 1) opt.begin_step();
      std::vector<float> before(w.data<float>(), w.data<float>() + n);
      opt.apply("w", w, g, lr, true);
      const auto b1 = static_cast<float>(config.beta1);
      const auto m_scale = static_cast<float>(1.0 / (1.0 - std::pow(config.beta1, t)));
      const auto v_scale =
          static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(config.beta2, second_steps)));
      const auto eps = static_cast<float>(config.epsilon);
      const float rate = static_cast<float>(lr);
      const float decay_step = rate * static_cast<float>(config.weight_decay);
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        m[i] = b1 * m[i] + (1.0f - b1) * g.data<float>()[i];
        const float a = m_scale * m[i];
        const float d = std::max(v_scale * std::sqrt(v.data<float>()[i]), std::fabs(a)) + eps;
        want_w[i] -= rate * a / d + decay_step * want_w[i];
      }
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(i);
        const float got = w.data<float>()[i];
        ASSERT_TRUE(matches_formula(got, want_w[k])) << n << " floats, step " << t << ", at " << i;
        const float decay = decay_step * before[k];
        ASSERT_LE(std::fabs(before[k] - got - decay), rate * 1.0001f) << "at " << i;
      }
    }
  }
}

TEST(OptimizerTest, SecondMomentFromOutsideRoundTripsAndIsRefusedByAnOwnOne) {
  const OptimizerConfig outside{.kind = "adam", .second_moment_from_outside = true};
  Optimizer a(outside);
  Tensor w = Tensor::from_vector<float>({2}, {1.0f, -1.0f});
  Tensor g = Tensor::from_vector<float>({2}, {0.5f, -0.25f});
  a.set_second_moment("w", Tensor::from_vector<float>({2}, {0.2f, 0.01f}), 3);
  a.begin_step();
  a.apply("w", w, g, 0.1, true);
  Optimizer b(outside);
  b.restore(a.state());
  EXPECT_EQ(b.second_moment_steps(), 3);
  expect_the_same_next_step(a, b, w, g);
  // An optimizer that keeps its own second moment goes on from the last one set.
  Optimizer own(OptimizerConfig{.kind = "adam"});
  own.restore(a.state());
  EXPECT_EQ(own.second_moment_steps(), 0);
  EXPECT_THROW(own.set_second_moment("w", g, 1), Error);
  EXPECT_THROW(a.set_second_moment("w", Tensor::from_vector<float>({1}, {1.0f}), 1), Error);
}

TEST(OptimizerTest, StateRoundTrips) {
  Optimizer a(OptimizerConfig{.kind = "adam"});
  Tensor w = Tensor::from_vector<float>({1}, {1.0f});
  Tensor g = Tensor::from_vector<float>({1}, {0.5f});
  a.begin_step();
  a.apply("w", w, g, 0.1, true);
  Optimizer b(OptimizerConfig{.kind = "adam"});
  b.restore(a.state());
  EXPECT_EQ(b.steps(), 1);
  expect_the_same_next_step(a, b, w, g);
}

TEST(OptimizerTest, UnknownOptimizerIsAnError) {
  EXPECT_THROW(Optimizer(OptimizerConfig{.kind = "adagrad"}), Error);
}

TEST(LrScheduleTest, Shapes) {
  LrSchedule constant{"constant", 0.1, 100};
  EXPECT_DOUBLE_EQ(constant.at(99), 0.1);
  LrSchedule step{"step", 0.1, 100};
  EXPECT_DOUBLE_EQ(step.at(10), 0.1);
  EXPECT_NEAR(step.at(60), 0.01, 1e-12);
  EXPECT_NEAR(step.at(80), 0.001, 1e-12);
  LrSchedule cosine{"cosine", 0.1, 100};
  EXPECT_DOUBLE_EQ(cosine.at(0), 0.1);
  EXPECT_NEAR(cosine.at(50), 0.05, 1e-12);
  EXPECT_NEAR(cosine.at(100), 0.0, 1e-12);
}

TEST(InitializerTest, HeAndGlorotHaveTheRightScale) {
  std::mt19937_64 rng(1);
  Tensor t(DType::f32, {100000});
  initialize(t, parse_initializer("he"), 50, 50, rng);
  double sum2 = 0;
  for (int64_t i = 0; i < t.numel(); ++i) sum2 += t.data<float>()[i] * t.data<float>()[i];
  EXPECT_NEAR(sum2 / t.numel(), 2.0 / 50, 0.002);
  initialize(t, parse_initializer("glorot"), 50, 50, rng);
  float limit = std::sqrt(6.0f / 100);
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_LE(std::abs(t.data<float>()[i]), limit);
  initialize(t, parse_initializer("truncated_normal:0.1"), 1, 1, rng);
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_LE(std::abs(t.data<float>()[i]), 0.2f + 1e-6f);
  EXPECT_THROW(parse_initializer("uniformish"), Error);
}

}  // namespace
}  // namespace sf
