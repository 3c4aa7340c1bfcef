#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace rekindle::testing {

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class temp_dir {
 public:
  explicit temp_dir(std::string_view prefix = "rekindle-test");
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir();

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// Writes `contents` to `name` inside the directory and returns its path.
  std::filesystem::path write(const std::string& name, std::string_view contents) const;

 private:
  std::filesystem::path path_;
};

/// The repository's root directory.
std::filesystem::path source_dir();
/// Where the built programs are: $REKINDLE_TEST_BIN_DIR when set, else the build's bin/.
std::filesystem::path bin_dir();
/// Reads a whole file.
std::string read_file(const std::filesystem::path& path);

}  // namespace rekindle::testing
