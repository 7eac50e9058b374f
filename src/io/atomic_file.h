// Writes that matter (checkpoints, models) go through AtomicFile: a temporary file next to the
// target, fsync, rename over the target, fsync of the folder. A process killed at any moment
// leaves either the old file or the new one, never a torn one; the temporary is removed unless
// committed; "<target>.tmp-<pid>-<n>" files of writers that were killed are removed by the next
// writer. Through a symbolic link, the file it names is replaced (or created) and the link kept;
// a device, pipe or socket (/dev/null, /dev/stdout) is written directly, since renaming over it
// would replace the node itself; a folder, a missing folder and a loop of links are errors.
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

  // Where the bytes go: into a temporary renamed over the file (or the file a link names); into
  // a device or pipe directly; or, with a check, into a temporary copied into the device.
  enum class Target { File, Device, StagedDevice };

  std::string path_, kind_;
  WrittenFileCheck check_;
  Target target_ = Target::File;
  std::string final_;  // Target::File: the file the rename replaces, path_ or what its link names
  std::string tmp_;    // the temporary; empty for Target::Device
  int fd_ = -1;
  bool committed_ = false;
  uint64_t pos_ = 0;
};

}  // namespace sf
