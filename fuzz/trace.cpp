// libFuzzer target: the fault trace parser (JSON lines from a user's file), and writing back
// what it read.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/check.hpp"
#include "trace/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rekindle::trace;
  const std::string_view text{reinterpret_cast<const char*>(data), size};
  auto r = parse(text, "fuzz.jsonl");
  if (!r.ok()) {
    (void)r.error_text();
    return 0;
  }
  // What was read writes out to a trace that reads back equal.
  auto again = parse(to_jsonl(*r.value), "again.jsonl");
  RK_CHECK(again.ok(), again.error_text());
  return 0;
}
