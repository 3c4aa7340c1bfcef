#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/node_context.hpp"
#include "storage/shard_writer.hpp"
#include "storage/snapshot_slot.hpp"

namespace rekindle::actors {

/// The checkpoint actor of a node: owns the snapshot slots of the node's local ranks, keeps
/// replicas of its buddy node's snapshots, and serves rank states for restores. Which copies a slot
/// and a replica window keep is the custody rule's (policy/snapshot_custody.hpp); this actor reads
/// what the slots hold from the slots themselves.
///
/// 1. A worker publishes a snapshot into its slot (the slot's custody rule chose the half) and says
///    so (snapshot_taken, naming the copy it overwrote).
/// 2. The actor reports the overwritten copy dropped and the new one held (snapshot_dropped,
///    snapshot_held: own slot), copies the snapshot out of the slot (checking the half was not
///    overwritten meanwhile) and sends it to the buddy node's checkpoint actor as a bulk payload,
///    off the training path.
/// 3. The buddy verifies its checksum, adds it to its replica window, and reports the replicas the
///    window evicts dropped and the new one held (buddy replica).
/// 4. The supervisor announces each newly committed step (snapshot_committed): the actor pins it in
///    every local slot's header and in its replica window, so neither loses it.
/// 5. A worker whose snapshot the custody rule skipped says so (snapshot_skipped): the anchor it
///    waits for is replicated again every anchor interval of skips (its replica may never have
///    been made: the buddy not known yet, a copy overtaken), and a long wait is logged.
/// 6. A worker restoring a state it does not have in its own slot asks its node's checkpoint actor
///    (state_request); the request is served from this node's slots or replicas, or forwarded to
///    the daemon that holds the state.
/// 7. Asked to persist a step (persist_request), it hands each local slot's snapshot of that step
///    to a shard_writer, whose copy thread copies it at once (checksum-checked on the way) into a
///    buffer an earlier checkpoint used and whose writer thread writes it at a low priority; each
///    shard's outcome goes to the supervisor (shard_persisted). Neither training nor this actor
///    waits for the copies or the disk.
///
/// Exposed to peers as "checkpoint". Thread-safety: an actor.
class checkpoint_actor : public caf::event_based_actor {
 public:
  checkpoint_actor(caf::actor_config& cfg, node_context* ctx, std::vector<storage::snapshot_slot> slots);
  ~checkpoint_actor() override;
  caf::behavior make_behavior() override;
  void on_exit() override;
  const char* name() const override { return "checkpoint"; }

 private:
  struct replica {
    policy::copy_tag tag;
    std::uint64_t checksum = 0;
    transport::shared_bytes bytes;
  };
  struct forwarded {
    transport::peer_id requester;
    std::string requester_actor;
    std::uint64_t requester_id = 0;
    /// The holder's daemon it went to, once connected: a request to a peer that goes down is
    /// answered with an error at once instead of never.
    std::optional<transport::peer_id> holder;
  };

  void replicate(std::uint32_t local_index, const policy::copy_tag& c);
  /// Forgets replica `gone` (its window dropped it) and tells the supervisor.
  void drop_replica(const policy::copy_tag& gone);
  void persist(const persist_request& p);
  void report_all();
  void serve(const envelope& from, const state_request& r);
  void forward(const envelope& from, const state_request& r);
  void reply_error(transport::peer_id to, const std::string& actor, std::uint64_t id, const std::string& why);
  void with_peer(const std::string& address, std::function<void(expected<transport::peer_id>)> then);
  /// The link check's probes (link_probe_request): one run at a time per request id.
  struct link_run {
    link_probe_request request;
    transport::peer_id peer;
    transport::shared_bytes payload;
    std::uint32_t seq = 0;
    std::chrono::steady_clock::time_point sent;
    double best_s = 0;
  };
  void probe_link(const link_probe_request& r);
  void send_probe(link_run& run);
  void on_probe_ack(const link_probe_ack& a);
  void end_link_run(std::uint64_t id, std::string error);

  node_context* ctx_;
  std::vector<storage::snapshot_slot> slots_;
  /// Which replicas of the buddy's ranks this node keeps (the custody rule), and their bytes.
  policy::replica_window window_;
  std::vector<replica> replicas_;
  /// Snapshots each local slot skipped in a row (snapshot_skipped), by local index.
  std::map<std::uint32_t, std::uint64_t> skipped_;
  node_id buddy_;
  std::string buddy_address_;
  /// This node's ranks in the newest assignment, by local index.
  std::map<std::uint32_t, rank_id> local_ranks_;
  /// Daemons this actor talks to, by address.
  std::map<std::string, transport::peer_id> peers_;
  /// Connections being made, with what waits for each.
  std::map<std::string, std::vector<std::function<void(expected<transport::peer_id>)>>> connecting_;
  std::map<std::uint64_t, forwarded> forwarded_;
  /// Failure injection from REKINDLE_FAULT_PERSIST (docs/RUNTIME.md); null without it.
  std::unique_ptr<storage::shard_file_hooks> persist_hooks_;
  /// Writes shards off this actor's thread; made on the first persist_request.
  std::unique_ptr<storage::shard_writer> writer_;
  /// Buffers of finished shard writes, for the next checkpoint's copies.
  std::vector<storage::shard_buffer> spare_buffers_;
  /// The epoch of the newest requests to persist each step (the last few).
  std::map<step_t, epoch_t> persist_epochs_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, link_run> link_runs_;
};

}  // namespace rekindle::actors
