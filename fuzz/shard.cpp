// libFuzzer target: a checkpoint shard file's header and payload as a restore or
// `rekindle checkpoint verify` reads them (storage::verify_shard, read_shard), from a file that may
// be truncated, damaged or made up: whatever the bytes, the shard and its payload or a refusal
// naming the file, and both readers agree.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "storage/shard_file.hpp"

namespace {
std::filesystem::path file;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const auto dir = std::filesystem::temp_directory_path() / ("rekindle-fuzz-shard-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  file = dir / "ckpt-000000000001-r000000.shard";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rekindle;
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  const auto checked = storage::verify_shard(file);
  std::vector<std::byte> payload;
  const auto read = storage::read_shard(file, payload);
  RK_CHECK(checked.has_value() == read.has_value(), "verify and read agree");
  if (!checked) {
    RK_CHECK(checked.error().message().find(file.filename().string()) != std::string::npos, "a refusal names the file");
    return 0;
  }
  RK_CHECK(*checked == *read);
  RK_CHECK(payload.size() == read->size, "the payload is as long as the header says");
  RK_CHECK(size == storage::shard_header_bytes + payload.size(), "nothing after the payload");
  return 0;
}
