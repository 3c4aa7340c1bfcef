#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>

namespace rekindle::kernels {

/// Zero-initialised host memory for `count` values of T, aligned to 64 bytes (a cache line and an
/// AVX-512 vector), so kernels see the same alignment in every run.
///
/// Thread-safety: like std::vector.
template <class T>
class host_array {
 public:
  host_array() noexcept = default;
  explicit host_array(std::size_t count) : size_(count) {
    if (count == 0)
      return;
    const std::size_t bytes = (count * sizeof(T) + alignment - 1) / alignment * alignment;
    data_.reset(static_cast<T*>(std::aligned_alloc(alignment, bytes)));
    if (data_)
      std::memset(static_cast<void*>(data_.get()), 0, bytes);
    else
      size_ = 0;
  }

  /// False when the allocation failed.
  [[nodiscard]] bool valid() const noexcept { return size_ == 0 || data_ != nullptr; }
  [[nodiscard]] T* data() noexcept { return data_.get(); }
  [[nodiscard]] const T* data() const noexcept { return data_.get(); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<T> span() noexcept { return {data_.get(), size_}; }
  [[nodiscard]] std::span<const T> span() const noexcept { return {data_.get(), size_}; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  static constexpr std::size_t alignment = 64;
  struct free_deleter {
    void operator()(T* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<T[], free_deleter> data_;
  std::size_t size_ = 0;
};

}  // namespace rekindle::kernels
