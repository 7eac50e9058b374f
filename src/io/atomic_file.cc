#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace sf {

// A writer killed mid-write (SIGKILL, power loss) leaves its "<target>.tmp-<pid>-<n>" behind;
// the next writer of the same target removes those whose process is gone.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = target.filename().string() + ".tmp-";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos || rest.find_first_not_of("0123456789") != dash)
      continue;
    const long pid = std::strtol(rest.substr(0, dash).c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

bool is_device_or_pipe(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  return fs::exists(status) && !fs::is_regular_file(status) && !fs::is_directory(status);
}

std::string file_to_replace(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec)) || !fs::exists(path, ec)) return path;
  const fs::path resolved = fs::canonical(path, ec);
  return ec ? path : resolved.string();
}

AtomicFile::AtomicFile(const std::string& path, const std::string& kind)
    : path_(path), kind_(kind) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail("{}: cannot write {}: it is a folder", path, kind);
  // As root, renaming over /dev/null made it a regular file.
  if (is_device_or_pipe(path)) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) error("cannot open");
    return;
  }
  final_ = file_to_replace(path);
  remove_stale_temporaries(final_);
  static std::atomic<int> counter{0};
  tmp_ = fmt::format("{}.tmp-{}-{}", final_, ::getpid(), counter++);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) error("cannot create " + tmp_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, uint64_t n) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t done = ::write(fd_, p, std::min<uint64_t>(n, uint64_t{1} << 30));
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) error("cannot write " + (tmp_.empty() ? path_ : tmp_));
    p += done;
    n -= static_cast<uint64_t>(done);
    pos_ += static_cast<uint64_t>(done);
  }
}

void AtomicFile::pad_to(uint64_t offset, uint64_t alignment) {
  SF_CHECK(offset >= pos_ && offset - pos_ < alignment, "bad padding {} -> {}", pos_, offset);
  const std::vector<char> zeros(static_cast<size_t>(offset - pos_), 0);
  write(zeros.data(), zeros.size());
}

// fsync, rename over the target, then fsync the folder so the rename itself is durable.
void AtomicFile::commit() {
  if (tmp_.empty()) {  // a device or pipe: nothing to rename, nothing to make durable
    const int rc = ::close(fd_);
    fd_ = -1;
    committed_ = true;
    if (rc != 0) error("cannot close");
    return;
  }
  if (::fsync(fd_) != 0) error("cannot fsync " + tmp_);
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) error("cannot close " + tmp_);
  if (::rename(tmp_.c_str(), final_.c_str()) != 0) error("cannot rename " + tmp_);
  committed_ = true;
  std::filesystem::path parent = std::filesystem::path(final_).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) error("cannot open folder " + dir);
  // Some file systems cannot fsync a folder (EINVAL); the rename has still happened.
  rc = ::fsync(dir_fd);
  int saved = errno;
  ::close(dir_fd);
  if (rc != 0 && saved != EINVAL) {
    errno = saved;
    error("cannot fsync folder " + dir);
  }
}

void AtomicFile::error(const std::string& what) {
  fail("{}: cannot write {}: {}: {}", path_, kind_, what, std::strerror(errno));
}

}  // namespace sf
