#include "common/check.hpp"

#include <cstdio>
#include <cstdlib>

namespace rekindle::detail {

void check_failed(const char* file, int line, const char* expr,
                  const std::string& message) noexcept {
  std::fprintf(stderr, "%s:%d: check failed: %s%s%s\n", file, line, expr,
               message.empty() ? "" : " ", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace rekindle::detail
