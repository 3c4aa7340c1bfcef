#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace rekindle::transport {

/// An immutable run of bytes that keeps its storage alive: an owned vector, or memory owned by
/// someone else (a shared-memory slot, a tensor) together with a handle that keeps it mapped.
///
/// Copies share the storage. Thread-safety: immutable after construction; copies may travel
/// between threads.
class shared_bytes {
 public:
  shared_bytes() = default;
  /// Takes ownership of `bytes`.
  explicit shared_bytes(std::vector<std::byte> bytes);
  /// Views `view`, which stays valid as long as `owner` lives.
  shared_bytes(std::shared_ptr<const void> owner, std::span<const std::byte> view) noexcept
      : owner_(std::move(owner)), view_(view) {}

  /// Copies `text` into a new buffer.
  static shared_bytes copy_of(std::string_view text);
  static shared_bytes copy_of(std::span<const std::byte> bytes);

  [[nodiscard]] std::span<const std::byte> span() const noexcept { return view_; }
  [[nodiscard]] const std::byte* data() const noexcept { return view_.data(); }
  [[nodiscard]] std::size_t size() const noexcept { return view_.size(); }
  [[nodiscard]] bool empty() const noexcept { return view_.empty(); }
  [[nodiscard]] std::string_view as_string() const noexcept {
    return {reinterpret_cast<const char*>(view_.data()), view_.size()};
  }

 private:
  std::shared_ptr<const void> owner_;
  std::span<const std::byte> view_;
};

}  // namespace rekindle::transport
