#include "transport/bytes.hpp"

#include <cstring>

namespace rekindle::transport {

shared_bytes::shared_bytes(std::vector<std::byte> bytes) {
  auto owned = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  view_ = std::span<const std::byte>{owned->data(), owned->size()};
  owner_ = std::move(owned);
}

shared_bytes shared_bytes::copy_of(std::string_view text) {
  std::vector<std::byte> v(text.size());
  if (!text.empty())
    std::memcpy(v.data(), text.data(), text.size());
  return shared_bytes{std::move(v)};
}

shared_bytes shared_bytes::copy_of(std::span<const std::byte> bytes) {
  return shared_bytes{std::vector<std::byte>(bytes.begin(), bytes.end())};
}

}  // namespace rekindle::transport
