// libFuzzer target: every message the bridge decodes from a peer's frame (CAF's deserialisation
// of a registered type, then the checks the bridge applies before delivery: enum fields, the
// epoch a fenced message carries, what a read-only peer may send).
//
// With REKINDLE_FUZZ_SEEDS=DIR set, it first writes one serialised message of every type there,
// the seed corpus (scripts/fuzz does this).

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "actors/bridge.hpp"
#include "actors/messages.hpp"
#include "common/check.hpp"

namespace {

caf::actor_system_config* config = nullptr;
caf::actor_system* sys = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  config = new caf::actor_system_config;
  rekindle::actors::register_message_types(*config);
  rekindle::actors::register_bridge_types(*config);
  config->set("scheduler.max-threads", 1);
  config->set("logger.console", caf::atom("none"));
  sys = new caf::actor_system{*config};
  if (const char* dir = std::getenv("REKINDLE_FUZZ_SEEDS")) {
    int i = 0;
    for (auto m : rekindle::actors::one_message_of_every_type()) {
      std::vector<char> buf;
      caf::binary_serializer sink{*sys, buf};
      if (!sink(m))
        std::ofstream(std::string{dir} + "/type-" + std::to_string(i++), std::ios::binary).write(buf.data(), static_cast<std::streamsize>(buf.size()));
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  caf::message msg;
  const std::span<const std::byte> bytes{reinterpret_cast<const std::byte*>(data), size};
  if (auto err = rekindle::actors::decode_message(*sys, bytes, msg); err || msg.empty())
    return 0;
  (void)rekindle::actors::well_formed(msg);
  (void)rekindle::actors::fenced_epoch(msg);
  (void)rekindle::actors::read_only_may_send(msg);
  (void)msg.content().stringify();
  return 0;
}
