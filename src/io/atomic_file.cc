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
#include <optional>
#include <utility>
#include <vector>

#include "core/error.h"

namespace sf {

namespace {

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

// nullopt for a loop of links. A dangling link is followed too, as `cp` and the shell's `>` do:
// the file it names is created. 40 hops is Linux's own limit (ELOOP).
std::optional<std::string> file_to_replace(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file(path);
  for (int hops = 0; fs::is_symlink(fs::symlink_status(file, ec)); ++hops) {
    if (hops == 40) return std::nullopt;
    const fs::path target = fs::read_symlink(file, ec);
    if (ec) return path;
    file = target.is_absolute() ? target : file.parent_path() / target;
  }
  return file.string();
}

// Writes all `n` bytes, through short writes and signals; false with errno set on failure.
bool write_all(int fd, const char* p, uint64_t n) {
  while (n > 0) {
    const ssize_t done = ::write(fd, p, std::min<uint64_t>(n, uint64_t{1} << 30));
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) return false;
    p += done;
    n -= static_cast<uint64_t>(done);
  }
  return true;
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path, const std::string& kind, WrittenFileCheck check)
    : path_(path), kind_(kind), check_(std::move(check)) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail("{}: cannot write {}: it is a folder", path, kind);
  static std::atomic<int> counter{0};
  // As root, renaming over /dev/null made it a regular file.
  if (is_device_or_pipe(path)) target_ = check_ ? Target::StagedDevice : Target::Device;
  if (target_ == Target::Device) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) error("cannot open");
    return;
  }
  if (target_ == Target::StagedDevice) {
    fs::path folder = fs::temp_directory_path(ec);
    if (ec) folder = "/tmp";
    const std::string staged = (folder / "slimflow-staged").string();
    remove_stale_temporaries(staged);
    tmp_ = fmt::format("{}.tmp-{}-{}", staged, ::getpid(), counter++);
  } else {
    const std::optional<std::string> file = file_to_replace(path);
    if (!file) fail("{}: cannot write {}: too many levels of symbolic links", path, kind);
    final_ = *file;
    const fs::path folder = fs::path(final_).parent_path();
    if (!folder.empty() && !fs::is_directory(folder, ec))
      fail("{}: cannot write {}: folder {} does not exist", path, kind, folder.string());
    remove_stale_temporaries(final_);
    tmp_ = fmt::format("{}.tmp-{}-{}", final_, ::getpid(), counter++);
  }
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) error("cannot create " + tmp_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && target_ != Target::Device) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, uint64_t n) {
  if (!write_all(fd_, static_cast<const char*>(data), n))
    error("cannot write " + (target_ == Target::Device ? path_ : tmp_));
  pos_ += n;
}

void AtomicFile::pad_to(uint64_t offset, uint64_t alignment) {
  SF_CHECK(offset >= pos_ && offset - pos_ < alignment, "bad padding {} -> {}", pos_, offset);
  const std::vector<char> zeros(static_cast<size_t>(offset - pos_), 0);
  write(zeros.data(), zeros.size());
}

// fsync, check, rename over the target, then fsync the folder so the rename itself is durable.
void AtomicFile::commit() {
  if (target_ == Target::Device) {  // nothing to rename, nothing to make durable
    const int rc = ::close(fd_);
    fd_ = -1;
    committed_ = true;
    if (rc != 0) error("cannot close");
    return;
  }
  if (target_ == Target::File && ::fsync(fd_) != 0) error("cannot fsync " + tmp_);
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) error("cannot close " + tmp_);
  if (check_) check_(tmp_);
  if (target_ == Target::StagedDevice) {
    copy_staged_into_device();
    committed_ = true;
    ::unlink(tmp_.c_str());
    return;
  }
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

void AtomicFile::copy_staged_into_device() {
  const int from = ::open(tmp_.c_str(), O_RDONLY | O_CLOEXEC);
  if (from < 0) error("cannot open " + tmp_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) {
    ::close(from);
    error("cannot open");
  }
  std::vector<char> buffer(size_t{1} << 20);
  for (;;) {
    const ssize_t got = ::read(from, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int saved = errno;
      ::close(from);
      errno = saved;
      if (got < 0) error("cannot read " + tmp_);
      break;
    }
    if (!write_all(fd_, buffer.data(), static_cast<uint64_t>(got))) {
      const int saved = errno;
      ::close(from);
      errno = saved;
      error("cannot write");
    }
  }
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) error("cannot close");
}

void AtomicFile::error(const std::string& what) {
  fail("{}: cannot write {}: {}: {}", path_, kind_, what, std::strerror(errno));
}

}  // namespace sf
