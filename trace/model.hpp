#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.hpp"
#include "config/fwd.hpp"
#include "trace/trace.hpp"

namespace rekindle::trace {

using std::chrono::nanoseconds;

/// The durations, sizes, bandwidths and intervals the simulator models. Every field is a key of
/// the model file (`--job FILE.toml`) and of `--set KEY=VALUE`; docs/TRACES.md ("Model") lists
/// them with their defaults and says where each default comes from. They are meant to be
/// calibrated against measurements of a live cluster.
struct model {
  // ---- training
  /// One optimizer step of the initial world at full speed. Default: 5s.
  nanoseconds step_time = std::chrono::seconds{5};
  /// The part of a step that is compute (forward and backward passes), which a `slow` fault
  /// stretches; the rest (collectives, optimizer) it does not. Default: 1 (a step is all compute).
  double compute_share = 1.0;
  /// Bytes of state (parameters, optimizer shard, data cursor) per rank. Default: 8GiB.
  std::uint64_t state_size = std::uint64_t{8} << 30;
  /// Steps of the job; 0 trains until the end of the trace. Default: 0.
  std::uint64_t steps = 0;

  // ---- in-place policy: memory snapshots, asynchronous persists
  /// Steps between in-memory snapshots. Default: 10 (config: checkpoint.snapshot_every).
  std::uint64_t snapshot_every = 10;
  /// Training stall of one snapshot (the copy into the shared-memory slot). Default: 400ms.
  nanoseconds snapshot_stall = std::chrono::milliseconds{400};
  /// Snapshots between persisted checkpoints; 0 never persists. Default: 10 (config:
  /// checkpoint.persist_every).
  std::uint64_t persist_every = 10;
  /// Training stall of a persist, which writes off the training path. Default: 0s.
  nanoseconds persist_stall{0};

  // ---- restart-everything policy: synchronous disk checkpoints
  /// Steps between checkpoints. Default: 100 (the in-place policy's persist interval).
  std::uint64_t checkpoint_every = 100;

  // ---- restart-everything policy: its own detection and restart (docs/TRACES.md, "Policies")
  /// From a process's exit to the restart of every process: the launcher's poll of its workers
  /// (torchrun's --monitor_interval). Default: 5s.
  nanoseconds restart_all_exit_detection = std::chrono::seconds{5};
  /// From a hang, or a node's loss, to the restart: the survivors' collective times out (the
  /// NCCL watchdog of PyTorch's process group). Default: 10min.
  nanoseconds restart_all_hang_detection = std::chrono::minutes{10};
  /// A new process until it joins: interpreter and framework imports, device context, model
  /// build, with every process of the job starting at once. Default: 60s.
  nanoseconds restart_all_process_start = std::chrono::seconds{60};
  /// Communicator initialisation of a fresh job: a fixed part plus a part per rank (a rendezvous
  /// store every rank contacts, then the communicator's bootstrap). Defaults: 10s and 5ms.
  nanoseconds restart_all_rendezvous = std::chrono::seconds{10};
  nanoseconds restart_all_rendezvous_per_rank = std::chrono::milliseconds{5};

  // ---- shared storage
  /// Read bandwidth of the shared checkpoint storage for the whole job, bytes per second: a
  /// restore from disk reads at most this over all ranks. Default: 2e12 (2 TB/s).
  double storage_bandwidth = 2e12;

  // ---- recovery
  /// From spawning a worker process to its registration (imports, device and communicator
  /// context). Default: 20s.
  nanoseconds process_start = std::chrono::seconds{20};
  /// From the last registration to the collectives being ready. Default: 10s.
  nanoseconds rendezvous = std::chrono::seconds{10};
  /// Restore bandwidths per rank, bytes per second: own node's shared memory, a buddy node's
  /// memory over the network, a checkpoint on disk. Defaults: 20GiB/s, 10GiB/s, 1GiB/s.
  double memory_bandwidth = double(std::uint64_t{20} << 30);
  double buddy_bandwidth = double(std::uint64_t{10} << 30);
  double disk_bandwidth = double(std::uint64_t{1} << 30);
  /// Checkpoint write bandwidth per rank, bytes per second. Default: 512MiB/s.
  double persist_bandwidth = double(std::uint64_t{512} << 20);

  // ---- detection (config: timeouts.*, recovery.*)
  /// Default: 1s.
  nanoseconds node_timeout = std::chrono::seconds{1};
  /// Default: 10s.
  nanoseconds hang_timeout = std::chrono::seconds{10};
  /// Default: 30s.
  nanoseconds rendezvous_timeout = std::chrono::seconds{30};
  /// Deadline of one collective call. Default: 10s.
  nanoseconds collective_timeout = std::chrono::seconds{10};
  /// Interval of the supervisor's timer (config: timeouts.heartbeat). Default: 250ms, the
  /// config's default (a quarter of the node timeout).
  nanoseconds tick = std::chrono::milliseconds{250};
  /// Default: 100ms.
  nanoseconds backoff = std::chrono::milliseconds{100};
  /// Default: 5s.
  nanoseconds backoff_max = std::chrono::seconds{5};
  /// Restart limits of the policy; 0 is no limit. Default: 0 (a live job's limits would end a
  /// months-long replay; set them to see where they would).
  std::uint32_t max_restarts = 0;
  std::uint32_t max_restarts_per_rank = 0;

  // ---- cluster
  /// Spare nodes added to the cluster, as wide as its widest node. Default: 0.
  std::uint32_t spares = 0;
  /// 1: a node's buddy is chosen in another failure domain, as in a live job; 0: the next node,
  /// whatever its domain (to see what the rule is worth). Default: 1.
  std::uint32_t buddy_across_domains = 1;
  /// When repaired nodes return and the world has fallen below this share of its initial size,
  /// scale it back with every node that is up (the policy's scale command, as an operator
  /// would): 1 regrows at every return, 0 never. Default: 0.99 (nodes rejoin in batches of
  /// about 1% of the world, each batch costing one restart).
  double regrow_below = 0.99;
  /// How long to simulate; 0 takes the trace's duration. Default: 0.
  nanoseconds horizon{0};
};

/// Every key of the model, in documentation order.
std::vector<std::string> model_keys();
/// Whether `key` is a model key (every one takes a number, so a sweep can vary it).
[[nodiscard]] bool sweepable(std::string_view key);

/// Sets `key` from text: a duration ("5s", "400ms"; a bare number is seconds), a size ("8GiB"),
/// a bandwidth ("10GiB/s", or a number of bytes per second), a count, or a share between 0 and
/// 1. The error names the key and suggests the closest one.
[[nodiscard]] status set_model(model& m, std::string_view key, std::string_view value);
/// The value of `key` as text that set_model reads back.
std::string model_value(const model& m, std::string_view key);
/// Checks the relations between fields (e.g. the hang timeout exceeds the step time).
[[nodiscard]] status validate(const model& m);

/// Takes what a cluster configuration says about the model: snapshot and persist intervals,
/// timeouts and back-off. Restart limits and job steps are not taken (see `model`).
void apply_config(model& m, const config::spec& s);

/// Reads a model file: top-level `key = value` pairs with the keys of `model_keys()`. Every
/// problem is a diagnostic with file:line:column and the key.
expected<model> load_model(const std::filesystem::path& path, model base);
/// load_model of text, for tests.
expected<model> parse_model(std::string_view text, const std::string& source_name, model base);

/// The model as a model file (every key with its value).
std::string to_toml(const model& m);

}  // namespace rekindle::trace
