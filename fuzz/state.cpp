// libFuzzer target: the rank-state parser every restore goes through (a slot, a buddy's replica, a
// checkpoint shard): whatever the bytes, an error or views inside the buffer.

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/check.hpp"
#include "training/state.hpp"

namespace {

bool inside(std::span<const std::byte> part, std::span<const std::byte> whole) {
  return part.empty() || (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes{reinterpret_cast<const std::byte*>(data), size};
  auto view = rekindle::training::parse_state(bytes);
  if (!view) {
    RK_CHECK(!view.error().message().empty(), "a refused state says why");
    return 0;
  }
  RK_CHECK(inside(view->params, bytes) && inside(view->m, bytes) && inside(view->v, bytes),
           "a parsed state's parts lie inside its buffer");
  return 0;
}
