#include "actors/messages.hpp"

namespace rekindle::actors {

namespace {

template <class... Ts>
struct type_list {};

using all_types = type_list<node_hello, node_heartbeat, rank_assignment, assign_ranks, abort_epoch, rank_ready,
                            restore_source, start_training, rank_exited, rank_trouble, progress_report, progress_batch,
                            rank_restored, snapshot_held, snapshot_dropped, snapshot_committed, restore_failed, kill_request, fail_node, job_finished, worker_hello, worker_activate, worker_heartbeat,
                            worker_assignment, snapshot_taken, snapshot_skipped, replica_header, state_request, state_reply, persist_request,
                            shard_persisted, admin_request, admin_reply, drill_request, partition_request, child_exited>;

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

}  // namespace

std::optional<epoch_t> fenced_epoch(const caf::message& msg) {
  return msg.empty() ? std::nullopt : fenced_epoch(msg, all_types{});
}

void register_message_types(caf::actor_system_config& cfg) { register_all(cfg, all_types{}); }

std::vector<std::string> message_type_names() { return names(all_types{}); }

}  // namespace rekindle::actors
