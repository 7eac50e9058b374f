#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "io/dataset.h"
#include "io/image.h"
#include "io/image_folder.h"
#include "model_io.h"
#include "train/trainer.h"

namespace sf::cli {

namespace {

// Accuracy of a deployed model (.sfm / .onnx) on a data set's test split.
// Runs in `precision` (a --precision value, or empty for the model's), which `chosen` reports.
EvalResult evaluate_model_file(const std::string& path, const std::string& data, int64_t limit,
                               SessionOptions options, const std::string& precision,
                               PrecisionChoice& chosen,
                               const std::map<std::string, Shape>& input_shapes) {
  const Dataset all = load_test_split(data);
  Dataset test = limit > 0 && limit < all.size() ? take(all, limit) : all;
  Shape example = {test.images.dim(1), test.images.dim(2), test.images.dim(3)};
  ModelToRun model = open_model_to_run(
      path, image_input_shapes(path, input_shapes, example[0], example[1], example[2]));
  const ModelFile& file = model.file;
  if (file.inputs.size() != 1) fail("{}: eval needs a model with one input", path);
  if (image_input_hwc(file) != example)
    fail("{}: input '{}' is {}, but {} images are {} (HWC)", path, file.inputs[0],
         shape_str(model.input_type(0).shape), data, shape_str(example));
  // Data sets hold pixels / 255; the model wants (pixel - mean) / std.
  const float mean = static_cast<float>(metadata_number(file, "input_mean", 0.0));
  const float std = static_cast<float>(metadata_number(file, "input_std", 255.0));
  const ImagePort images = take_nhwc_images(model);
  chosen = choose_model_precision(file, path, precision, options);
  Session session(file.graph, options);
  BatchIterator it(test, BatchOptions{.batch_size = 100, .shuffle = false});
  Tensor batch, labels;
  EvalResult result;
  int64_t correct = 0;
  double loss = 0.0;
  while (it.next(batch, labels)) {
    Tensor scaled = batch.clone();
    float* p = scaled.data<float>();
    for (int64_t i = 0; i < scaled.numel(); ++i) p[i] = (p[i] * 255.0f - mean) / std;
    if (images.nchw) scaled = nhwc_to_nchw(scaled);
    Tensor out = session.run({{images.port, scaled}}, {model.output_ports[0]})[0];
    Tensor probs = as_probabilities(out);
    const int64_t classes = probs.dim(1);
    for (int64_t b = 0; b < probs.dim(0); ++b) {
      const float* row = probs.data<float>() + b * classes;
      int64_t best = std::max_element(row, row + classes) - row;
      int32_t label = labels.data<int32_t>()[b];
      correct += best == label;
      loss -= std::log(std::max(label < classes ? row[label] : 0.0f, 1e-12f));
    }
    result.count += probs.dim(0);
  }
  result.accuracy = result.count ? static_cast<double>(correct) / static_cast<double>(result.count) : 0;
  result.loss = result.count ? loss / static_cast<double>(result.count) : 0;
  return result;
}

// Accuracy of a deployed model on the test split of a folder of labelled images (as `retrain`
// takes them): the split by name hash with the percentages the model stores, the folder's
// labels matched to the model's by name, each image preprocessed as the model's metadata says.
EvalResult evaluate_on_images(const std::string& path, const std::string& images, int64_t limit,
                              SessionOptions options, const std::string& precision,
                              PrecisionChoice& chosen) {
  ModelToRun model = open_model_to_run(path);
  const ModelFile& file = model.file;
  if (file.inputs.size() != 1) fail("{}: eval needs a model with one input", path);
  const Shape hwc = image_input_hwc(file);
  if (hwc.empty())
    fail("{}: input '{}' is {}, not an image batch", path, file.inputs[0],
         shape_str(model.input_type(0).shape));
  const std::vector<std::string> names = metadata_labels(file, path);
  if (names.empty())
    fail("{}: stores no label names (metadata 'labels'); eval --images needs a model from "
         "slimflow retrain",
         path);
  const ImageFolder folder = list_image_folder(images);
  std::vector<int64_t> class_of;  // folder label -> the model's class
  for (const std::string& label : folder.labels) {
    auto it = std::find(names.begin(), names.end(), label);
    if (it == names.end())
      fail("{}: label folder '{}' is not one of the model's labels", images, label);
    class_of.push_back(it - names.begin());
  }
  const double validation = metadata_number(file, "retrain_validation_percent", 10.0);
  const double test_share = metadata_number(file, "retrain_test_percent", 10.0);
  const float mean = static_cast<float>(metadata_number(file, "input_mean", 0.0));
  const float std = static_cast<float>(metadata_number(file, "input_std", 255.0));
  if (!std::isfinite(std) || std == 0.0f)
    fail("{}: its metadata input_std {} must be finite and non-zero", path, std);
  const ImagePort port = take_nhwc_images(model);
  chosen = choose_model_precision(file, path, precision, options);
  Session session(file.graph, options);
  EvalResult result;
  int64_t correct = 0;
  double loss = 0.0;
  for (const LabeledImage& img : folder.images) {
    if (split_of(img.name, validation, test_share) != Split::kTest) continue;
    if (limit > 0 && result.count >= limit) break;
    Tensor input = image_to_tensor(decode_image(img.path), hwc[1], hwc[0], hwc[2], mean, std);
    if (port.nchw) input = nhwc_to_nchw(input);
    const Tensor probs = as_probabilities(session.run({{port.port, input}}, {model.output_ports[0]})[0]);
    const float* p = probs.data<float>();
    const int64_t want = class_of[static_cast<size_t>(img.label)];
    correct += std::max_element(p, p + probs.dim(1)) - p == want;
    loss -= std::log(std::max(want < probs.dim(1) ? p[want] : 0.0f, 1e-12f));
    ++result.count;
  }
  if (result.count == 0) fail("{}: no image falls in the test split", images);
  result.accuracy = static_cast<double>(correct) / static_cast<double>(result.count);
  result.loss = loss / static_cast<double>(result.count);
  return result;
}

}  // namespace

Action add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Evaluate a model on a data set's test split");
  struct Args {
    std::string model;
    std::string data = "mnist", images;
    int64_t limit = 0;
    int threads = 0;
    bool json = false;
    std::vector<std::string> input_shapes;
    std::string precision;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--model", args->model,
                  "A run directory (slimflow train) or a model file (.sfm, .onnx)")
      ->required();
  CLI::Option* data =
      cmd->add_option("--data", args->data, "mnist, fashion-mnist, or a folder of IDX files")
          ->default_str("mnist");
  cmd->add_option("--images", args->images,
                  "Instead of --data: a folder with one subfolder of images per label, as "
                  "retrain takes it; evaluates a retrained model (.sfm) on its test split")
      ->excludes(data);
  cmd->add_option("--limit", args->limit, "Evaluate only the first N test examples");
  cmd->add_option("--threads", args->threads, "Threads (0: all cores)");
  add_precision_option(cmd, args->precision);
  cmd->add_flag("--json", args->json, "Print one JSON object on stdout");
  cmd->add_option("--input-shape", args->input_shapes,
                  "Specialize a symbolic ONNX input, NAME=D1,D2,... (repeatable; by default "
                  "the data set's image size)");
  return [args]() {
    const bool run_dir = args->images.empty() && std::filesystem::is_directory(args->model);
    PrecisionChoice precision;
    if (run_dir && !args->precision.empty() &&
        choose_precision(args->precision, "--precision").precision != Precision::fp32)
      fail("--precision {}: a run directory evaluates its training graph in fp32; freeze it and "
           "evaluate the .sfm",
           args->precision);
    const SessionOptions options{.threads = args->threads};
    EvalResult r = !args->images.empty()
                       ? evaluate_on_images(args->model, args->images, args->limit, options,
                                            args->precision, precision)
                   : run_dir
                       ? evaluate_run(args->model, args->data, args->limit, args->threads)
                       : evaluate_model_file(args->model, args->data, args->limit, options,
                                             args->precision, precision,
                                             parse_input_shapes(args->input_shapes));
    if (args->json) {
      nlohmann::json j = {{"accuracy", r.accuracy},
                          {"count", r.count},
                          {"loss", r.loss},
                          {"precision", precision_name(precision.precision)}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("accuracy %.2f%% on %lld images (loss %.4f)\n", 100.0 * r.accuracy,
                  static_cast<long long>(r.count), r.loss);
    }
    return 0;
  };
}

}  // namespace sf::cli
