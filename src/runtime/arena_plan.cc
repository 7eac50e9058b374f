#include "runtime/arena_plan.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace sf {

namespace {

// How many of the most recently freed places are tried before the lowest free offset.
constexpr size_t kRecentPlaces = 8;

bool fits(size_t offset, size_t bytes, const std::vector<std::pair<size_t, size_t>>& busy) {
  for (const auto& [lo, hi] : busy)
    if (offset < hi && lo < offset + bytes) return false;
  return true;
}

}  // namespace

ArenaPlan plan_arena(const std::vector<BufferLifetime>& buffers) {
  ArenaPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  // In the order the steps write them, so "freed most recently" is known when placing each.
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return buffers[a].first != buffers[b].first ? buffers[a].first < buffers[b].first
                                                : buffers[a].bytes > buffers[b].bytes;
  });
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> busy;  // [lo, hi) of placed buffers still alive
  std::vector<size_t> freed;                    // placed buffers no longer alive
  for (size_t bi : order) {
    const BufferLifetime& b = buffers[bi];
    busy.clear();
    freed.clear();
    for (size_t pi : placed) {
      if (buffers[pi].last >= b.first)
        busy.emplace_back(plan.offsets[pi], plan.offsets[pi] + buffers[pi].bytes);
      else
        freed.push_back(pi);
    }
    const size_t recent = std::min(kRecentPlaces, freed.size());
    std::partial_sort(freed.begin(), freed.begin() + static_cast<std::ptrdiff_t>(recent),
                      freed.end(), [&](size_t x, size_t y) {
                        return buffers[x].last != buffers[y].last
                                   ? buffers[x].last > buffers[y].last
                                   : plan.offsets[x] < plan.offsets[y];
                      });
    bool done = false;
    for (size_t i = 0; i < recent && !done; ++i) {
      const size_t offset = plan.offsets[freed[i]];
      if (fits(offset, b.bytes, busy)) {
        plan.offsets[bi] = offset;
        done = true;
      }
    }
    if (!done) {  // lowest offset with room
      std::sort(busy.begin(), busy.end());
      size_t offset = 0;
      for (const auto& [lo, hi] : busy) {
        if (offset + b.bytes <= lo) break;
        offset = std::max(offset, hi);
      }
      plan.offsets[bi] = offset;
    }
    plan.bytes = std::max(plan.bytes, plan.offsets[bi] + b.bytes);
    placed.push_back(bi);
  }
  return plan;
}

}  // namespace sf
