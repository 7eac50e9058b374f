// The limits every loader and builder applies before it allocates or creates a kernel: tensor
// rank and element counts, window padding, thread counts, and a process-wide memory budget.
// .sfm and .onnx loading, model specs, data sets, images, the CLI and the C API all check
// against these same numbers, so that no path accepts what another rejects.
#pragma once

#include <cstdint>
#include <string>

#include "core/shape.h"

namespace sf::limits {

inline constexpr size_t kMaxRank = 16;
// No real tensor comes near this; it keeps every product of dimensions far from overflow.
inline constexpr int64_t kMaxElements = int64_t{1} << 40;
// Padding on one side of a conv/pool window (SAME padding grows with the dilated window).
// oneDNN's primitive creation grows with it; real models stay far below.
inline constexpr int64_t kMaxWindowPadding = int64_t{1} << 15;
// The effective (dilated) window of a conv/pool.
inline constexpr int64_t kMaxWindowExtent = int64_t{1} << 31;
inline constexpr int kMaxThreads = 1024;
// Layers in a model spec and nodes in a loaded graph.
inline constexpr int64_t kMaxLayers = 100000;
// Nesting of JSON metadata (a real model nests a handful of levels).
inline constexpr int kMaxJsonDepth = 64;
// Values in JSON metadata (tensor and node lists; weights live outside the JSON).
inline constexpr int64_t kMaxJsonValues = int64_t{1} << 22;

// The element count of `shape`, or an error naming `what` when a dimension is negative, the
// rank exceeds kMaxRank or the count exceeds kMaxElements. Never overflows: zero dimensions
// count as 1 in the bound, so no partial product can overflow either.
int64_t checked_num_elements(const Shape& shape, const std::string& what);

// Threads requested through `what` (a flag, a function): 0 (all cores) to kMaxThreads.
void check_threads(int64_t threads, const std::string& what);

// The memory budget in bytes: set_memory_budget's value, else half of physical RAM.
uint64_t memory_budget();
void set_memory_budget(uint64_t bytes);
// Parses "512M", "2G", "1.5G", "1000000" (bytes) or fails naming `what`.
uint64_t parse_byte_size(const std::string& text, const std::string& what);
// Fails, saying how many bytes `what` needs, when `bytes` exceeds the budget.
void check_memory(uint64_t bytes, const std::string& what);
// "1.5 GiB"
std::string byte_size_str(uint64_t bytes);

}  // namespace sf::limits
