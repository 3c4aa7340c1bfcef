// libFuzzer target: the checkpoint manifest file (storage::parse_manifest_file), which
// `rekindle checkpoint list|verify|export` read from a directory anyone may have written: whatever
// the text, a manifest within its bounds or a refusal naming the file, and an accepted manifest
// written again reads back the same.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/check.hpp"
#include "storage/manifest_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rekindle::storage;
  const std::string_view text{reinterpret_cast<const char*>(data), size};
  const auto m = parse_manifest_file(text, "fuzz.manifest.json");
  if (!m) {
    RK_CHECK(m.error().message().starts_with("fuzz.manifest.json: "), "a refusal names the file");
    return 0;
  }
  RK_CHECK(m->world_size >= 1 && m->world_size <= max_manifest_world);
  RK_CHECK(m->shards.size() <= m->world_size);
  for (const auto& s : m->shards) {
    RK_CHECK(s.rank.value() < m->world_size);
    RK_CHECK(!s.file.empty() && s.file.find('/') == std::string::npos && s.file != "." && s.file != "..");
  }
  const auto again = parse_manifest_file(manifest_file_text(*m), "again");
  RK_CHECK(again.has_value() && *again == *m, "a manifest written again reads back the same");
  return 0;
}
