#include "support/mpi_jobs.h"

#include <fstream>

#include "support/cli.h"

namespace sf::testing {

#ifdef SLIMFLOW_MPIRUN
std::string mpirun_slimflow(int ranks, int timeout_seconds) {
  return "timeout -k 5 " + std::to_string(timeout_seconds) + " " + SLIMFLOW_MPIRUN + " -np " +
         std::to_string(ranks) + " " + SLIMFLOW_CLI + " ";
}
#endif

int count_lines_starting(const std::string& text, const std::string& prefix) {
  int n = 0;
  for (const std::string& line : non_empty_lines(text)) n += line.rfind(prefix, 0) == 0;
  return n;
}

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> objects;
  for (const std::string& line : non_empty_lines(out))
    if (line.rfind("{", 0) == 0) objects.push_back(nlohmann::json::parse(line));
  return objects;
}

std::string write_deterministic_cnn_spec(const std::string& dir, int64_t fc1_units) {
  const std::string path = dir + "/tiny-cnn-nodrop.yaml";
  std::ofstream(path) << R"(name: tiny-cnn-nodrop
input: [28, 28, 1]
classes: 10
layers:
  - {name: conv1, type: conv2d, filters: 8, kernel: 5, padding: same, activation: relu}
  - {name: pool1, type: avg_pool, size: 2}
  - {name: conv2, type: conv2d, filters: 16, kernel: 3, padding: same, activation: relu}
  - {name: pool2, type: avg_pool, size: 2}
  - {name: flatten, type: flatten}
  - {name: fc1, type: dense, units: )" << fc1_units << R"(, activation: relu}
  - {name: fc2, type: dense, units: 10}
)";
  return path;
}

}  // namespace sf::testing
