// Where each computed tensor of a plan lives in the plan's one arena.
//
// Tensors alive at the same step never overlap. Among the places a tensor may go, it takes the
// one most recently left by a tensor that is no longer needed: those bytes were just read, so
// they are still in cache, and writing there costs no fetch from memory. (Taking the lowest free
// offset instead put squeezenet1_1's first fire module on the bytes of a 3 MB tensor read long
// before, and its two expand convs ran 40% slower than the identical ones of the next module.)
#pragma once

#include <cstddef>
#include <vector>

namespace sf {

struct BufferLifetime {
  size_t bytes;
  int first;  // step that writes it
  int last;   // last step that reads it
};

struct ArenaPlan {
  std::vector<size_t> offsets;  // by buffer
  size_t bytes = 0;             // arena size
};

ArenaPlan plan_arena(const std::vector<BufferLifetime>& buffers);

}  // namespace sf
