// `slimflow export-images`: writes test images of a data set as PNG files, to try `classify`.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <memory>

#include "commands.h"
#include "io/dataset.h"
#include "io/image.h"

namespace sf::cli {

Action add_export_images_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("export-images",
                                 "Write the first test images of a data set as PNG files");
  struct Args {
    std::string data = "mnist", out_dir;
    int64_t count = 5;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--data", a->data, "mnist, fashion-mnist, or a folder of IDX files")
      ->default_str("mnist");
  cmd->add_option("--count", a->count, "How many images")->default_val(5);
  cmd->add_option("--out-dir", a->out_dir, "Folder for <index>-label<k>.png")->required();
  return [a]() {
    const Dataset test = load_test_split(a->data);
    if (test.images.dim(3) != 1) fail("export-images: only single-channel data sets are supported");
    std::filesystem::create_directories(a->out_dir);
    const int64_t h = test.images.dim(1), w = test.images.dim(2);
    std::vector<uint8_t> pixels(static_cast<size_t>(h * w));
    for (int64_t i = 0; i < std::min(a->count, test.size()); ++i) {
      const float* src = test.images.data<float>() + i * h * w;
      for (int64_t k = 0; k < h * w; ++k)
        pixels[static_cast<size_t>(k)] = static_cast<uint8_t>(std::lround(src[k] * 255.0f));
      std::string path = (std::filesystem::path(a->out_dir) /
                          fmt::format("{}-label{}.png", i, test.labels.data<int32_t>()[i]))
                             .string();
      write_png(path, pixels.data(), w, h);
      std::printf("%s\n", path.c_str());
    }
    return 0;
  };
}

}  // namespace sf::cli
