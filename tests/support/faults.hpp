#pragma once

#include <filesystem>
#include <string>

namespace rekindle::testing {

/// Flips a byte in the middle of both halves of the snapshot slot `name`: neither snapshot passes
/// its checksum. False when the slot cannot be opened or written.
bool corrupt_slot(const std::string& name);

/// A small tmpfs at `at` (created if missing) of `size` ("1200k", "64m"), unmounted when it goes
/// away however the test ends. Mounting needs root: `mounted()` says whether it worked, `why()`
/// why not.
class small_disk {
 public:
  small_disk(std::filesystem::path at, const std::string& size);
  ~small_disk();
  small_disk(const small_disk&) = delete;
  small_disk& operator=(const small_disk&) = delete;

  [[nodiscard]] bool mounted() const noexcept { return mounted_; }
  [[nodiscard]] const std::string& why() const noexcept { return why_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return at_; }
  /// Writes a filler file until the file system is full; `free_up` removes it.
  void fill() const;
  void free_up() const;

 private:
  std::filesystem::path at_;
  bool mounted_ = false;
  std::string why_;
};

}  // namespace rekindle::testing
