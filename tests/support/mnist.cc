#include "support/mnist.h"

#include <filesystem>
#include <random>

#include "io/dataset.h"

namespace sf::testing {

bool mnist_available() {
  static const bool available = [] {
    try {
      load_dataset("mnist");
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }();
  return available;
}

std::string source_path(const std::string& relative) {
  return std::string(SLIMFLOW_SOURCE_DIR) + "/" + relative;
}

std::string make_temp_dir(const std::string& prefix) {
  std::random_device rd;
  auto dir = std::filesystem::temp_directory_path() /
             (prefix + "-" + std::to_string(rd()) + std::to_string(rd()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace sf::testing
