#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "actors/bridge.hpp"
#include "actors/messages.hpp"

namespace rekindle::testing {

/// One process's actor system and bridge, for tests of what crosses the bridge: `listen` makes it
/// accept connections on 127.0.0.1 (an ephemeral port, `b->port()`); the others connect.
struct bridge_process {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<actors::bridge> b;

  bridge_process(bool listen, std::uint32_t node, std::string token = "bridge-test-token-0123456789",
                 std::string readonly_token = "") {
    actors::register_message_types(cfg);
    actors::register_bridge_types(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
    transport::messenger_options o;
    o.name = "node" + std::to_string(node);
    o.node = node;
    o.token = std::move(token);
    o.readonly_token = std::move(readonly_token);
    o.net_devices = "lo";
    if (listen)
      o.listen_host = "127.0.0.1";
    auto started = actors::bridge::start(*sys, o);
    EXPECT_TRUE(started) << started.error();
    b = std::move(*started);
  }
  ~bridge_process() { b->shutdown(); }
  bridge_process(const bridge_process&) = delete;
  bridge_process& operator=(const bridge_process&) = delete;
};

}  // namespace rekindle::testing
