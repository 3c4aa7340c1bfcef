// libFuzzer target: the frame decoder every received frame goes through (header, then payload).

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/check.hpp"
#include "transport/frame.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rekindle::transport;
  const std::span<const std::byte> bytes{reinterpret_cast<const std::byte*>(data), size};
  frame_header h;
  std::string detail;
  const auto header_size = std::min(size, max_header_size);
  const auto r = decode_header(bytes.first(header_size), 1u << 20, h, &detail);
  if (r != drop_reason::none) {
    RK_CHECK(!detail.empty(), "a refused header says why");
    return 0;
  }
  // A header that decodes encodes back to the same bytes.
  frame_header again = h;
  const auto payload = bytes.subspan(header_size);
  (void)check_payload(h, payload);
  const auto encoded = encode_header(again, payload);
  RK_CHECK_EQ(encoded.size(), frame_fixed_size + h.src_actor.size() + h.dst_actor.size());
  return 0;
}
