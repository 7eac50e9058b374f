#include "core/limits.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace sf::limits {

namespace {

std::atomic<uint64_t> budget_override{0};

uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return uint64_t{8} << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

}  // namespace

int64_t checked_num_elements(const Shape& shape, const std::string& what) {
  if (shape.size() > kMaxRank) fail("{} has rank {}, more than {}", what, shape.size(), kMaxRank);
  int64_t bound = 1, n = 1;
  for (int64_t d : shape) {
    if (d < 0) fail("{} has a negative dimension in {}", what, shape_str(shape));
    if (d > 1 && bound > kMaxElements / d)
      fail("{} {} has more than {} elements", what, shape_str(shape), kMaxElements);
    bound *= std::max<int64_t>(d, 1);
    n *= d;
  }
  return n;
}

void check_threads(int64_t threads, const std::string& what) {
  if (threads < 0 || threads > kMaxThreads)
    fail("{}: {} threads requested; expected 0 (all cores) to {}", what, threads, kMaxThreads);
}

uint64_t memory_budget() {
  const uint64_t set = budget_override.load();
  return set ? set : physical_memory() / 2;
}

void set_memory_budget(uint64_t bytes) { budget_override.store(bytes); }

uint64_t parse_byte_size(const std::string& text, const std::string& what) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    fail("{} '{}' is not a size (e.g. 512M, 2G)", what, text);
  }
  std::string suffix = text.substr(used);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!suffix.empty() && suffix.back() == 'B') suffix.pop_back();
  if (suffix.size() == 2 && suffix[1] == 'I') suffix.pop_back();
  double scale = 1;
  if (suffix == "K") scale = 1024.0;
  else if (suffix == "M") scale = 1024.0 * 1024;
  else if (suffix == "G") scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!suffix.empty()) fail("{} '{}' has an unknown unit (use K, M, G or T)", what, text);
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes < 1 || bytes > 1e18)
    fail("{} '{}' must be a positive size", what, text);
  return static_cast<uint64_t>(bytes);
}

std::string byte_size_str(uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} bytes", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

void check_memory(uint64_t bytes, const std::string& what) {
  const uint64_t budget = memory_budget();
  if (bytes > budget)
    fail("{} needs {}, more than the memory budget of {} (raise it with --max-memory)", what,
         byte_size_str(bytes), byte_size_str(budget));
}

}  // namespace sf::limits
