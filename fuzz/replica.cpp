// libFuzzer target: a standby's replica applying what arrives from the wire as the leader's
// changes (storage::state_replica::apply): whatever the bytes, a refusal naming the batch, or a
// write after which the replica still opens and reads.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "common/check.hpp"
#include "storage/state_replica.hpp"

namespace {

// Never destroyed: RocksDB's own statics may be gone by the time a static destructor closed it.
rekindle::storage::state_replica* replica = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const auto dir = std::filesystem::temp_directory_path() / ("rekindle-fuzz-replica-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto r = rekindle::storage::state_replica::open(dir);
  RK_CHECK(r.has_value(), "the replica opens");
  replica = r->release();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  rekindle::storage::replication_chunk chunk;
  // The first byte says whether the chunk resets the copy and where the batch boundary lies.
  if (size == 0)
    return 0;
  chunk.reset = (data[0] & 1) != 0;
  const std::string bytes{reinterpret_cast<const char*>(data + 1), size - 1};
  const std::size_t cut = bytes.empty() ? 0 : data[0] % (bytes.size() + 1);
  chunk.batches = {bytes.substr(0, cut), bytes.substr(cut)};
  chunk.next = replica->position();
  chunk.next.next += 1;
  const auto before = replica->position().next;
  const auto st = replica->apply(chunk);
  if (!st.ok()) {
    RK_CHECK(!st.message().empty(), "a refused batch says why");
    RK_CHECK(replica->position().next == before || chunk.reset, "a refused chunk does not move the position");
  }
  return 0;
}
