// Scratch folders and whole-file bytes for tests that write files to load or corrupt.
#pragma once

#include <filesystem>
#include <string>

namespace sf::testing {

// A fresh empty folder under the system temp dir (named `prefix`-random), left in place.
std::string make_temp_dir(const std::string& prefix);

// A fresh empty folder as make_temp_dir makes, removed with everything in it when the
// object goes. `prefix` names the folder, so that leftovers say which test wrote them.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "slimflow-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// A file's bytes ("" when it cannot be read), and a file made of `bytes` (replaced if it exists).
std::string read_file_bytes(const std::string& path);
void write_file_bytes(const std::string& path, const std::string& bytes);

}  // namespace sf::testing
