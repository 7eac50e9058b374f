// Writes that matter (checkpoints, models) go through AtomicFile: a temporary file next to the
// target, fsync, rename over the target, fsync of the folder. A process killed at any moment
// leaves either the old file or the new one, never a torn one; the temporary is removed unless
// committed; "<target>.tmp-<pid>-<n>" files of writers that were killed are removed by the next
// writer. Through a symbolic link, the file it names is replaced (or created) and the link kept;
// a device, pipe or socket (/dev/null, /dev/stdout) is written directly, since renaming over it
// would replace the node itself; a folder is an error.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace sf {

// Reads back a complete, closed file before it replaces anything (`import` loads the model it
// converted); throwing leaves the target as it was.
using WrittenFileCheck = std::function<void(const std::string& written)>;

class AtomicFile {
 public:
  // `kind` names the file in errors: "<path>: cannot write <kind>: ...". With a `check`, a
  // device or pipe target is staged in the temporary folder too and copied in once checked,
  // since what reaches a pipe cannot be taken back.
  AtomicFile(const std::string& path, const std::string& kind, WrittenFileCheck check = {});
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  uint64_t position() const { return pos_; }
  void write(const void* data, uint64_t n);
  // Writes zeros up to `offset`, which must be less than `alignment` bytes ahead.
  void pad_to(uint64_t offset, uint64_t alignment = 64);
  void commit();

 private:
  [[noreturn]] void error(const std::string& what);
  void copy_staged_into_device();

  std::string path_, kind_;
  WrittenFileCheck check_;
  bool device_ = false;  // a device or pipe: written in place, or copied in from tmp_
  std::string final_;    // the file the rename replaces: path_, or the file its link names
  std::string tmp_;      // empty when writing a device or pipe directly
  int fd_ = -1;
  bool committed_ = false;
  uint64_t pos_ = 0;
};

}  // namespace sf
