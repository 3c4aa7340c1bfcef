#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace rekindle {

/// The outcome of an operation that returns no value: ok, or an error code with a message.
///
/// An ok status allocates nothing. Thread-safety: a status is a value; distinct objects may be
/// used from distinct threads, one object needs external synchronisation like any value.
class [[nodiscard]] status {
 public:
  /// Creates an ok status.
  status() noexcept = default;
  /// Creates an error status. REQUIRES: `message` says what failed and where.
  status(errc code, std::string message);

  status(const status& other);
  status& operator=(const status& other);
  status(status&&) noexcept = default;
  status& operator=(status&&) noexcept = default;
  ~status() = default;

  /// Returns an ok status.
  static status ok_status() noexcept { return {}; }

  [[nodiscard]] bool ok() const noexcept { return rep_ == nullptr; }
  explicit operator bool() const noexcept { return ok(); }
  /// The error code. REQUIRES: !ok().
  [[nodiscard]] errc code() const noexcept;
  /// The message, empty when ok.
  [[nodiscard]] const std::string& message() const noexcept;
  /// "ok" or "<code>: <message>".
  [[nodiscard]] std::string to_string() const;

  /// Returns a copy whose message is prefixed with `context` and ": ".
  [[nodiscard]] status with_context(std::string_view context) const;

  friend bool operator==(const status& a, const status& b) noexcept;

 private:
  struct rep {
    errc code;
    std::string message;
  };
  std::unique_ptr<rep> rep_;
};

std::ostream& operator<<(std::ostream& os, const status& s);

}  // namespace rekindle
