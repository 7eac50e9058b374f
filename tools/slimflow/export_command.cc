// `slimflow export`: a model (.sfm, or .onnx through the importer) written in another format;
// ONNX for now (onnx/exporter.h). Arguments are checked here so that a mistake is one line.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "model_io.h"
#include "onnx/exporter.h"

namespace sf::cli {

Action add_export_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "export", "Write a model as ONNX: float graphs op for op, calibrated eightbit graphs in "
                "ONNX Runtime's QDQ format (inputs and outputs keep the model's NHWC layout)");
  struct Args {
    std::string model, format = "onnx", out;
    int opset = 13;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("model", a->model, "Model (.sfm or .onnx)")->required();
  cmd->add_option("--format", a->format, "Output format: onnx")->default_str("onnx");
  cmd->add_option("--out", a->out, "File to write")->required();
  cmd->add_option("--opset", a->opset, "ONNX opset, 13 to 17")->default_val(13);
  return [a]() {
    if (a->format != "onnx") fail("export: --format '{}' is not supported (onnx is)", a->format);
    ModelFile model = open_model(a->model);
    ExportOptions options;
    options.opset = a->opset;
    const uint64_t bytes = export_onnx(model, a->model, a->out, options);
    std::fprintf(stderr, "wrote %s: opset %d, %ju bytes\n", a->out.c_str(), a->opset,
                 static_cast<uintmax_t>(bytes));
    return 0;
  };
}

}  // namespace sf::cli
