#include "train/checkpoint.h"

#include "core/little_endian.h"
#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

namespace sf {
namespace {

constexpr char kMagic[8] = {'S', 'F', 'C', 'K', 'P', 'T', '\0', '\0'};
constexpr uint64_t kAlign = 64;
constexpr int kMaxRank = 8;
// magic + version + reserved + metadata length + tensor count
constexpr uint64_t kFixedHeaderBytes = 8 + 4 + 4 + 8 + 8;
constexpr uint64_t kCrcBytes = 4;

// File dtype codes are part of the format and independent of the DType enum's order.
uint8_t dtype_code(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 1;
    case DType::i32:
      return 2;
    case DType::i64:
      return 3;
    case DType::u8:
      return 4;
    case DType::i8:
      return 5;
  }
  return 0;
}

bool dtype_from_code(uint8_t code, DType* dtype) {
  constexpr DType kByCode[] = {DType::f32, DType::i32, DType::i64, DType::u8, DType::i8};
  if (code < 1 || code > 5) return false;
  *dtype = kByCode[code - 1];
  return true;
}

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

template <typename T>
void put_le(std::string& out, T value) {
  auto u = static_cast<std::make_unsigned_t<T>>(value);
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

uint32_t crc_update(uint32_t crc, const void* data, uint64_t n) {
  auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    auto chunk = static_cast<uInt>(std::min<uint64_t>(n, uint64_t{1} << 30));
    crc = static_cast<uint32_t>(crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

// An AtomicFile that keeps the CRC of what it writes (all but the trailing CRC itself).
class ChecksummedFile {
 public:
  explicit ChecksummedFile(const std::string& path) : file_(path, "checkpoint") {}
  uint64_t position() const { return file_.position(); }
  uint32_t crc() const { return crc_; }
  void write(const void* data, uint64_t n, bool checksum = true) {
    if (checksum) crc_ = crc_update(crc_, data, n);
    file_.write(data, n);
  }
  void pad_to(uint64_t offset) {
    const std::vector<char> zeros(static_cast<size_t>(offset - file_.position()), 0);
    write(zeros.data(), zeros.size());
  }
  void commit() { file_.commit(); }

 private:
  AtomicFile file_;
  uint32_t crc_ = 0;
};

// Bounds-checked little-endian reads over the loaded file; every failure names the field.
class Cursor {
 public:
  Cursor(const std::string& path, const unsigned char* data, uint64_t end)
      : path_(path), data_(data), end_(end) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return end_ - pos_; }

  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    const T value = get_le<T>(data_ + pos_);
    pos_ += sizeof(T);
    return value;
  }
  std::string bytes(uint64_t n, const char* what) {
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  void need(uint64_t n, const char* what) {
    if (n > left())
      fail(
          "{}: corrupt checkpoint: {} ({} bytes at offset {}) runs past the end of the header "
          "data ({} bytes)",
          path_, what, n, pos_, end_);
  }
  const std::string& path_;
  const unsigned char* data_;
  uint64_t end_;
  uint64_t pos_ = 0;
};

std::vector<unsigned char> read_whole_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open checkpoint: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    int saved = S_ISDIR(st.st_mode) ? EISDIR : errno;
    ::close(fd);
    fail("{}: cannot open checkpoint: {}", path, std::strerror(saved));
  }
  std::vector<unsigned char> data(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::read(fd, data.data() + done, std::min<size_t>(data.size() - done, 1 << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int saved = errno;
      ::close(fd);
      if (n == 0) fail("{}: corrupt checkpoint: file shrank while being read", path);
      fail("{}: cannot read checkpoint: {}", path, std::strerror(saved));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return data;
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  std::string header(kMagic, sizeof(kMagic));
  put_le<uint32_t>(header, kCheckpointVersion);
  put_le<uint32_t>(header, 0);
  put_le<uint64_t>(header, checkpoint.metadata_json.size());
  header += checkpoint.metadata_json;
  put_le<uint64_t>(header, checkpoint.tensors.size());

  // The header's size is known before the offsets it holds: 8 + 8 bytes per entry for them.
  uint64_t header_bytes = header.size();
  for (const auto& [name, tensor] : checkpoint.tensors) {
    if (!tensor.defined()) fail("{}: cannot save tensor '{}': it holds no data", path, name);
    if (tensor.rank() > kMaxRank)
      fail("{}: cannot save tensor '{}': rank {} is above {}", path, name, tensor.rank(), kMaxRank);
    header_bytes += 4 + name.size() + 1 + 1 + 8 * tensor.rank() + 8 + 8;
  }
  uint64_t offset = align_up(header_bytes);
  for (const auto& [name, tensor] : checkpoint.tensors) {
    put_le<uint32_t>(header, static_cast<uint32_t>(name.size()));
    header += name;
    header.push_back(static_cast<char>(dtype_code(tensor.dtype())));
    header.push_back(static_cast<char>(tensor.rank()));
    for (int64_t d : tensor.shape()) put_le<int64_t>(header, d);
    put_le<uint64_t>(header, offset);
    put_le<uint64_t>(header, tensor.bytes());
    offset = align_up(offset + tensor.bytes());
  }
  SF_CHECK(header.size() == header_bytes, "header is {} bytes, planned {}", header.size(),
           header_bytes);

  ChecksummedFile file(path);
  file.write(header.data(), header.size());
  for (const auto& [name, tensor] : checkpoint.tensors) {
    file.pad_to(align_up(file.position()));
    file.write(tensor.raw(), tensor.bytes());
  }
  std::string crc;
  put_le<uint32_t>(crc, file.crc());
  file.write(crc.data(), crc.size(), /*checksum=*/false);
  file.commit();
}

Checkpoint load_checkpoint(const std::string& path) {
  std::vector<unsigned char> file = read_whole_file(path);
  const uint64_t size = file.size();
  if (size < kFixedHeaderBytes + kCrcBytes)
    fail(
        "{}: corrupt checkpoint: the file is {} bytes, shorter than the smallest checkpoint "
        "({} bytes)",
        path, size, kFixedHeaderBytes + kCrcBytes);
  if (std::memcmp(file.data(), kMagic, 8) != 0)
    fail("{}: not a slimflow checkpoint (the file does not start with \"SFCKPT\")", path);
  // The version comes before the CRC check: a newer file deserves "unsupported version".
  Cursor header(path, file.data(), size - kCrcBytes);
  header.bytes(8, "magic");
  uint32_t version = header.get<uint32_t>("format version");
  if (version != kCheckpointVersion)
    fail("{}: checkpoint format version {} is not supported (this build reads {})", path, version,
         kCheckpointVersion);
  uint64_t crc_pos = size - kCrcBytes;
  const uint32_t stored_crc = get_le<uint32_t>(file.data() + crc_pos);
  uint32_t actual_crc = crc_update(0, file.data(), crc_pos);
  if (stored_crc != actual_crc)
    fail(
        "{}: corrupt checkpoint: CRC32 mismatch (stored 0x{:08x}, computed 0x{:08x}); the file "
        "is damaged or truncated",
        path, stored_crc, actual_crc);

  header.get<uint32_t>("reserved field");
  uint64_t metadata_bytes = header.get<uint64_t>("metadata length");
  Checkpoint checkpoint;
  checkpoint.metadata_json = header.bytes(metadata_bytes, "metadata");
  uint64_t count = header.get<uint64_t>("tensor count");
  // Each entry takes at least 22 bytes, which bounds the count before anything is reserved.
  if (count > header.left() / 22)
    fail("{}: corrupt checkpoint: {} tensors cannot fit in a {}-byte file", path, count, size);

  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t offset, bytes;
  };
  std::vector<Entry> entries;
  entries.reserve(count);
  for (uint64_t t = 0; t < count; ++t) {
    Entry e;
    uint32_t name_bytes = header.get<uint32_t>("tensor name length");
    e.name = header.bytes(name_bytes, "tensor name");
    uint8_t code = header.get<uint8_t>("dtype code");
    if (!dtype_from_code(code, &e.dtype))
      fail("{}: corrupt checkpoint: tensor '{}' has unknown dtype code {}", path, e.name, code);
    uint8_t rank = header.get<uint8_t>("rank");
    if (rank > kMaxRank)
      fail("{}: corrupt checkpoint: tensor '{}' has rank {} (at most {})", path, e.name, rank,
           kMaxRank);
    uint64_t elements = 1;
    for (int i = 0; i < rank; ++i) {
      auto d = header.get<int64_t>("dimension");
      // No real tensor exceeds the file size in elements, so this bound also stops overflow.
      if (d < 0 || (d > 0 && elements > size / static_cast<uint64_t>(d)))
        fail("{}: corrupt checkpoint: tensor '{}' has an impossible dimension {}", path, e.name, d);
      elements *= static_cast<uint64_t>(d);
      e.shape.push_back(d);
    }
    e.offset = header.get<uint64_t>("data offset");
    e.bytes = header.get<uint64_t>("data size");
    if (e.bytes != elements * dtype_size(e.dtype))
      fail("{}: corrupt checkpoint: tensor '{}' {} {} should hold {} bytes, header says {}", path,
           e.name, dtype_name(e.dtype), shape_str(e.shape), elements * dtype_size(e.dtype),
           e.bytes);
    if (e.offset % kAlign != 0)
      fail("{}: corrupt checkpoint: tensor '{}' data offset {} is not 64-byte aligned", path,
           e.name, e.offset);
    entries.push_back(std::move(e));
  }
  // Data must lie after the header and before the CRC, with no two tensors overlapping.
  uint64_t data_start = header.pos();
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->offset < b->offset; });
  uint64_t previous_end = data_start;
  for (const Entry* e : by_offset) {
    if (e->offset < previous_end || e->offset > crc_pos || e->bytes > crc_pos - e->offset)
      fail(
          "{}: corrupt checkpoint: tensor '{}' data (offset {}, {} bytes) lies outside the "
          "data area [{}, {}) or overlaps another tensor",
          path, e->name, e->offset, e->bytes, data_start, crc_pos);
    previous_end = e->offset + e->bytes;
  }
  for (const Entry& e : entries) {
    Tensor tensor(e.dtype, e.shape);
    if (e.bytes > 0) std::memcpy(tensor.raw(), file.data() + e.offset, e.bytes);
    if (!checkpoint.tensors.emplace(e.name, std::move(tensor)).second)
      fail("{}: corrupt checkpoint: tensor '{}' appears twice", path, e.name);
  }
  return checkpoint;
}

}  // namespace sf
