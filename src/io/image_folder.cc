#include "io/image_folder.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace sf {

namespace fs = std::filesystem;

uint64_t hash_bytes(const void* data, size_t size, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t hash_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read the file", path);
  std::vector<char> buffer(size_t{1} << 16);
  uint64_t h = 0xcbf29ce484222325ull;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    h = hash_bytes(buffer.data(), static_cast<size_t>(in.gcount()), h);
  }
  if (in.bad()) fail("{}: cannot read the file", path);
  return h;
}

namespace {

bool is_image_file(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const char* const kExtensions[] = {".png", ".jpg", ".jpeg", ".bmp", ".gif",
                                            ".tga", ".pgm", ".ppm"};
  return std::find(std::begin(kExtensions), std::end(kExtensions), ext) != std::end(kExtensions);
}

bool hidden(const fs::path& path) { return path.filename().string().starts_with("."); }

}  // namespace

ImageFolder list_image_folder(const std::string& root) {
  std::error_code ec;
  if (!fs::exists(root, ec)) fail("{}: no such image folder", root);
  if (!fs::is_directory(root, ec))
    fail("{}: not a folder (expected one subfolder of images per label)", root);
  ImageFolder folder;
  std::vector<fs::path> label_dirs;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec))
    if (entry.is_directory() && !hidden(entry.path())) label_dirs.push_back(entry.path());
  if (ec) fail("{}: cannot list the folder: {}", root, ec.message());
  std::sort(label_dirs.begin(), label_dirs.end());
  if (label_dirs.size() < 2)
    fail("{}: {} label subfolder{}; expected one subfolder of images per label, at least two",
         root, label_dirs.size(), label_dirs.size() == 1 ? "" : "s");
  for (const fs::path& dir : label_dirs) {
    const std::string label = dir.filename().string();
    std::vector<fs::path> files;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec))
      if (entry.is_regular_file() && !hidden(entry.path()) && is_image_file(entry.path()))
        files.push_back(entry.path());
    if (ec) fail("{}: cannot list the folder: {}", dir.string(), ec.message());
    if (files.empty())
      fail("{}: label folder '{}' holds no image (.png, .jpg, .jpeg, .bmp, .gif, .tga, .pgm, "
           ".ppm)",
           dir.string(), label);
    std::sort(files.begin(), files.end());
    const auto index = static_cast<int32_t>(folder.labels.size());
    for (const fs::path& file : files)
      folder.images.push_back(
          {.path = file.string(), .name = label + "/" + file.filename().string(), .label = index});
    folder.labels.push_back(label);
  }
  return folder;
}

Split split_of(const std::string& name, double validation_percent, double test_percent) {
  auto check = [](double percent, const char* flag) {
    if (!(percent >= 0.0 && percent <= 100.0))
      fail("{} {} must be a percentage in [0, 100]", flag, percent);
  };
  check(validation_percent, "--validation-percent");
  check(test_percent, "--test-percent");
  if (validation_percent + test_percent >= 100.0)
    fail("--validation-percent {} and --test-percent {} leave nothing to train on",
         validation_percent, test_percent);
  // A point in [0, 100) with 1/10000 percent resolution, from the name alone.
  uint64_t h = hash_bytes(name.data(), name.size());
  // FNV's low digits follow the last bytes closely; mixing spreads every byte over them.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  const double percent = static_cast<double>(h % 1000000) / 10000.0;
  if (percent < test_percent) return Split::kTest;
  if (percent < test_percent + validation_percent) return Split::kValidation;
  return Split::kTrain;
}

}  // namespace sf
