// What the tests that start `mpirun` jobs of `slimflow` share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sf::testing {

#ifdef SLIMFLOW_MPIRUN
// "timeout … mpirun -np RANKS slimflow ": `timeout` bounds the job and also ends mpirun's
// processes when it fires.
std::string mpirun_slimflow(int ranks, int timeout_seconds);
#endif

// The lines of `text` that start with `prefix` (how many ranks reported, or erred).
int count_lines_starting(const std::string& text, const std::string& prefix);

// The JSON objects among the lines of a command's output (one per epoch with --json).
std::vector<nlohmann::json> json_lines(const std::string& out);

// Writes tiny-cnn without dropout into `dir`, so that replicas and one process draw nothing at
// random, with `fc1_units` in fc1 (256 is wide enough that sync data parallelism exchanges fc1's
// gradient as factors; 64 is not); returns its path. Its pools average: a max pool sends each
// window's gradient to one tap, so weights a few ulps apart (a batch summed in parts) can pick
// another of two nearly equal taps and part the runs by far more than rounding (two ranks
// against one process failed after 15 and 20 steps with max pools, passed after 10 and 19).
std::string write_deterministic_cnn_spec(const std::string& dir, int64_t fc1_units = 64);

}  // namespace sf::testing
