#pragma once

#include <type_traits>
#include <utility>
#include <variant>

#include "common/check.hpp"
#include "common/status.hpp"

namespace rekindle {

/// A value of type T, or the error `status` that explains why there is none.
///
/// Accessing the value of an error is a bug and aborts with the status message. Thread-safety:
/// a value type, like `status`.
template <class T>
class [[nodiscard]] expected {
 public:
  static_assert(!std::is_same_v<std::decay_t<T>, status>, "use status for operations without a value");

  expected(T v) : data_(std::in_place_index<0>, std::move(v)) {}  // NOLINT: implicit
  expected(status error) : data_(std::in_place_index<1>, std::move(error)) {  // NOLINT: implicit
    RK_CHECK(!std::get<1>(data_).ok(), "an expected<T> error must not be an ok status");
  }
  expected(errc code, std::string message) : expected(status{code, std::move(message)}) {}

  [[nodiscard]] bool has_value() const noexcept { return data_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & {
    check_value();
    return std::get<0>(data_);
  }
  const T& value() const& {
    check_value();
    return std::get<0>(data_);
  }
  T&& value() && {
    check_value();
    return std::get<0>(std::move(data_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  /// The error. REQUIRES: !has_value().
  const status& error() const& {
    RK_CHECK(!has_value(), "expected<T>::error() called on a value");
    return std::get<1>(data_);
  }
  status&& error() && {
    RK_CHECK(!has_value(), "expected<T>::error() called on a value");
    return std::get<1>(std::move(data_));
  }

  /// The error, or an ok status when there is a value.
  [[nodiscard]] status to_status() const { return has_value() ? status{} : std::get<1>(data_); }

  template <class U>
  T value_or(U&& fallback) const& {
    return has_value() ? std::get<0>(data_) : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  void check_value() const {
    if (!has_value()) [[unlikely]]
      detail::check_failed(__FILE__, __LINE__, "has_value()", std::get<1>(data_).to_string());
  }

  std::variant<T, status> data_;
};

}  // namespace rekindle
