// libFuzzer target for the ONNX importer: any bytes must import or throw sf::Error, never crash,
// hang or allocate beyond the memory budget (constant folding runs kernels at import time).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/limits.h"
#include "onnx/importer.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Folding allocates through the budget; keep it well under libFuzzer's -rss_limit_mb.
  sf::limits::set_memory_budget(uint64_t{512} << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    sf::ModelFile model =
        sf::import_onnx_bytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    (void)model.graph.num_nodes();
  } catch (const sf::Error&) {
    // Rejecting bad input with a message is the expected outcome.
  }
  return 0;
}
