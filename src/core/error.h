// Error reporting. User-facing problems (bad files, bad specs, mismatched shapes) throw
// sf::Error with a one-line message that names the file or node; the CLI prints it and exits
// non-zero. Internal invariants use SF_CHECK, which also throws (never aborts) so that a bug
// reached through user input still ends with a message instead of a core dump.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace sf {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace sf

#define SF_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond))                                                                         \
      throw ::sf::Error(fmt::format("internal error ({}:{}): check '{}' failed: {}",     \
                                    __FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__))); \
  } while (0)
