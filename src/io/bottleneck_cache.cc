#include "io/bottleneck_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "io/atomic_file.h"

namespace sf {

namespace {

constexpr char kMagic[8] = {'S', 'F', 'B', 'N', 'E', 'C', 'K', '1'};
constexpr uint64_t kHeaderBytes = 40;

uint64_t round_up(uint64_t n) { return (n + 63) / 64 * 64; }

uint64_t read_u64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

BottleneckCache BottleneckCache::open(const std::string& path, const BottleneckKey& key) {
  BottleneckCache cache(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) cache.stale_reason_ = fmt::format("cannot open: {}", std::strerror(errno));
    return cache;
  }
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const auto size = static_cast<uint64_t>(regular ? st.st_size : 0);
  void* map = size >= kHeaderBytes ? ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (map == MAP_FAILED) {
    cache.stale_reason_ = regular ? "too short or unreadable: not a bottleneck cache"
                                  : "not a regular file";
    return cache;
  }
  std::shared_ptr<void> mapping(map, [size](void* p) { ::munmap(p, size); });
  const auto* bytes = static_cast<const unsigned char*>(map);
  auto stale = [&](std::string why) {
    cache.stale_reason_ = std::move(why);
    return cache;
  };
  if (std::memcmp(bytes, kMagic, sizeof kMagic) != 0) return stale("not a bottleneck cache");
  const uint64_t model_hash = read_u64(bytes + 8), dim = read_u64(bytes + 16),
                 count = read_u64(bytes + 24), name_bytes = read_u64(bytes + 32);
  if (name_bytes > kMaxNodeNameBytes || kHeaderBytes + name_bytes > size)
    return stale("corrupt header");
  const std::string node(reinterpret_cast<const char*>(bytes + kHeaderBytes), name_bytes);
  // Every product below is bounded by the file's size before it is formed.
  const uint64_t hashes_at = round_up(kHeaderBytes + name_bytes);
  if (count > size / 8 || dim > size / 4 || (count > 0 && dim > size / 4 / count))
    return stale("corrupt header");
  const uint64_t rows_at = round_up(hashes_at + count * 8);
  if (rows_at + count * dim * 4 != size) return stale("truncated or corrupt (size does not match)");
  if (model_hash != key.model_hash) return stale("made for another base model");
  if (node != key.node) return stale(fmt::format("made for node '{}'", node));
  if (static_cast<int64_t>(dim) != key.dim)
    return stale(fmt::format("rows of {} values, not {}", dim, key.dim));
  const auto* hashes = reinterpret_cast<const uint64_t*>(bytes + hashes_at);
  for (uint64_t i = 1; i < count; ++i)
    if (hashes[i - 1] >= hashes[i]) return stale("corrupt index (hashes out of order)");
  cache.mapping_ = std::move(mapping);
  cache.hashes_ = hashes;
  cache.rows_ = reinterpret_cast<const float*>(bytes + rows_at);
  cache.count_ = count;
  return cache;
}

const float* BottleneckCache::find(uint64_t image_hash) const {
  const uint64_t* end = hashes_ + count_;
  const uint64_t* it = std::lower_bound(hashes_, end, image_hash);
  if (it == end || *it != image_hash) return nullptr;
  return rows_ + static_cast<size_t>(it - hashes_) * static_cast<size_t>(key_.dim);
}

void write_bottleneck_cache(const std::string& path, const BottleneckKey& key,
                            const std::vector<uint64_t>& hashes,
                            const std::function<const float*(size_t)>& row) {
  if (key.node.size() > kMaxNodeNameBytes)
    fail("{}: node name of {} bytes is too long for a bottleneck cache", path, key.node.size());
  std::vector<size_t> order(hashes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return hashes[a] < hashes[b]; });
  for (size_t i = 1; i < order.size(); ++i)
    SF_CHECK(hashes[order[i - 1]] != hashes[order[i]], "bottleneck cache: repeated image hash");
  AtomicFile file(path, "bottleneck cache");
  const uint64_t header[4] = {key.model_hash, static_cast<uint64_t>(key.dim), hashes.size(),
                              key.node.size()};
  file.write(kMagic, sizeof kMagic);
  file.write(header, sizeof header);
  file.write(key.node.data(), key.node.size());
  file.pad_to(round_up(file.position()));
  for (size_t i : order) file.write(&hashes[i], 8);
  file.pad_to(round_up(file.position()));
  for (size_t i : order) file.write(row(i), static_cast<uint64_t>(key.dim) * 4);
  file.commit();
}

}  // namespace sf
