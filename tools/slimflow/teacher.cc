#include "teacher.h"

#include <filesystem>

#include "core/error.h"
#include "io/image.h"
#include "model_io.h"
#include "ops/op_names.h"
#include "runtime/session.h"
#include "train/training_run.h"

namespace sf::cli {

namespace {

// A run's model in inference mode (dropout off, batch-norm on its moving statistics).
struct RunTeacher {
  Model model;
  std::unique_ptr<Session> session;
};

// The node whose output 0 is a model file's logits: `requested`, or the input of a final
// Softmax, or the output itself.
Output find_logits(const ModelToRun& model, const std::string& path, const std::string& requested) {
  const Graph& g = model.file.graph;
  Output logits;
  if (!requested.empty()) {
    const int id = g.find(requested);
    if (id < 0) fail("{}: --teacher-logits: no node named '{}'", path, requested);
    logits = Output{id, 0};
  } else {
    logits = model.output_ports.at(0);
    // Imported models name their outputs with Identity nodes.
    auto skip_identities = [&] {
      while (g.node(logits.node).op == op_names::kIdentity) logits = g.node(logits.node).inputs.at(0);
    };
    skip_identities();
    if (g.node(logits.node).op == op_names::kSoftmax) {
      logits = g.node(logits.node).inputs.at(0);
      skip_identities();
    }
  }
  const Shape& shape = g.type(logits).shape;
  if (shape.size() != 2 || shape[1] < 2)
    fail("{}: teacher node '{}' ({}) is {}, not logits [batch, classes]; name the logits with "
         "--teacher-logits NODE",
         path, g.node(logits.node).name, g.node(logits.node).op, shape_str(shape));
  return logits;
}

void check_images(const Shape& want_hwc, const Tensor& images, const std::string& path) {
  const Shape got = {images.dim(1), images.dim(2), images.dim(3)};
  if (got != want_hwc)
    fail("{}: the teacher takes images {} (HWC), the data set's are {}", path,
         shape_str(want_hwc), shape_str(got));
}

std::shared_ptr<Distillation> run_teacher(const TeacherSource& source,
                                          std::shared_ptr<Distillation> d) {
  const TrainingRun run(source.path);
  if (!source.logits_node.empty())
    fail("{}: --teacher-logits names a node of a model file; a run's teacher is its logits",
         source.path);
  auto teacher = std::make_shared<RunTeacher>();
  teacher->model = build_model(run.spec(), 1);
  auto store = std::make_shared<VariableStore>();
  run.restore_variables(*store, teacher->model);
  teacher->session = std::make_unique<Session>(teacher->model.graph,
                                               SessionOptions{.threads = source.threads}, store);
  d->classes = run.spec().classes;
  const Shape hwc = run.spec().input;
  const std::string path = source.path;
  d->teacher_logits = [teacher, hwc, path](const Tensor& images) {
    check_images(hwc, images, path);
    return teacher->session->run({{teacher->model.input, images}}, {teacher->model.logits})[0]
        .clone();
  };
  return d;
}

struct FileTeacher {
  ModelToRun model;
  ImagePort port;
  Output logits;
  std::unique_ptr<Session> session;
  float mean = 0.0f, std = 255.0f;
};

std::shared_ptr<Distillation> file_teacher(const TeacherSource& source,
                                           std::shared_ptr<Distillation> d) {
  auto teacher = std::make_shared<FileTeacher>();
  teacher->model = open_model_to_run(source.path);
  const ModelFile& file = teacher->model.file;
  if (file.inputs.size() != 1)
    fail("{}: a teacher needs one input, the model has {}", source.path, file.inputs.size());
  const Shape hwc = image_input_hwc(file);
  if (hwc.empty())
    fail("{}: input '{}' is {}, not an image batch", source.path, file.inputs[0],
         shape_str(teacher->model.input_type(0).shape));
  teacher->logits = find_logits(teacher->model, source.path, source.logits_node);
  d->classes = file.graph.type(teacher->logits).shape[1];
  d->description["teacher_logits"] = file.graph.node(teacher->logits.node).name;
  // Data sets hold pixels / 255; the model wants (pixel - mean) / std, as `eval` feeds it.
  teacher->mean = static_cast<float>(metadata_number(file, "input_mean", 0.0));
  teacher->std = static_cast<float>(metadata_number(file, "input_std", 255.0));
  teacher->port = take_nhwc_images(teacher->model);
  teacher->session = std::make_unique<Session>(teacher->model.file.graph,
                                               SessionOptions{.threads = source.threads});
  const std::string path = source.path;
  d->teacher_logits = [teacher, hwc, path](const Tensor& images) {
    check_images(hwc, images, path);
    Tensor scaled = images.clone();
    float* p = scaled.data<float>();
    const float scale = 255.0f / teacher->std, shift = teacher->mean / teacher->std;
    for (int64_t i = 0; i < scaled.numel(); ++i) p[i] = p[i] * scale - shift;
    if (teacher->port.nchw) scaled = nhwc_to_nchw(scaled);
    Tensor logits = teacher->session->run({{teacher->port.port, scaled}}, {teacher->logits})[0];
    return logits.clone().reshaped({images.dim(0), logits.numel() / images.dim(0)});
  };
  return d;
}

}  // namespace

std::shared_ptr<Distillation> open_teacher(const TeacherSource& source) {
  check_distillation_weights(source.temperature, source.alpha);
  if (source.path.empty()) fail("distill: --teacher is required (a run, .sfm or .onnx)");
  if (!std::filesystem::exists(source.path)) fail("{}: no such teacher", source.path);
  auto d = std::make_shared<Distillation>();
  d->temperature = source.temperature;
  d->alpha = source.alpha;
  d->description = {{"teacher", source.path},
                    {"temperature", source.temperature},
                    {"alpha", source.alpha}};
  return std::filesystem::is_directory(source.path) ? run_teacher(source, d)
                                                    : file_teacher(source, d);
}

}  // namespace sf::cli
