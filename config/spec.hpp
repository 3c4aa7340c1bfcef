#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/ids.hpp"
#include "common/logging.hpp"

namespace rekindle::config {

using std::chrono::nanoseconds;

/// Where a rank computes. `cpu` always works; `cuda` needs a GPU at run time.
struct device_spec {
  enum class kind { auto_select, cpu, cuda };
  kind type = kind::auto_select;
  /// CUDA device ordinal; -1 = the node-local rank index.
  int index = -1;
  /// "auto", "cpu", "cuda" or "cuda:N".
  [[nodiscard]] std::string to_string() const;

  bool operator==(const device_spec&) const = default;
};

/// One machine that runs a `rekindled` daemon.
struct node_spec {
  /// Unique name, e.g. "n0". Required.
  std::string name;
  /// Address peers connect to (the one this node advertises). Default: "127.0.0.1".
  std::string host = "127.0.0.1";
  /// Address the daemon listens on, when not `host`: "0.0.0.0" for every address of the machine,
  /// or one interface's address behind NAT or in a container. Default: "" (`host`).
  std::string bind;
  /// Listening port. Default: 0 (any free port; the daemon prints the one it got).
  std::uint16_t port = 0;
  /// Devices of the ranks on this node, one rank each. Default: `cluster.ranks_per_node` ranks on
  /// "auto" devices (the GPU of the local rank index when there is one, else the CPU).
  std::vector<device_spec> devices;
  /// A spare runs no ranks until a failure moves ranks onto it. Default: false.
  bool spare = false;
  /// Relative speed of this node's ranks for data-parallel shares (1 = nominal). Default: 1.
  double speed = 1.0;
  /// The failure domain it shares with its neighbours (a rack, a switch, a power feed), e.g.
  /// "rack3": a node's buddy, which keeps its snapshot replicas, is chosen in another domain when
  /// one is usable, so one switch or power failure does not take both copies. Default: "" (no
  /// domain: every node its own).
  std::string domain;

  bool operator==(const node_spec&) const = default;
};

struct cluster_spec {
  /// Name shown by the shell and in events. Default: "rekindle".
  std::string name = "rekindle";
  /// The node whose daemon hosts the supervisor. Default: the first node.
  std::string supervisor;
  /// Ranks on a node that lists no devices. Default: 1.
  std::uint32_t ranks_per_node = 1;
  /// A node whose daemon keeps a replica of the supervisor's state and takes over when the
  /// supervisor's daemon is lost; needs `etcd`. Default: none (docs/RELIABILITY.md).
  std::string standby;
  /// host:port of the etcd that holds the supervisor's lease. Default: none.
  std::string etcd;
  /// How long the supervisor's lease lasts unrenewed: the longest a lost supervisor goes unnoticed,
  /// and how soon one cut off from etcd stops acting. Whole seconds, 2 s to 60 s. Default: 3 s.
  std::chrono::nanoseconds lease = std::chrono::seconds{3};

  bool operator==(const cluster_spec&) const = default;
};

/// Where a rank sits in pipelines of `stages` stages: a replica's stages are consecutive ranks, so
/// rank r runs stage r mod stages of replica r / stages (stages = 1: every rank a replica). The
/// one rule the training task, the supervisor and the policy share.
struct pipeline_position {
  std::uint32_t replica = 0;
  std::uint32_t stage = 0;
};
[[nodiscard]] constexpr pipeline_position position_in_pipeline(std::uint32_t rank, std::uint32_t stages) noexcept {
  return stages <= 1 ? pipeline_position{rank, 0} : pipeline_position{rank / stages, rank % stages};
}

/// One rank of a job.plan: the node it runs on and its device there (its local index).
struct planned_rank {
  node_id node;
  std::uint32_t local_index = 0;

  bool operator==(const planned_rank&) const = default;
};

struct job_spec {
  /// Job name. Default: "train".
  std::string name = "train";
  /// Optimizer steps to train. Default: 300.
  std::uint64_t steps = 300;
  /// Sequences per optimizer step, summed over all ranks; kept when the world changes. Default: 16.
  std::uint32_t global_batch = 16;
  /// Sequences per micro-batch; must divide global_batch. Default: 4.
  std::uint32_t micro_batch = 4;
  /// Seed of parameter initialisation and the data sampler. Default: 1.
  std::uint64_t seed = 1;
  /// "synthetic" (the built-in corpus) or a text file. Default: "synthetic".
  std::string data = "synthetic";
  /// Absolute path of the text file when `data` is not "synthetic".
  std::optional<std::filesystem::path> data_file;
  /// How a step's micro-batches are shared among the ranks: "equal" (the equal split; an
  /// operator's `rebalance` changes it until the world changes), "speeds" (in proportion to the
  /// nodes' configured `speed`, planned again for every new placement: reproducible), or
  /// "measured" (from the ranks' measured compute speeds, planned again at every epoch start).
  /// Default: "equal".
  std::string balance = "equal";
  /// A training program of the user's to run as every rank instead of the built-in transformer
  /// (argv; the program is looked up on PATH unless it holds a '/'). Each rank gets the torchrun
  /// environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...)
  /// and rekindle's (REKINDLE_*). A program that never joins through the worker API ("level 0")
  /// is started again, with every other rank's, in each new epoch; one that joined ("level 1")
  /// keeps its process and is told the new epoch. The job completes when every rank's process
  /// exits with status 0. Default: none.
  std::vector<std::string> command;
  /// Where `command` runs. Default: the configuration file's directory.
  std::filesystem::path workdir;
  /// Extra environment of `command`, as NAME=value entries.
  std::vector<std::pair<std::string, std::string>> env;
  /// The first MASTER_PORT of `command`'s rendezvous; epoch e uses master_port + e % 64, so a
  /// restarted job never meets the previous epoch's port in TIME_WAIT. Default: 29500.
  std::uint16_t master_port = 29500;
  static constexpr std::uint16_t master_port_span = 64;
  /// The largest snapshot one rank of `command` takes through the worker API (api/rekindle.h):
  /// each local rank's shared-memory slot holds two of this size. Default: 256 MiB.
  std::uint64_t state_bytes = 256ull << 20;
  /// Pipeline stages of the built-in model: the blocks of each stage, in order, adding up to
  /// model.layers. With p stages each data-parallel replica is p consecutive ranks (rank r runs
  /// stage r mod p) and the world must be a multiple of p. Default: empty, no pipeline.
  std::vector<std::uint32_t> stages;
  /// A plan of `rekindle plan` for the built-in model (its `--json` document, whose first plan is
  /// taken, or one plan written by hand: docs/PLANNER.md). It sets `stages` and `micro_batch`, which
  /// node and device runs each stage of each replica, and, when it gives them, each replica's
  /// micro-batches. Default: none.
  std::filesystem::path plan;
  /// The planner's cluster and model files (docs/PLANNER.md) that `plan` was made for: with them a
  /// node lost with no free node to take its ranks is re-planned (planner::replan) and the job goes
  /// on with the new plan. Both or neither; only with `plan`. Default: none.
  std::filesystem::path plan_cluster;
  std::filesystem::path plan_model;
  /// How long a re-plan may look for layouts near the repaired plan before the job goes on in the
  /// best found (the full re-search runs beside the job afterwards); 0: the repaired plan.
  /// Default: 50ms.
  nanoseconds replan_budget = std::chrono::milliseconds{50};
  /// From `plan`: rank r (stage r mod p of replica r / p) runs on plan_ranks[r]. Empty without one.
  std::vector<planned_rank> plan_ranks;
  /// From `plan`: each replica's micro-batches per step, while the world is the plan's; empty
  /// when the plan leaves them to `balance`.
  std::vector<std::uint32_t> plan_shares;
  /// Pipeline stages in force: stages.size(), or 1 without a pipeline.
  [[nodiscard]] std::uint32_t pipeline_stages() const noexcept {
    return stages.empty() ? 1 : static_cast<std::uint32_t>(stages.size());
  }

  /// Whether the ranks run the user's `command` (level 0) rather than the built-in worker.
  [[nodiscard]] bool external() const noexcept { return !command.empty(); }

  bool operator==(const job_spec&) const = default;
};

struct model_spec {
  /// Transformer blocks. Default: 4.
  std::uint32_t layers = 4;
  /// Attention heads per block; must divide width. Default: 4.
  std::uint32_t heads = 4;
  /// Embedding width. Default: 128.
  std::uint32_t width = 128;
  /// Tokens per sequence (context length). Default: 64.
  std::uint32_t seq_len = 64;

  bool operator==(const model_spec&) const = default;
};

struct optimizer_spec {
  /// Peak learning rate (AdamW). Default: 0.003.
  double learning_rate = 3e-3;
  /// Learning rate at the end of the cosine decay. Default: 0.0003.
  double min_learning_rate = 3e-4;
  /// Steps of linear warm-up. Default: 20.
  std::uint64_t warmup_steps = 20;
  /// Decoupled weight decay. Default: 0.1.
  double weight_decay = 0.1;
  /// Default: 0.9.
  double beta1 = 0.9;
  /// Default: 0.95.
  double beta2 = 0.95;
  /// Default: 1e-8.
  double epsilon = 1e-8;
  /// Clip gradients to this global L2 norm; 0 disables clipping. Default: 1.0.
  double grad_clip = 1.0;

  bool operator==(const optimizer_spec&) const = default;
};

struct checkpoint_spec {
  /// Steps between in-memory snapshots. Default: 5.
  std::uint64_t snapshot_every = 5;
  /// Snapshots between persisted checkpoints; 0 never persists. Default: 10.
  std::uint64_t persist_every = 10;
  /// Committed checkpoints kept on disk. Default: 3.
  std::uint32_t keep = 3;
  /// Checkpoint directory. Default: "<daemon.data_dir>/checkpoints".
  std::filesystem::path directory;
  /// The built-in worker writes each snapshot while the next step's forward and backward passes
  /// run (they only read what it copies), and the optimizer waits for it; false: the step stops
  /// while the snapshot is copied. Default: true.
  bool overlap = true;

  bool operator==(const checkpoint_spec&) const = default;
};

struct timeouts_spec {
  /// Interval of the node daemons' heartbeats to the supervisor (and of the supervisor's and
  /// agents' timers). Default: heartbeat_for(node, hang), 250ms with their defaults.
  nanoseconds heartbeat = std::chrono::milliseconds{250};
  /// A node is lost after this long without heartbeats. Default: 1s.
  nanoseconds node = std::chrono::seconds{1};
  /// A rank without progress for this long is hung. Default: 10s.
  nanoseconds hang = std::chrono::seconds{10};
  /// Longest wait for all ranks to register in a new epoch. Default: 30s.
  nanoseconds rendezvous = std::chrono::seconds{30};
  /// Deadline of one collective call. Default: 10s.
  nanoseconds collective = std::chrono::seconds{10};

  /// How often a process says it is alive where nothing else says so: a worker's heartbeat to its
  /// node's daemon, and the transport's keep-alive to a peer that was sent nothing for this long.
  /// A quarter of `node` (a peer is lost after four missed ones), never more often than
  /// `heartbeat`: what detection needs, not more (each is a wake-up of two processes).
  [[nodiscard]] nanoseconds keepalive() const noexcept { return std::max(heartbeat, node / 4); }

  /// The heartbeat a configuration gets when it sets none: a quarter of the shorter of `node` and
  /// `hang` (a node is lost after four silent intervals, and a hang is checked four times in its
  /// timeout), within [1ms, 1min]. Detection needs no more, and each heartbeat wakes the daemons.
  [[nodiscard]] static nanoseconds heartbeat_for(nanoseconds node, nanoseconds hang) noexcept {
    using namespace std::chrono_literals;
    return std::clamp<nanoseconds>(std::min(node, hang) / 4, 1ms, 1min);
  }

  bool operator==(const timeouts_spec&) const = default;
};

struct recovery_spec {
  /// Restarts of one rank before the job stops. Default: 5.
  std::uint32_t max_restarts_per_rank = 5;
  /// Restarts of all ranks together before the job stops. Default: 50.
  std::uint32_t max_restarts = 50;
  /// Delay before restarting a rank that failed before; doubles each time. Default: 100ms.
  nanoseconds backoff = std::chrono::milliseconds{100};
  /// Longest restart delay. Default: 5s.
  nanoseconds backoff_max = std::chrono::seconds{5};
  /// "in-place": a failure restarts only the failed ranks' processes, and the job restores the
  /// newest snapshot in memory (or on disk, when newer). "restart-all": every new epoch starts
  /// every rank's process again and restores the newest checkpoint on disk, as a job launcher
  /// that restarts the whole job does (the baseline the in-place policy is measured against; the
  /// simulator's `--policy restart-all`). Default: "in-place".
  std::string policy = "in-place";
  [[nodiscard]] bool restart_all() const noexcept { return policy == "restart-all"; }

  bool operator==(const recovery_spec&) const = default;
};

/// The pre-flight node check (docs/RUNTIME.md, "Pre-flight node check").
struct checks_spec {
  /// Every daemon measures its node when it starts (compute, memory, disk, GPUs) and the supervisor
  /// places no node, and uses none as a spare, before it passed. Default: true.
  bool preflight = true;
  /// The least fraction of the fleet's median GEMM rate a node may reach. Default: 0.5.
  double min_compute = 0.5;
  /// The least fraction of the fleet's median memory bandwidth. Default: 0.4.
  double min_memory = 0.4;
  /// The least fraction of the fleet's median disk write + fsync rate. Default: 0.2.
  double min_disk = 0.2;
  /// Bytes written and fsynced to the checkpoint directory by the disk check. Default: 16 MiB.
  std::uint64_t disk_bytes = 16ull << 20;
  /// On GPU nodes: the least fraction of the fleet's median cuBLAS GEMM rate, and of `gpu_gflops`
  /// when that is set, the slowest GPU of a node may reach. Default: 0.8.
  double min_gpu = 0.8;
  /// The GEMM rate (GFLOP/s, FP32, 4096 a side) a GPU of the fleet is expected to reach; 0: judged
  /// against the fleet's median only. Default: 0.
  double gpu_gflops = 0;
  /// The link check: a probe slower than this fraction of the check's fastest probe is slow.
  /// Default: 0.1.
  double min_link = 0.1;
  /// Bytes of each link probe (the fastest of 3 counts). Default: 4 MiB.
  std::uint64_t link_bytes = 4ull << 20;
  /// While the job runs, the whole check (nodes, then links) runs again this often; 0: only when
  /// the nodes start and when `rekindle check` asks. Default: 0.
  nanoseconds every{0};

  bool operator==(const checks_spec&) const = default;
};

/// What the supervisor does about a straggler (docs/RUNTIME.md, "Stragglers").
struct stragglers_spec {
  /// "report" (an event only), "rebalance" (new micro-batch shares from the measured speeds,
  /// through a new epoch) or "replace" (its node is quarantined and its ranks move to a free spare;
  /// without one, reported only). Default: "report".
  std::string action = "report";
  /// A rank whose median compute per micro-batch is at least this many times the fleet's is a
  /// straggler. Default: 1.25.
  double threshold = 1.25;
  /// Steps in each rank's window (its median is over these). Default: 20.
  std::uint32_t window = 20;
  /// The window spans at least this much time as well (more steps when they are short), so that
  /// the machine's noise (another process on the cores for a few hundred ms) is a minority of
  /// every window. Default: 2s.
  nanoseconds span = std::chrono::seconds{2};
  /// A rank is a straggler once its ratio has stayed at or above the threshold this long: noise
  /// comes and goes, a slow device stays slow. Default: 5s.
  nanoseconds confirm = std::chrono::seconds{5};

  bool operator==(const stragglers_spec&) const = default;
};

struct security_spec {
  /// File holding the cluster (admin) token; empty disables authentication. Default: "".
  std::filesystem::path token_file;
  /// File holding a read-only token for the admin shell. Default: "" (none).
  std::filesystem::path readonly_token_file;
  /// Contents of token_file (never printed).
  std::string token;
  /// Contents of readonly_token_file (never printed).
  std::string readonly_token;

  bool operator==(const security_spec&) const = default;
};

struct transport_spec {
  /// Frames larger than this are dropped. Default: 16MiB.
  std::uint64_t max_frame_size = 16ull << 20;
  /// Chunk size of the pipelined ring collectives. Default: 512KiB (docs/PERFORMANCE.md,
  /// "Transport": against 1 MiB, 1.3-2x the bus bandwidth from 4 MiB up on one host).
  std::uint64_t chunk_size = 512ull << 10;
  /// UCX_NET_DEVICES for the daemons and workers; empty keeps UCX's choice. Default: "".
  std::string net_devices;
  /// UCX_TLS; empty keeps UCX's choice. Default: "".
  std::string tls;
  /// How long the daemons' and workers' control-plane loop keeps polling after a message before it
  /// blocks in the kernel. Polling saves tens of microseconds a message and costs a core's time
  /// that the training processes share. Default: 0 (block at once).
  std::chrono::nanoseconds spin{0};

  bool operator==(const transport_spec&) const = default;
};

struct daemon_spec {
  /// Root of daemon state: RocksDB, logs, checkpoints. Default: "rekindle-data" beside the config file.
  std::filesystem::path data_dir;
  /// Threads of the actor scheduler (CAF scheduler.max-threads). Default: 2.
  std::uint32_t actor_threads = 2;
  /// Log level: trace, debug, info, warn, error, off. Default: info.
  log_level log = log_level::info;
  /// Log lines as text for people, or as JSON objects one per line for log shippers. Default: text.
  rekindle::log_format log_format = rekindle::log_format::text;
  /// Serve /metrics (and, on the supervisor's daemon, the status page) over HTTP. Default: true.
  bool http = true;
  /// Address the HTTP server binds. Default: "" (the node's host).
  std::string http_host;
  /// Its port. Default: 0 (any free port; the daemon writes it to <data_dir>/<node>/http.addr).
  std::uint16_t http_port = 0;

  bool operator==(const daemon_spec&) const = default;
};

/// Where one rank runs in the initial placement.
struct rank_placement {
  rank_id rank;
  node_id node;
  std::uint32_t local_index = 0;
  device_spec device;

  bool operator==(const rank_placement&) const = default;
};

/// A validated description of a cluster and the job it runs. Paths are absolute.
struct spec {
  /// The file it was read from, or a name such as "<embedded local.toml>".
  std::string source;
  cluster_spec cluster;
  std::vector<node_spec> nodes;
  job_spec job;
  model_spec model;
  optimizer_spec optimizer;
  checkpoint_spec checkpoint;
  timeouts_spec timeouts;
  recovery_spec recovery;
  checks_spec checks;
  stragglers_spec stragglers;
  security_spec security;
  transport_spec transport;
  daemon_spec daemon;

  /// Index of the node named `name`.
  [[nodiscard]] std::optional<node_id> find_node(std::string_view name) const;
  /// The node hosting the supervisor.
  [[nodiscard]] node_id supervisor_node() const;
  /// Ranks on node `n` (0 for a spare).
  [[nodiscard]] std::uint32_t ranks_on(node_id n) const;
  /// Ranks of the initial world: job.plan's, else all ranks of the non-spare nodes.
  [[nodiscard]] std::uint32_t world_size() const;
  /// Where each rank of the initial world runs: as job.plan places it, else node order, then
  /// local index.
  [[nodiscard]] std::vector<rank_placement> initial_placement() const;

  bool operator==(const spec&) const = default;
};

/// The checkpoint directory: checkpoint.directory, or, when that is the default under
/// daemon.data_dir, the same under `data_dir` (a daemon's --data-dir moves it along).
inline std::filesystem::path checkpoint_dir_for(const spec& s, const std::filesystem::path& data_dir) {
  if (s.checkpoint.directory.empty() || s.checkpoint.directory == s.daemon.data_dir / "checkpoints")
    return data_dir / "checkpoints";
  return s.checkpoint.directory;
}

}  // namespace rekindle::config
