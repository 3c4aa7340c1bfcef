// libFuzzer target: the planner's cluster and model files (the first byte picks which).

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/planner_files.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0)
    return 0;
  const std::string_view text{reinterpret_cast<const char*>(data) + 1, size - 1};
  if (data[0] % 2 == 0)
    (void)rekindle::config::parse_plan_cluster(text, "cluster.toml").error_text();
  else
    (void)rekindle::config::parse_plan_model(text, "model.toml").error_text();
  return 0;
}
