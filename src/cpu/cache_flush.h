// Dropping memory from the CPU caches, for plan-time measurements that must see a kernel's
// data cold, as it is in a model that touches much more memory between two runs of one node.
#pragma once

#include <cstddef>

namespace sf {

// Writes back and drops from every cache level the lines of [data, data + bytes). On
// architectures without such an instruction in user mode it does nothing.
void flush_cache_lines(const void* data, size_t bytes);

}  // namespace sf
