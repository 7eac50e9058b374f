// Labelled images for transfer learning (`slimflow retrain`): a folder with one subfolder per
// label, and the split of each image into train / validation / test by a hash of its name, as
// TensorFlow's retrain.py does, so that adding images never moves the ones already there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sf {

// 64-bit FNV-1a: the content keys of the bottleneck cache (io/bottleneck_cache.h) and the
// split of an image by its name.
uint64_t hash_bytes(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ull);
// The hash of a file's bytes; throws sf::Error "<path>: cannot read ..." when it cannot be read.
uint64_t hash_file(const std::string& path);

struct LabeledImage {
  std::string path;  // the file
  std::string name;  // "<label>/<file name>": what the split hashes
  int32_t label = 0;
};

struct ImageFolder {
  std::vector<std::string> labels;  // subfolder names, sorted: label k is labels[k]
  std::vector<LabeledImage> images;  // sorted by name
};

// Lists `root`/<label>/<image> for the image extensions stb decodes (.png, .jpg, .jpeg, .bmp,
// .gif, .tga, .pgm, .ppm, any case); other files and hidden ones are skipped. Throws sf::Error
// naming the folder when `root` is missing or not a folder, has fewer than two label
// subfolders, or a label subfolder holds no image.
ImageFolder list_image_folder(const std::string& root);

enum class Split { kTrain, kValidation, kTest };

// Where the image named `name` belongs: its hash picks a point in [0, 100) percent; the first
// `test_percent` are test, the next `validation_percent` validation, the rest train. A name's
// split depends on nothing else. Throws sf::Error when the percentages are outside [0, 100] or
// leave nothing to train on.
Split split_of(const std::string& name, double validation_percent, double test_percent);

}  // namespace sf
