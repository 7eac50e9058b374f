// Whether the MNIST files the setup script installs are present (tests that need them skip
// with a message otherwise).
#pragma once

#include <string>

namespace sf::testing {

bool mnist_available();
std::string source_path(const std::string& relative);

}  // namespace sf::testing

// Skips the calling test, with a message, when the MNIST files are missing. One statement, so
// that an `else` after it cannot attach to its `if`.
#define REQUIRE_MNIST()                                                                  \
  do {                                                                                   \
    if (!sf::testing::mnist_available())                                                 \
      GTEST_SKIP() << "MNIST not installed: run scripts/setup.sh";                       \
  } while (0)
