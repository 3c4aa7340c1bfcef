#include "actors/admin_client.hpp"

#include <fstream>

#include "actors/leadership.hpp"
#include "actors/node_context.hpp"
#include "common/files.hpp"
#include "common/text.hpp"

namespace rekindle::actors {

std::string find_supervisor(const config::spec& spec, const std::filesystem::path& data_dir) {
  // With a standby, etcd names the daemon that leads now, on whichever host it runs.
  if (!spec.cluster.standby.empty() && !spec.cluster.etcd.empty()) {
    const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(spec.cluster.lease);
    if (auto leader = ask_etcd_for_leader(spec, timeout); leader && *leader && !(*leader)->address.empty())
      return (*leader)->address;
  }
  const auto& sup = spec.nodes.at(spec.supervisor_node().value());
  if (sup.port != 0)
    return sup.host + ":" + std::to_string(sup.port);
  const auto written = read_file_bounded((data_dir.empty() ? spec.daemon.data_dir : data_dir) / "supervisor.addr",
                                         file_limits::small, "address file");
  return written ? std::string{trim(*written)} : std::string{};
}

expected<std::unique_ptr<admin_client>> admin_client::connect(const config::spec& spec, const admin_target& target,
                                                               std::chrono::nanoseconds timeout) {
  std::unique_ptr<admin_client> c{new admin_client};
  c->address_ = target.address.empty() ? find_supervisor(spec, target.data_dir) : target.address;
  if (c->address_.empty())
    return status{errc::unavailable, "the supervisor's address is unknown: its node has no port in " + spec.source +
                                         " and " + ((target.data_dir.empty() ? spec.daemon.data_dir : target.data_dir) /
                                                    "supervisor.addr")
                                                       .string() +
                                         " does not exist (is the job running? or pass --connect HOST:PORT)"};
  const auto to = parse_host_port(c->address_);
  if (!to)
    return status{errc::invalid_argument, to.error().message()};
  configure_actor_system(c->cfg_, 1);
  c->system_ = std::make_unique<caf::actor_system>(c->cfg_);
  transport::messenger_options o;
  o.name = "rekindle shell";
  o.node = 0xffffffffu;
  o.token = target.token.empty() ? spec.security.token : target.token;
  o.keepalive = spec.timeouts.keepalive();
  o.peer_timeout = std::max<std::chrono::nanoseconds>(spec.timeouts.node, std::chrono::seconds{5});
  // No net_devices: transport.net_devices names the nodes' devices, and the shell runs wherever
  // it is started (a node, a login host, another network namespace), so UCX chooses among this
  // host's devices. Restricted to a device this host lacks, UCX refused the nodes' connections.
  o.tls = spec.transport.tls;
  RK_ASSIGN_OR_RETURN(c->bridge_, bridge::start(*c->system_, o));
  c->self_ = std::make_unique<caf::scoped_actor>(*c->system_);
  c->bridge_->expose("shell", caf::actor{*c->self_});
  auto peer = c->bridge_->connect_blocking(to->host, to->port, timeout);
  if (!peer) {
    if (peer.error().code() == errc::unauthenticated)
      return status{errc::unauthenticated, "the supervisor at " + c->address_ + " refused this token: " + peer.error().message()};
    return status{errc::unavailable, "no supervisor answers at " + c->address_ + ": " + peer.error().message()};
  }
  c->supervisor_ = peer->id;
  c->role_ = static_cast<std::uint8_t>(peer->role);
  return c;
}

admin_client::~admin_client() {
  if (bridge_)
    bridge_->shutdown();
  self_.reset();
}

expected<admin_reply> admin_client::await(std::uint64_t id, std::string_view command,
                                          std::chrono::nanoseconds timeout) {
  std::optional<admin_reply> reply;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reply && std::chrono::steady_clock::now() < deadline) {
    (*self_)->receive([&](const envelope&, const admin_reply& r) {
      if (r.id == id)
        reply = r;
    },
                      [&](const envelope&, const job_finished&) {},
                      caf::after(std::chrono::milliseconds{100}) >> [] {});
  }
  if (!reply)
    return status{errc::timeout, "the supervisor at " + address_ + " did not answer '" + std::string{command} +
                                     "' in time"};
  if (!reply->ok)
    return status{reply->code, std::move(reply->text)};
  return *reply;
}

}  // namespace rekindle::actors
