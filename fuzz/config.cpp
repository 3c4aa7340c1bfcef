// libFuzzer target: the cluster configuration loader (TOML from a user's file).

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/load.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text{reinterpret_cast<const char*>(data), size};
  // Files the configuration names are looked up under a directory that does not exist.
  auto r = rekindle::config::parse(text, "fuzz.toml", "/nonexistent-rekindle-fuzz");
  if (r.ok())
    (void)rekindle::config::to_toml(*r.value);
  else
    (void)r.error_text();
  return 0;
}
