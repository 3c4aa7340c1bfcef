#include "config/embedded.hpp"

namespace rekindle::config {

std::string_view embedded_default_text() noexcept {
  static constexpr std::string_view text =
#include "config/embedded_text.inc"
      ;
  return text;
}

}  // namespace rekindle::config
