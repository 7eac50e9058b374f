// `slimflow export-images`: writes images of a data set as PNG files, to try `classify`, or as
// one folder per label, the input of `retrain --images`.
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
                                 "Write the first images of a data set as PNG files");
  struct Args {
    std::string data = "mnist", out_dir, split = "test";
    int64_t count = 5;
    bool by_label = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--data", a->data, "mnist, fashion-mnist, or a folder of IDX files")
      ->default_str("mnist");
  cmd->add_option("--count", a->count, "How many images")->default_val(5);
  cmd->add_option("--split", a->split, "Which split: test or train")
      ->check(CLI::IsMember({"test", "train"}))
      ->default_str("test");
  cmd->add_flag("--by-label", a->by_label,
                "Write <out-dir>/<label>/<index>.png, one folder per label (retrain --images)");
  cmd->add_option("--out-dir", a->out_dir,
                  "Folder for <index>-label<k>.png (or <label>/<index>.png)")
      ->required();
  return [a]() {
    const Dataset data = a->split == "train" ? load_dataset(a->data).train : load_test_split(a->data);
    if (data.images.dim(3) != 1) fail("export-images: only single-channel data sets are supported");
    const std::filesystem::path out(a->out_dir);
    std::filesystem::create_directories(out);
    for (int64_t i = 0; i < std::min(a->count, data.size()); ++i) {
      const Image image = example_image(data, i);
      const int32_t label = data.labels.data<int32_t>()[i];
      std::filesystem::path path;
      if (a->by_label) {
        std::filesystem::create_directories(out / std::to_string(label));
        path = out / std::to_string(label) / fmt::format("{}.png", i);
      } else {
        path = out / fmt::format("{}-label{}.png", i, label);
      }
      write_png(path.string(), image.pixels.data(), image.width, image.height);
      if (!a->by_label) std::printf("%s\n", path.string().c_str());
    }
    if (a->by_label)
      std::printf("%lld images in %s/<label>/\n",
                  static_cast<long long>(std::min(a->count, data.size())), a->out_dir.c_str());
    return 0;
  };
}

}  // namespace sf::cli
