// libFuzzer target for the .sfm loader: any input must load or throw sf::Error, never crash.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#include "modelfile/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exactly sized, 64-byte aligned copy: tensors borrow it in place (as from a mapping) and
  // AddressSanitizer still catches a read one byte past the end.
  auto* buffer = static_cast<unsigned char*>(::operator new (size + 1, std::align_val_t{64}));
  if (size > 0) std::memcpy(buffer, data, size);
  try {
    sf::ModelFile model = sf::load_model_from_memory(buffer, size, nullptr, "fuzz");
    (void)sf::weight_bytes(model);
  } catch (const sf::Error&) {
    // Rejecting bad input with a message is the expected outcome.
  }
  ::operator delete (buffer, std::align_val_t{64});
  return 0;
}
