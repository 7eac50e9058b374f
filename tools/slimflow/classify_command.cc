// `slimflow classify`: label_image for slimflow models — decode, resize, normalise, top-k.
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>

#include "commands.h"
#include "io/image.h"
#include "model_io.h"

namespace sf::cli {

namespace {

std::vector<std::string> read_labels(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open label file", path);
  std::vector<std::string> labels;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    check_printable_label(line, fmt::format("{}:{}", path, labels.size() + 1));
    labels.push_back(line);
  }
  while (!labels.empty() && labels.back().empty()) labels.pop_back();
  return labels;
}

}  // namespace

Action add_classify_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "classify", "Classify an image (PNG, JPEG, BMP, GIF, TGA or PGM/PPM): top-k labels");
  struct Args {
    std::string model, image, labels;
    int64_t top = 5, width = 0, height = 0;
    std::optional<float> mean, std;
    int threads = 0;
    std::vector<std::string> input_shapes;
    std::string precision;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--model", a->model, "Model (.sfm or .onnx)")->required();
  cmd->add_option("--image", a->image, "Image file")->required();
  cmd->add_option("--labels", a->labels,
                  "Label file, one label per line, in class order (default: the labels the model "
                  "stores, as retrain writes them)");
  cmd->add_option("--top", a->top, "How many labels to print")->default_val(5);
  cmd->add_option("--width", a->width, "Resize to this width (default: the model's)");
  cmd->add_option("--height", a->height, "Resize to this height (default: the model's)");
  cmd->add_option("--input-mean", a->mean, "Subtracted from each pixel (0..255) before scaling");
  cmd->add_option("--input-std", a->std, "Pixels are divided by this after the mean");
  cmd->add_option("--threads", a->threads, "Threads (0: all cores)");
  add_precision_option(cmd, a->precision);
  cmd->add_option("--input-shape", a->input_shapes,
                  "Specialize a symbolic ONNX input, NAME=D1,D2,... (repeatable; by default "
                  "--height/--width or the image's own size)");
  return [a]() {
    Image image = decode_image(a->image);
    ModelToRun model = open_model_to_run(
        a->model, image_input_shapes(a->model, parse_input_shapes(a->input_shapes),
                                     a->height ? a->height : image.height,
                                     a->width ? a->width : image.width, image.channels));
    const ModelFile& file = model.file;
    if (file.inputs.size() != 1) fail("{}: classify needs a model with one input", a->model);
    const Shape hwc = image_input_hwc(file);
    if (hwc.empty())
      fail("{}: input '{}' is {}, not an image batch", a->model, file.inputs[0],
           shape_str(model.input_type(0).shape));
    const int64_t channels = hwc[2];
    const int64_t height = a->height ? a->height : hwc[0];
    const int64_t width = a->width ? a->width : hwc[1];
    const float mean =
        a->mean.value_or(static_cast<float>(metadata_number(file, "input_mean", 0.0)));
    const float std =
        a->std.value_or(static_cast<float>(metadata_number(file, "input_std", 255.0)));
    if (!std::isfinite(std) || std == 0.0f) {
      if (a->std) fail("--input-std {} must be finite and non-zero", std);
      fail("{}: its metadata input_std {} must be finite and non-zero", a->model, std);
    }
    if (channels != 1 && channels != 3 && channels != image.channels)
      fail("{}: {}-channel image; {} takes {} channels (gray or RGB images convert to 1 or 3)",
           a->image, image.channels, a->model, channels);
    Tensor input = image_to_tensor(image, width, height, channels, mean, std);
    const ImagePort images = take_nhwc_images(model);
    if (images.nchw) input = nhwc_to_nchw(input);
    SessionOptions options{.threads = a->threads};
    choose_model_precision(file, a->model, a->precision, options);
    Session session(file.graph, options);
    Tensor out = session.run({{images.port, input}}, {model.output_ports[0]})[0];
    Tensor probs = as_probabilities(out);
    const int64_t classes = probs.dim(1);
    std::vector<std::string> labels =
        a->labels.empty() ? metadata_labels(file, a->model) : read_labels(a->labels);
    if (!labels.empty() && static_cast<int64_t>(labels.size()) != classes)
      fail("{}: {} labels, but the model has {} classes", a->labels.empty() ? a->model : a->labels,
           labels.size(), classes);
    std::vector<int64_t> order(static_cast<size_t>(classes));
    std::iota(order.begin(), order.end(), 0);
    const float* p = probs.data<float>();
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return p[x] > p[y]; });
    for (int64_t i = 0; i < std::min(a->top, classes); ++i) {
      int64_t k = order[static_cast<size_t>(i)];
      std::string label = labels.empty() ? std::to_string(k) : labels[static_cast<size_t>(k)];
      std::printf("%s (%lld): %.5f\n", label.c_str(), static_cast<long long>(k), p[k]);
    }
    return 0;
  };
}

}  // namespace sf::cli
