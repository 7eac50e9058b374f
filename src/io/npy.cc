#include "io/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "core/little_endian.h"

namespace sf {
namespace {

static_assert(std::endian::native == std::endian::little,
              ".npy reading and writing assume a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
constexpr size_t kMaxNpyRank = 32;

struct NpyType {
  const char* descr;
  DType dtype;
};
constexpr NpyType kNpyTypes[] = {
    {"<f4", DType::f32}, {"<i4", DType::i32}, {"<i8", DType::i64},
    {"|u1", DType::u8},  {"|i1", DType::i8},
};

const char* descr_of(DType dtype) {
  for (const NpyType& t : kNpyTypes)
    if (t.dtype == dtype) return t.descr;
  fail("npy: dtype {} has no .npy code", dtype_name(dtype));
}

// Closes the descriptor on every path out, including exceptions.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now so that a failing close (delayed write errors) can be reported.
  int release_close() {
    int r = ::close(fd_);
    fd_ = -1;
    return r;
  }

 private:
  int fd_;
};

// Reads exactly n bytes at the current position; false at a premature end of file.
bool read_all(const std::string& path, int fd, void* buf, size_t n) {
  auto* out = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::read(fd, out, std::min<size_t>(n, size_t{1} << 30));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("{}: cannot read: {}", path, std::strerror(errno));
    if (got == 0) return false;
    out += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

void write_all(const std::string& path, int fd, const void* buf, size_t n) {
  const auto* in = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t put = ::write(fd, in, std::min<size_t>(n, size_t{1} << 30));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail("{}: cannot write: {}", path, std::strerror(errno));
    in += put;
    n -= static_cast<size_t>(put);
  }
}

struct Header {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// A strict parser for the one dict literal numpy writes: string keys; string, bool and
// int-tuple values; an optional trailing comma; surrounding whitespace.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::string_view text) : path_(path), s_(text) {}

  Header parse() {
    Header h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    skip_ws();
    expect('{');
    skip_ws();
    while (peek() != '}') {
      std::string key = string_literal();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (seen_descr) bad("duplicate key 'descr'");
        if (peek() != '\'' && peek() != '"')
          fail("{}: .npy structured dtypes are not supported (descr is not a string)", path_);
        h.descr = string_literal();
        seen_descr = true;
      } else if (key == "fortran_order") {
        if (seen_order) bad("duplicate key 'fortran_order'");
        h.fortran_order = boolean();
        seen_order = true;
      } else if (key == "shape") {
        if (seen_shape) bad("duplicate key 'shape'");
        h.shape = tuple();
        seen_shape = true;
      } else {
        bad(fmt::format("unexpected key '{}'", key));
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        skip_ws();
      } else if (peek() != '}') {
        bad("expected ',' or '}'");
      }
    }
    ++pos_;
    skip_ws();
    if (pos_ != s_.size()) bad("text after the closing '}'");
    if (!seen_descr || !seen_order || !seen_shape)
      bad("missing one of the keys 'descr', 'fortran_order', 'shape'");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail("{}: bad .npy header: {} at byte {} of the header", path_, what, pos_);
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    if (peek() != c) bad(fmt::format("expected '{}'", c));
    ++pos_;
  }
  std::string string_literal() {
    char quote = peek();
    if (quote != '\'' && quote != '"') bad("expected a quoted string");
    ++pos_;
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      // Escapes never occur in the keys and dtype codes numpy writes.
      if (s_[pos_] == '\n') bad("unterminated string");
      if (s_[pos_] == '\\') bad("escapes in strings are not supported");
      ++pos_;
    }
    if (pos_ >= s_.size()) bad("unterminated string");
    std::string out(s_.substr(start, pos_ - start));
    ++pos_;
    return out;
  }
  bool boolean() {
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    bad("expected True or False");
  }
  int64_t integer() {
    if (peek() < '0' || peek() > '9') bad("expected a non-negative integer");
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, peek() - '0', &v))
        bad("dimension too large");
      ++pos_;
    }
    if (peek() == 'L') ++pos_;  // Python 2 long literals, from old numpy versions
    return v;
  }
  Shape tuple() {
    expect('(');
    skip_ws();
    Shape shape;
    bool comma_after_last = false;
    while (peek() != ')') {
      if (shape.size() >= kMaxNpyRank) bad(fmt::format("more than {} dimensions", kMaxNpyRank));
      shape.push_back(integer());
      skip_ws();
      comma_after_last = false;
      if (peek() == ',') {
        ++pos_;
        skip_ws();
        comma_after_last = true;
      } else if (peek() != ')') {
        bad("expected ',' or ')' in the shape");
      }
    }
    // (3) is an int in Python, not a tuple; numpy always writes (3,).
    if (shape.size() == 1 && !comma_after_last) bad("one-element shape without a trailing ','");
    ++pos_;
    return shape;
  }

  const std::string& path_;
  std::string_view s_;
  size_t pos_ = 0;
};

std::string shape_tuple(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

}  // namespace

Tensor read_npy(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail("{}: cannot open: {}", path, std::strerror(EISDIR));
  // The size is needed to check the shape before allocating, so pipes are not accepted.
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", path);
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);

  unsigned char prefix[12] = {};
  if (file_bytes < 10 || !read_all(path, fd.get(), prefix, 8) ||
      std::memcmp(prefix, kMagic, kMagicBytes) != 0)
    fail("{}: not a .npy file (bad magic; expected \\x93NUMPY)", path);
  const int major = prefix[6], minor = prefix[7];
  if ((major != 1 && major != 2) || minor != 0)
    fail("{}: .npy format version {}.{} is not supported (expected 1.0 or 2.0)", path, major,
         minor);
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (!read_all(path, fd.get(), prefix + 8, len_bytes))
    fail("{}: truncated .npy file (no header length)", path);
  const uint32_t header_len =
      major == 1 ? get_le<uint16_t>(prefix + 8) : get_le<uint32_t>(prefix + 8);
  const uint64_t data_offset = 8 + len_bytes + header_len;
  if (header_len > kMaxNpyHeaderBytes)
    fail("{}: .npy header of {} bytes is over the limit of {}", path, header_len,
         kMaxNpyHeaderBytes);
  if (data_offset > file_bytes)
    fail("{}: truncated .npy file (header of {} bytes, file has {})", path, header_len, file_bytes);
  std::string text(header_len, '\0');
  if (!read_all(path, fd.get(), text.data(), header_len))
    fail("{}: truncated .npy file (header)", path);

  Header h = HeaderParser(path, text).parse();
  std::optional<DType> dtype;
  for (const NpyType& t : kNpyTypes)
    if (h.descr == t.descr) dtype = t.dtype;
  if (!dtype)
    fail("{}: .npy dtype '{}' is not supported (expected <f4, <i4, <i8, |u1 or |i1)", path,
         h.descr);
  if (h.fortran_order)
    fail(
        "{}: .npy array is in Fortran order; only C order is supported (save it with "
        "numpy.ascontiguousarray)",
        path);

  // Overflow-checked, so a header claiming a huge shape never reaches the allocator.
  uint64_t need = dtype_size(*dtype);
  bool overflow = false;
  for (int64_t d : h.shape)
    overflow |= __builtin_mul_overflow(need, static_cast<uint64_t>(d), &need);
  const uint64_t have = file_bytes - data_offset;
  if (overflow || need > have)
    fail("{}: truncated .npy file: shape {} of '{}' needs {} bytes of data, the file has {}", path,
         shape_tuple(h.shape), h.descr, overflow ? std::string("over 2^64") : std::to_string(need),
         have);
  if (need < have)
    fail("{}: {} bytes of unexpected data after the .npy array {} of '{}'", path, have - need,
         shape_tuple(h.shape), h.descr);

  Tensor t(*dtype, h.shape);
  if (!read_all(path, fd.get(), t.raw(), static_cast<size_t>(need)))
    fail("{}: truncated .npy file (data)", path);
  return t;
}

void write_npy(const std::string& path, const Tensor& t) {
  if (!t.defined()) fail("{}: cannot write an empty (undefined) tensor as .npy", path);
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   descr_of(t.dtype()), shape_tuple(t.shape()));
  // Pad with spaces and end in '\n' so that the data starts on a 64-byte boundary.
  const size_t unpadded = kMagicBytes + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 0xffff) fail("{}: .npy header too long for format 1.0", path);

  std::string prefix(kMagic, kMagicBytes);
  prefix.push_back('\x01');
  prefix.push_back('\x00');
  prefix.push_back(static_cast<char>(header.size() & 0xff));
  prefix.push_back(static_cast<char>(header.size() >> 8));

  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail("{}: cannot create: {}", path, std::strerror(errno));
  write_all(path, fd.get(), prefix.data(), prefix.size());
  write_all(path, fd.get(), header.data(), header.size());
  write_all(path, fd.get(), t.raw(), t.bytes());
  if (fd.release_close() != 0) fail("{}: cannot write: {}", path, std::strerror(errno));
}

}  // namespace sf
