#include "io/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

namespace sf {
namespace {

constexpr uint64_t kMaxGzipExpansion = 128;

struct IdxType {
  uint8_t code;
  const char* name;
  std::optional<DType> dtype;  // empty: known to IDX but not readable by this build
};

constexpr IdxType kIdxTypes[] = {
    {0x08, "u8", DType::u8},   {0x09, "i8", DType::i8},   {0x0B, "i16", std::nullopt},
    {0x0C, "i32", DType::i32}, {0x0D, "f32", DType::f32}, {0x0E, "f64", std::nullopt},
};

std::string dims_str(const std::vector<uint32_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s.push_back('x');
    s.append(std::to_string(dims[i]));
  }
  return s;
}

// Reads from a raw file descriptor or a gzip stream over it, with one error vocabulary.
class Source {
 public:
  explicit Source(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
    // The destructor does not run when the constructor throws, so close here first.
    auto fail_closed = [&](const char* what, int error) {
      ::close(fd_);
      fail("{}: {}: {}", path, what, std::strerror(error));
    };
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail_closed("cannot stat", errno);
    if (S_ISDIR(st.st_mode)) fail_closed("cannot open", EISDIR);
    file_bytes_ = static_cast<uint64_t>(st.st_size);
    unsigned char magic[2] = {0, 0};
    ssize_t n = ::pread(fd_, magic, 2, 0);
    if (n < 0) fail_closed("cannot read", errno);
    if (n == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
      gz_ = gzdopen(fd_, "rb");
      if (gz_ == nullptr) fail_closed("cannot open gzip stream", ENOMEM);
      fd_ = -1;  // now owned by gz_
      gzbuffer(gz_, 1 << 18);
    }
  }
  ~Source() {
    if (gz_ != nullptr) gzclose(gz_);
    if (fd_ >= 0) ::close(fd_);
  }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  bool gzip() const { return gz_ != nullptr; }
  uint64_t file_bytes() const { return file_bytes_; }

  // Reads up to `n` bytes; returns fewer only at the end of the data.
  size_t read(void* buf, size_t n) {
    auto* out = static_cast<char*>(buf);
    size_t done = 0;
    while (done < n) {
      size_t want = std::min<size_t>(n - done, size_t{1} << 30);
      if (gz_ != nullptr) {
        int got = gzread(gz_, out + done, static_cast<unsigned>(want));
        if (got < 0) gz_fail();
        if (got == 0) break;
        done += static_cast<size_t>(got);
      } else {
        ssize_t got = ::read(fd_, out + done, want);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) fail("{}: cannot read: {}", path_, std::strerror(errno));
        if (got == 0) break;
        done += static_cast<size_t>(got);
      }
    }
    // A gzip stream that ends without its trailer reads as a short stream plus an error.
    if (gz_ != nullptr && done < n) {
      int errnum = Z_OK;
      gzerror(gz_, &errnum);
      if (errnum != Z_OK) gz_fail();
    }
    return done;
  }

 private:
  [[noreturn]] void gz_fail() {
    int errnum = Z_OK;
    const char* message = gzerror(gz_, &errnum);
    // zlib prefixes its message with the name given to gzdopen ("<fd:4>: "); ours names the file.
    std::string reason = errnum == Z_ERRNO ? std::strerror(errno) : (message ? message : "");
    if (reason.rfind("<fd:", 0) == 0 && reason.find(": ") != std::string::npos)
      reason = reason.substr(reason.find(": ") + 2);
    fail("{}: corrupt gzip data: {}", path_, reason);
  }

  std::string path_;
  int fd_ = -1;
  gzFile gz_ = nullptr;
  uint64_t file_bytes_ = 0;
};

uint32_t load_be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

Tensor read_idx(const std::string& path) {
  Source src(path);

  unsigned char magic[4];
  size_t got = src.read(magic, 4);
  if (got == 0) fail("{}: empty file: not an IDX file", path);
  if (got < 4)
    fail("{}: truncated: file ends inside the IDX header ({} of 4 magic bytes)", path, got);
  uint32_t magic_value = load_be32(magic);
  if (magic[0] != 0 || magic[1] != 0)
    fail("{}: bad magic 0x{:08x}: not an IDX file (expected 0x0000080N)", path, magic_value);
  const IdxType* type = nullptr;
  for (const IdxType& t : kIdxTypes)
    if (t.code == magic[2]) type = &t;
  if (type == nullptr)
    fail(
        "{}: bad magic 0x{:08x}: unknown IDX element type 0x{:02x} (expected 0x08 u8, 0x09 i8, "
        "0x0C i32 or 0x0D f32)",
        path, magic_value, magic[2]);
  if (!type->dtype)
    fail(
        "{}: unsupported IDX element type 0x{:02X} ({}); this build reads 0x08 u8, 0x09 i8, "
        "0x0C i32 and 0x0D f32",
        path, type->code, type->name);
  int ndims = magic[3];
  if (ndims < 1 || ndims > 4)
    fail("{}: IDX header has {} dimensions (expected 1 to 4)", path, ndims);

  unsigned char dim_bytes[16];
  size_t header_dims = static_cast<size_t>(ndims) * 4;
  got = src.read(dim_bytes, header_dims);
  if (got < header_dims)
    fail("{}: truncated: file ends inside the IDX header ({} of {} bytes)", path, 4 + got,
         4 + header_dims);
  std::vector<uint32_t> dims(static_cast<size_t>(ndims));
  for (int i = 0; i < ndims; ++i) {
    dims[i] = load_be32(dim_bytes + 4 * i);
    if (dims[i] == 0)
      fail("{}: IDX header dimension {} (of {}) is 0; every dimension must be at least 1", path,
           i + 1, ndims);
  }

  // Each factor is below 2^32 and the running product stays under the cap, so no overflow.
  const DType dtype = *type->dtype;
  uint64_t data_bytes = dtype_size(dtype);
  for (uint32_t d : dims) {
    data_bytes *= d;
    if (data_bytes > kMaxIdxDataBytes)
      fail("{}: header says {} elements of {}, more than the {} GiB limit", path, dims_str(dims),
           type->name, kMaxIdxDataBytes >> 30);
  }

  Shape shape(dims.begin(), dims.end());
  Tensor result;
  if (!src.gzip()) {
    uint64_t header_bytes = 4 + header_dims;
    uint64_t available = src.file_bytes() > header_bytes ? src.file_bytes() - header_bytes : 0;
    if (available < data_bytes)
      fail("{}: truncated: header says {} ({} bytes) but the file has {} bytes of data", path,
           dims_str(dims), data_bytes, available);
    if (available > data_bytes)
      fail("{}: header says {} ({} bytes) but the file has {} bytes of data ({} trailing bytes)",
           path, dims_str(dims), data_bytes, available, available - data_bytes);
    result = Tensor(dtype, shape);
    got = src.read(result.raw(), data_bytes);
    if (got < data_bytes)  // the file shrank while we read it
      fail("{}: truncated: header says {} ({} bytes) but the file has {} bytes of data", path,
           dims_str(dims), data_bytes, got);
  } else {
    // The decompressed size is only known by decompressing: grow a buffer as data arrives so
    // that a header claiming gigabytes over a tiny stream allocates nothing big.
    // Deflate expands at most ~1032:1; real IDX files compress a few times. A header that
    // needs far more than the compressed bytes could give is a bomb or a lie: refuse it before
    // inflating.
    if (data_bytes > (uint64_t{1} << 20) && data_bytes > kMaxGzipExpansion * src.file_bytes())
      fail("{}: header says {} ({} bytes) but {} bytes of gzip data cannot hold that (at most "
           "{}x expansion)",
           path, dims_str(dims), data_bytes, src.file_bytes(), kMaxGzipExpansion);
    std::vector<unsigned char> buffer;
    size_t filled = 0;
    while (filled < data_bytes) {
      size_t chunk = std::min<size_t>(data_bytes - filled, std::max<size_t>(filled, 1 << 20));
      buffer.resize(filled + chunk);
      size_t n = src.read(buffer.data() + filled, chunk);
      filled += n;
      if (n < chunk) break;
    }
    if (filled < data_bytes)
      fail(
          "{}: truncated: header says {} ({} bytes) but the file has {} bytes of data "
          "(decompressed)",
          path, dims_str(dims), data_bytes, filled);
    unsigned char extra;
    if (src.read(&extra, 1) != 0)
      fail("{}: header says {} ({} bytes) but the file has more data after them (trailing bytes)",
           path, dims_str(dims), data_bytes);
    result = Tensor(dtype, shape);
    std::memcpy(result.raw(), buffer.data(), data_bytes);
  }

  if (dtype_size(dtype) == 4 && std::endian::native == std::endian::little) {
    auto* words = static_cast<uint32_t*>(result.raw());
    for (int64_t i = 0, n = result.numel(); i < n; ++i) words[i] = __builtin_bswap32(words[i]);
  }
  return result;
}

}  // namespace sf
