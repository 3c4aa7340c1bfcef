// libFuzzer target: the parsers every value from outside goes through: whole numbers, addresses,
// durations, sizes, and the JSON nesting check.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/check.hpp"
#include "common/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rekindle;
  const std::string_view text{reinterpret_cast<const char*>(data), size};
  if (auto n = parse_whole_number(text, 1, 65535))
    RK_CHECK(*n >= 1 && *n <= 65535);
  if (auto hp = parse_host_port(text)) {
    RK_CHECK(hp->port >= 1);
    RK_CHECK(check_host(hp->host).ok());
  }
  (void)check_host(text);
  if (auto d = parse_duration(text))
    (void)duration_to_string(*d);
  if (auto s = parse_size(text))
    (void)size_to_string(*s);
  (void)json_nesting_depth(text);
  return 0;
}
