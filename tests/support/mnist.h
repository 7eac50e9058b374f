// Whether the MNIST files the setup script installs are present (tests that need them skip
// with a message otherwise).
#pragma once

#include <string>

namespace sf::testing {

bool mnist_available();
std::string source_path(const std::string& relative);

}  // namespace sf::testing
