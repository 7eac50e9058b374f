#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "autodiff/gradients.h"
#include "ops/ops.h"
#include "runtime/session.h"
#include "support/cli.h"
#include "support/mnist.h"
#include "support/temp_files.h"
#include "support/onnx_models.h"
#include "support/testing.h"
#include "train/distillation.h"
#include "train/trainer.h"
#include "train/training_run.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

constexpr int64_t kRows = 4, kClasses = 5;

std::vector<double> softmax_row(const float* z, int64_t classes, double temperature) {
  std::vector<double> p(static_cast<size_t>(classes));
  double max = z[0];
  for (int64_t c = 1; c < classes; ++c) max = std::max<double>(max, z[c]);
  double sum = 0.0;
  for (int64_t c = 0; c < classes; ++c) sum += p[c] = std::exp((z[c] - max) / temperature);
  for (double& v : p) v /= sum;
  return p;
}

// The objective written out in doubles: alpha T^2 KL(q || p_T) + (1 - alpha) CE, and its
// gradient with respect to the student's logits.
struct Direct {
  double loss = 0.0;
  std::vector<double> grad;
};

Direct direct(const Tensor& student, const Tensor& teacher, const Tensor& labels, double t,
              double alpha) {
  Direct d;
  d.grad.assign(static_cast<size_t>(student.numel()), 0.0);
  const int64_t rows = student.dim(0), classes = student.dim(1);
  for (int64_t n = 0; n < rows; ++n) {
    const float* zs = student.data<float>() + n * classes;
    const float* zt = teacher.data<float>() + n * classes;
    std::vector<double> q = softmax_row(zt, classes, t), p = softmax_row(zs, classes, t),
                        p1 = softmax_row(zs, classes, 1.0);
    const int32_t y = labels.data<int32_t>()[n];
    double kl = 0.0;
    for (int64_t c = 0; c < classes; ++c) {
      if (q[c] > 0) kl += q[c] * (std::log(q[c]) - std::log(p[c]));
      d.grad[n * classes + c] = (alpha * t * (p[c] - q[c]) + (1 - alpha) * (p1[c] - (c == y))) /
                                static_cast<double>(rows);
    }
    d.loss += (alpha * t * t * kl - (1 - alpha) * std::log(p1[y])) / static_cast<double>(rows);
  }
  return d;
}

struct Computed {
  double loss;
  Tensor grad;
};

Computed computed(const Tensor& student, const Tensor& teacher, const Tensor& labels, double t,
                  double alpha) {
  Graph g;
  Output zs = ops::placeholder(g, DType::f32, student.shape(), "student");
  Output zt = ops::placeholder(g, DType::f32, teacher.shape(), "teacher");
  Output y = ops::placeholder(g, DType::i32, labels.shape(), "labels");
  Output ce = ops::softmax_cross_entropy(g, zs, y, "ce");
  Output loss = distillation_loss(g, zs, zt, ce, t, alpha);
  Output grad = gradients(g, loss, {zs})[0];
  Session session(g);
  auto out = session.run({{zs, student}, {zt, teacher}, {y, labels}}, {loss, grad});
  return {*out[0].data<float>(), out[1].clone()};
}

TEST(DistillationLossTest, LossAndGradientMatchADirectComputation) {
  const Tensor student = testing::random_tensor({kRows, kClasses}, 1, -3, 3);
  const Tensor teacher = testing::random_tensor({kRows, kClasses}, 2, -6, 6);
  const Tensor labels = testing::random_labels(kRows, kClasses, 3);
  for (double t : {0.5, 1.0, 4.0, 20.0})
    for (double alpha : {0.0, 0.3, 0.9, 1.0}) {
      SCOPED_TRACE(fmt::format("T {} alpha {}", t, alpha));
      const Direct want = direct(student, teacher, labels, t, alpha);
      const Computed got = computed(student, teacher, labels, t, alpha);
      EXPECT_NEAR(got.loss, want.loss, 1e-4 + 1e-4 * std::abs(want.loss));
      for (int64_t i = 0; i < student.numel(); ++i)
        EXPECT_NEAR(got.grad.data<float>()[i], want.grad[i], 1e-5 + 1e-4 * std::abs(want.grad[i]));
    }
}

TEST(DistillationLossTest, GradientMatchesFiniteDifferences) {
  const Tensor teacher = testing::random_tensor({kRows, kClasses}, 5, -4, 4);
  const Tensor labels = testing::random_labels(kRows, kClasses, 6);
  for (double t : {1.0, 3.0, 10.0})
    for (double alpha : {0.0, 0.5, 1.0}) {
      SCOPED_TRACE(fmt::format("T {} alpha {}", t, alpha));
      testing::expect_gradients_match(
          [&](Graph& g, const std::vector<Output>& in) {
            Output ce = ops::softmax_cross_entropy(g, in[0], ops::constant(g, labels), "ce");
            return distillation_loss(g, in[0], ops::constant(g, teacher), ce, t, alpha);
          },
          {testing::random_tensor({kRows, kClasses}, 7, -2, 2)}, 11);
    }
}

TEST(DistillationLossTest, IsZeroWhenTheStudentMatchesTheTeacherAndAlphaIsOne) {
  const Tensor logits = testing::random_tensor({kRows, kClasses}, 8, -5, 5);
  const Computed got = computed(logits, logits, testing::random_labels(kRows, kClasses, 9), 3, 1);
  EXPECT_NEAR(got.loss, 0.0, 1e-5);
  for (float g : testing::values<float>(got.grad)) EXPECT_NEAR(g, 0.0, 1e-6);
}

TEST(DistillationLossTest, AlphaZeroIsPlainCrossEntropy) {
  const Tensor student = testing::random_tensor({kRows, kClasses}, 10, -3, 3);
  const Tensor teacher = testing::random_tensor({kRows, kClasses}, 11, -3, 3);
  const Tensor labels = testing::random_labels(kRows, kClasses, 12);
  Graph g;
  Output zs = ops::placeholder(g, DType::f32, student.shape(), "student");
  Output y = ops::placeholder(g, DType::i32, labels.shape(), "labels");
  Output ce = ops::softmax_cross_entropy(g, zs, y, "ce");
  Output grad = gradients(g, ce, {zs})[0];
  Session session(g);
  auto out = session.run({{zs, student}, {y, labels}}, {ce, grad});
  for (double t : {1.0, 20.0}) {
    const Computed got = computed(student, teacher, labels, t, 0.0);
    EXPECT_FLOAT_EQ(static_cast<float>(got.loss), *out[0].data<float>());
    testing::expect_close(out[1], got.grad, {.rtol = 1e-6, .atol = 1e-7}, "alpha 0 gradient");
  }
}

// As T grows, the soft term's gradient becomes logit matching (Hinton et al. 2015, section
// 2.1): alpha / (N C) * ((z_s - mean z_s) - (z_t - mean z_t)).
TEST(DistillationLossTest, LargeTemperatureMatchesCenteredLogits) {
  const Tensor student = testing::random_tensor({kRows, kClasses}, 13, -2, 2);
  const Tensor teacher = testing::random_tensor({kRows, kClasses}, 14, -2, 2);
  const Tensor labels = testing::random_labels(kRows, kClasses, 15);
  const double alpha = 0.7;
  const Computed got = computed(student, teacher, labels, 1000.0, alpha);
  for (int64_t n = 0; n < kRows; ++n) {
    double mean_s = 0, mean_t = 0;
    for (int64_t c = 0; c < kClasses; ++c) {
      mean_s += student.data<float>()[n * kClasses + c] / kClasses;
      mean_t += teacher.data<float>()[n * kClasses + c] / kClasses;
    }
    // The hard term's share, (1 - alpha) * (softmax - onehot) / N, is subtracted first.
    std::vector<double> p = softmax_row(student.data<float>() + n * kClasses, kClasses, 1.0);
    for (int64_t c = 0; c < kClasses; ++c) {
      const int64_t i = n * kClasses + c;
      const double hard = (1 - alpha) * (p[c] - (c == labels.data<int32_t>()[n])) / kRows;
      const double want = alpha / (kRows * kClasses) *
                          ((student.data<float>()[i] - mean_s) - (teacher.data<float>()[i] - mean_t));
      EXPECT_NEAR(got.grad.data<float>()[i] - hard, want, 2e-3 * std::abs(want) + 2e-5) << i;
    }
  }
}

TEST(DistillationLossTest, RejectsBadTemperatureAlphaAndClassCounts) {
  testing::expect_error([] { check_distillation_weights(0.0, 0.5); }, "--temperature must be a positive");
  testing::expect_error([] { check_distillation_weights(-1.0, 0.5); }, "--temperature");
  testing::expect_error([] { check_distillation_weights(NAN, 0.5); }, "--temperature");
  testing::expect_error([] { check_distillation_weights(2.0, 1.5); }, "--alpha must be in [0, 1]");
  testing::expect_error([] { check_distillation_weights(2.0, -0.1); }, "--alpha");
  Graph g;
  Output zs = ops::placeholder(g, DType::f32, {4, 10}, "student");
  Output zt = ops::placeholder(g, DType::f32, {4, 5}, "teacher");
  Output y = ops::placeholder(g, DType::i32, {4}, "labels");
  Output ce = ops::softmax_cross_entropy(g, zs, y, "ce");
  testing::expect_error([&] { distillation_loss(g, zs, zt, ce, 2.0, 0.5); },
                        "class counts differ");
}

// --- Training with a teacher ---------------------------------------------------------------

std::string write_mlp_spec(const std::string& dir, int64_t hidden) {
  const std::string path = dir + "/mlp.yaml";
  std::ofstream(path) << fmt::format(
      "name: mlp-test\ninput: [28, 28, 1]\nclasses: 10\nlayers:\n"
      "  - {{name: flatten, type: flatten}}\n"
      "  - {{name: fc1, type: dense, units: {}, activation: relu}}\n"
      "  - {{name: fc2, type: dense, units: 10}}\n",
      hidden);
  return path;
}

TrainOptions mlp_options(const std::string& spec, const std::string& out, int64_t train_limit,
                         int64_t epochs) {
  TrainOptions o;
  o.model_path = spec;
  o.out_dir = out;
  o.data = "mnist";
  o.epochs = epochs;
  o.batch = 32;
  o.train_limit = train_limit;
  o.test_limit = 1000;
  o.threads = 1;
  o.seed = 5;
  return o;
}

// A teacher trained on 4000 images teaches a student that sees only 300 labelled ones: the
// soft targets carry what the labels of the other images would have said.
TEST(DistillTrainingTest, DistilledStudentBeatsTheSameStudentFromLabels) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("sf-distill");
  const std::string spec = write_mlp_spec(dir, 64);
  train(mlp_options(spec, dir + "/teacher", 4000, 3), {});

  RunEvaluator teacher_model(dir + "/teacher", "mnist", 0, 1);
  TrainingRun teacher_run(dir + "/teacher");
  Model model = build_model(teacher_run.spec(), 1);
  auto store = std::make_shared<VariableStore>();
  teacher_run.restore_variables(*store, model);
  auto session = std::make_shared<Session>(model.graph, SessionOptions{.threads = 1}, store);
  int64_t teacher_calls = 0;
  auto distillation = std::make_shared<Distillation>();
  distillation->temperature = 4.0;
  distillation->alpha = 0.9;
  distillation->classes = 10;
  distillation->description = {{"teacher", "test"}};
  distillation->teacher_logits = [&](const Tensor& images) {
    ++teacher_calls;
    return session->run({{model.input, images}}, {model.logits})[0].clone();
  };

  const double alone =
      train(mlp_options(spec, dir + "/alone", 300, 8), {}).back().test_accuracy;
  TrainOptions distilled_options = mlp_options(spec, dir + "/distilled", 300, 8);
  distilled_options.distillation = distillation;
  const double distilled = train(distilled_options, {}).back().test_accuracy;
  RecordProperty("alone_accuracy", std::to_string(alone));
  RecordProperty("distilled_accuracy", std::to_string(distilled));
  EXPECT_GT(distilled, alone + 0.02) << "alone " << alone << ", distilled " << distilled;
  // Inputs never change, so the teacher ran once over the 300 images (batches of 32), not
  // once per step of the 8 epochs.
  EXPECT_EQ(teacher_calls, 10);
  // The result is an ordinary run that remembers its teacher.
  TrainingRun run(dir + "/distilled");
  EXPECT_EQ(run.metadata().at("distill").at("teacher"), "test");
  testing::expect_error(
      [&] {
        TrainOptions resume;
        resume.resume_dir = dir + "/distilled";
        train(resume, {});
      },
      "a distillation run; resume it with slimflow distill --resume");
  std::filesystem::remove_all(dir);
}

// Augmentation changes the inputs every epoch, so the teacher runs on every batch instead.
TEST(DistillTrainingTest, TeacherRunsOnEveryAugmentedBatch) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("sf-distill-aug");
  const std::string spec = write_mlp_spec(dir, 16);
  auto distillation = std::make_shared<Distillation>();
  distillation->classes = 10;
  distillation->temperature = 2.0;
  std::vector<Tensor> seen;
  distillation->teacher_logits = [&](const Tensor& images) {
    seen.push_back(images.clone());
    Tensor logits(DType::f32, {images.dim(0), 10});
    std::fill(logits.data<float>(), logits.data<float>() + logits.numel(), 0.0f);
    return logits;
  };
  TrainOptions o = mlp_options(spec, dir + "/run", 64, 2);
  o.distillation = distillation;
  o.augment = "shift:2";
  train(o, {});
  ASSERT_EQ(seen.size(), 4u);  // 2 batches x 2 epochs
  EXPECT_EQ(TrainingRun(dir + "/run").metadata().at("options").at("augment"), "shift:2");
  std::filesystem::remove_all(dir);
}

TEST(DistillCliTest, TeachesFromARunAndAFrozenModelAndRejectsBadInput) {
  REQUIRE_MNIST();
  const std::string dir = testing::make_temp_dir("sf-distill-cli");
  const std::string spec = write_mlp_spec(dir, 32);
  const std::string small = " --train-limit 256 --test-limit 200 --batch 32 --threads 1 --quiet";
  auto ok = [](const testing::CliResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return r;
  };
  ok(testing::run_cli("train --model " + spec + " --epochs 1 --out " + dir + "/teacher" + small));
  ok(testing::run_cli("freeze " + dir + "/teacher --out " + dir + "/teacher.sfm"));
  ok(testing::run_cli("distill --teacher " + dir + "/teacher --student " + spec +
                      " --temperature 5 --alpha 0.8 --epochs 1 --out " + dir + "/s1" + small));
  testing::CliResult from_file =
      ok(testing::run_cli("distill --teacher " + dir + "/teacher.sfm --student " + spec +
                          " --epochs 1 --json --out " + dir + "/s2" + small, false));
  EXPECT_NE(from_file.out.find("\"test_accuracy\""), std::string::npos) << from_file.out;
  // The frozen model's output is a softmax: the teacher's logits are found as its input.
  EXPECT_EQ(TrainingRun(dir + "/s2").metadata().at("distill").at("teacher_logits"), "fc2");
  // Any model can teach: an ONNX model (NCHW input, Gemm logits, Softmax), its logits found as
  // the softmax's input.
  onnx::ModelProto m = testing::new_onnx_model();
  testing::add_input(m, "image", {-1, 1, 28, 28});
  testing::add_node(m, "Flatten", {"image"}, {"flat"});
  testing::add_init(m, "w", {784, 10}, testing::random_values(7840, 4));
  testing::add_init(m, "b", {10}, testing::random_values(10, 5));
  testing::add_node(m, "Gemm", {"flat", "w", "b"}, {"scores"}, "scores");
  testing::add_node(m, "Softmax", {"scores"}, {"probs"});
  testing::add_output(m, "probs");
  testing::write_onnx_model(m, dir + "/teacher.onnx");
  ok(testing::run_cli("distill --teacher " + dir + "/teacher.onnx --student " + spec +
                      " --epochs 1 --out " + dir + "/s3" + small));
  EXPECT_EQ(TrainingRun(dir + "/s3").metadata().at("distill").at("teacher_logits"), "scores/matmul");
  // Resuming takes the teacher from the run and adds epochs; the result freezes as any run.
  ok(testing::run_cli("distill --resume " + dir + "/s2 --epochs 1 --quiet --threads 1"));
  EXPECT_EQ(TrainingRun(dir + "/s2").metadata().at("history").size(), 2u);
  ok(testing::run_cli("freeze " + dir + "/s2 --out " + dir + "/s2.sfm"));

  auto expect_cli_error = [&](const std::string& args, const std::string& want) {
    testing::CliResult r = testing::run_cli(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.out.find("slimflow: error: " ), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
  };
  const std::string base = "distill --student " + spec + " --epochs 1 --out " + dir + "/bad" + small;
  expect_cli_error(base + " --teacher " + dir + "/teacher --temperature 0",
                   "--temperature must be a positive number, got 0");
  expect_cli_error(base + " --teacher " + dir + "/teacher --alpha 1.5",
                   "--alpha must be in [0, 1], got 1.5");
  expect_cli_error(base + " --teacher " + dir + "/teacher.sfm --teacher-logits fc1",
                   "the teacher has 32 classes, the student mlp-test");
  expect_cli_error(base + " --teacher " + dir + "/teacher.sfm --teacher-logits input",
                   "teacher node 'input' (Placeholder) is [1,28,28,1], not logits [batch, classes]");
  expect_cli_error(base + " --teacher " + dir + "/teacher.sfm --teacher-logits nope",
                   "no node named 'nope'");
  expect_cli_error(base + " --teacher " + dir + "/missing", "no such teacher");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sf
