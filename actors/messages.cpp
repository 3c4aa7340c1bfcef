#include "actors/messages.hpp"

#include <algorithm>

namespace rekindle::actors {

std::string_view to_string(drill_kind k) noexcept {
  switch (k) {
    case drill_kind::hang: return "hang";
    case drill_kind::slow: return "slow";
    case drill_kind::stall: return "stall";
  }
  return "unknown drill";
}

namespace {

using wire_types = type_list<node_hello, rank_position, node_heartbeat, rank_stack, node_check_request, node_check_report, link_probe_request, link_probe, link_probe_ack, link_report, rank_assignment, assign_ranks, abort_epoch, rank_ready,
                            restore_source, start_training, rank_exited, rank_completed, rank_trouble, progress_report, progress_batch,
                            rank_restored, snapshot_held, holdings_reported, replica_pull, replica_changes, leader_seen, introduce_yourself, snapshot_dropped, snapshot_committed, restore_failed, kill_request, fail_node, job_finished, worker_hello, worker_activate, worker_heartbeat,
                            worker_assignment, snapshot_taken, snapshot_skipped, replica_header, state_request, state_reply, persist_request,
                            shard_persisted, admin_reply, drill_request, partition_request, child_exited>;

// Each enum a message can carry, checked against its values.
bool known(copy_kind k) { return static_cast<std::uint8_t>(k) < copy_kinds; }
bool known(drill_kind k) { return static_cast<std::uint8_t>(k) < drill_kinds; }
bool known(errc c) { return c >= errc::invalid_argument && c <= errc::internal; }
// More ranks than any node runs (ranks_per_node is at most 1024).
constexpr std::size_t max_positions_per_heartbeat = 4096;

bool known(collective_kind k) { return static_cast<std::uint8_t>(k) < collective_kinds; }
bool known(collective_phase p) { return static_cast<std::uint8_t>(p) < collective_phases; }

// The enum fields of each message type that has any; every other type has none to check.
template <class T>
bool fields_known(const T&) {
  return true;
}
bool fields_known(const restore_source& x) { return known(x.kind); }
bool fields_known(const start_training& x) {
  return std::all_of(x.sources.begin(), x.sources.end(), [](const restore_source& s) { return known(s.kind); });
}
bool fields_known(const snapshot_held& x) { return known(x.kind); }
bool fields_known(const snapshot_dropped& x) { return known(x.kind); }
bool fields_known(const restore_failed& x) { return known(x.kind); }
bool fields_known(const state_request& x) { return known(x.kind); }
bool fields_known(const drill_request& x) { return known(x.kind); }
bool fields_known(const admin_drill& x) { return known(x.kind); }
bool fields_known(const admin_reply& x) { return x.ok || known(x.code); }
bool fields_known(const rank_position& x) {
  return known(x.kind) && known(x.phase) && known(x.p2p_kind) && known(x.p2p_phase);
}
bool fields_known(const node_heartbeat& x) {
  return x.positions.size() <= max_positions_per_heartbeat &&
         std::all_of(x.positions.begin(), x.positions.end(), [](const rank_position& p) { return fields_known(p); });
}
bool fields_known(const worker_heartbeat& x) {
  return known(x.kind) && known(x.phase) && known(x.p2p_kind) && known(x.p2p_phase);
}

template <class T>
bool known_if(const caf::message& msg, bool& ok) {
  if (!msg.match_element<T>(0))
    return false;
  ok = fields_known(msg.get_as<T>(0));
  return true;
}

template <class... Ts>
bool well_formed(const caf::message& msg, type_list<Ts...>) {
  bool ok = true;
  (known_if<Ts>(msg, ok) || ...);
  return ok;
}

template <class... As, class... Bs>
type_list<As..., Bs...> operator+(type_list<As...>, type_list<Bs...>) {
  return {};
}
using all_types = decltype(wire_types{} + admin_requests{});

// Reads the name an inspect function declares, ignoring the fields.
struct name_reader {
  using result_type = void;
  std::string name;
  template <class... Ts>
  void operator()(caf::meta::type_name_t n, Ts&&...) {
    name = n.value;
  }
};

// The registered name of each type: the one its inspect function declares.
template <class T>
std::string name_of() {
  name_reader r;
  T x{};
  inspect(r, x);
  return r.name;
}

template <class... Ts>
void register_all(caf::actor_system_config& cfg, type_list<Ts...>) {
  (cfg.add_message_type<Ts>(name_of<Ts>()), ...);
}

template <class... Ts>
std::vector<std::string> names(type_list<Ts...>) {
  return {name_of<Ts>()...};
}

template <class T>
bool epoch_if(const caf::message& msg, std::optional<epoch_t>& out) {
  if constexpr (fenced<T>) {
    if (msg.match_element<T>(0)) {
      out = msg.get_as<T>(0).epoch;
      return true;
    }
  }
  return false;
}

template <class... Ts>
std::optional<epoch_t> fenced_epoch(const caf::message& msg, type_list<Ts...>) {
  std::optional<epoch_t> out;
  (epoch_if<Ts>(msg, out) || ...);
  return out;
}

template <class... Ts>
bool first_is_one_of(const caf::message& msg, type_list<Ts...>) {
  return (msg.match_element<Ts>(0) || ...);
}

}  // namespace

template <class... Ts>
std::vector<caf::message> samples(type_list<Ts...>) {
  return {caf::make_message(Ts{})...};
}

std::vector<caf::message> one_message_of_every_type() { return samples(all_types{}); }

bool read_only_may_send(const caf::message& msg) { return !msg.empty() && first_is_one_of(msg, admin_requests{}); }

std::optional<epoch_t> fenced_epoch(const caf::message& msg) {
  return msg.empty() ? std::nullopt : fenced_epoch(msg, all_types{});
}

bool well_formed(const caf::message& msg) { return msg.empty() || well_formed(msg, all_types{}); }

void register_message_types(caf::actor_system_config& cfg) { register_all(cfg, all_types{}); }

std::vector<std::string> message_type_names() { return names(all_types{}); }

}  // namespace rekindle::actors
