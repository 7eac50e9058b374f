#include "support/mnist.h"

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

}  // namespace sf::testing
