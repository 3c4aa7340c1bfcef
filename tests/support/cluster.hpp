#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle::testing {

/// The cluster a test runs: its configuration file's knobs.
struct cluster_options {
  int nodes = 2;
  int ranks_per_node = 2;
  /// Adds a spare node "s0" after the worker nodes.
  bool spare = false;
  std::uint64_t steps = 200;
  std::uint64_t snapshot_every = 5;
  /// checkpoint.persist_every (0: no checkpoints on disk).
  std::uint64_t persist_every = 10;
  std::uint32_t keep = 3;
  /// checkpoint.directory; empty: the default, <data_dir>/checkpoints.
  std::string checkpoint_dir;
  /// checkpoint.overlap.
  bool overlap = true;
  /// More keys of [cluster] (e.g. "standby = \"n1\"\n").
  std::string cluster_extra;
  /// Extra TOML appended to the file (e.g. "[recovery]\nmax_restarts_per_rank = 1\n").
  std::string extra;
  /// Keys of [checks]. The daemons of one machine write to one disk at the same moment in their
  /// pre-flight checks, so whoever writes first gets the bandwidth and the others' disk figures
  /// measure only that: a node would be quarantined for a slow disk by chance (a loaded machine
  /// saw 0.20x of the median). The disk is not judged here; compute and memory are.
  std::string checks = "min_disk = 0\n";
  std::uint32_t global_batch = 8;
  std::uint32_t micro_batch = 2;
  /// More keys of [job] (e.g. "command = [\"/bin/true\"]\n").
  std::string job_extra;
  /// job.balance; empty: not written (the default).
  std::string balance;
  /// model.width (the embedded tiny model: 32).
  std::uint32_t width = 32;
  /// timeouts.rendezvous.
  std::string rendezvous = "60s";
  /// timeouts.node: also how long a stopped worker goes unnoticed by its agent.
  std::string node_timeout = "3s";
  /// nodes' `speed`, by node name (others: not written).
  std::map<std::string, double> speeds;
  /// nodes' failure `domain`, by node name (others: not written).
  std::map<std::string, std::string> domains;
  /// Multi-host runs (tests/support/netns.hpp): each node's address, and the command prefix that
  /// runs a program on its host (e.g. {"ip", "netns", "exec", "rk5h0"}). Unset: 127.0.0.1, directly.
  std::function<std::string(const std::string&)> host;
  std::function<std::vector<std::string>(const std::string&)> wrap;
  /// Each node's `bind` (empty: not written).
  std::function<std::string(const std::string&)> bind;
  /// Every node's port (0: any free port, which only works on one host).
  std::uint16_t port = 0;
  /// Each daemon gets a data directory of its own (--data-dir), as on hosts that share no file
  /// system: status() and report() read the supervisor's (n0's).
  bool own_data_dirs = false;
  /// transport.net_devices and transport.tls.
  std::string net_devices = "lo";
  std::string tls;
};

/// A rekindle cluster on loopback: one rekindled per node in a temporary data directory, the
/// embedded tiny model, ports 0. Every process it starts is killed when it goes away, even when
/// the test fails (workers die with their daemons).
class local_cluster {
 public:
  explicit local_cluster(cluster_options options = {});
  ~local_cluster();

  [[nodiscard]] const std::filesystem::path& config() const noexcept { return config_; }
  [[nodiscard]] const std::filesystem::path& data_dir() const noexcept { return data_; }
  [[nodiscard]] std::vector<std::string> node_names() const;
  /// The folder of `node`'s daemon: <its data dir>/<node>.
  [[nodiscard]] std::filesystem::path node_dir(const std::string& node) const;

  /// Starts the daemon of `node` (with --exit-when-done).
  void start(const std::string& node);
  void start_all();
  /// Sends `sig` to the daemon of `node` (its workers die with it).
  void signal_node(const std::string& node, int sig);
  /// Waits for the daemon of `node` to exit; its exit status (128 + the signal when a signal
  /// ended it), or nullopt on timeout.
  std::optional<int> wait_node(const std::string& node, std::chrono::milliseconds timeout);

  /// The supervisor's status.json, or null before it exists.
  [[nodiscard]] nlohmann::json status() const;
  /// report.json once the job ended, else null.
  [[nodiscard]] nlohmann::json report() const;
  /// Polls status.json until `pred` holds.
  bool wait_for(const std::function<bool(const nlohmann::json&)>& pred, std::chrono::milliseconds timeout) const;
  /// Until every rank reported at least `step` in `epoch` or later.
  bool wait_step(std::uint64_t step, std::chrono::milliseconds timeout) const;
  /// Until report.json exists; returns it.
  nlohmann::json wait_done(std::chrono::milliseconds timeout) const;
  /// The pid of `rank`'s worker process, from status.json.
  [[nodiscard]] int rank_pid(int rank) const;
  /// Runs `rekindle ARGS... --config FILE` and returns what it did.
  process_result admin(std::vector<std::string> args) const;
  /// The log of `node`'s daemon.
  [[nodiscard]] std::string log(const std::string& node) const;

 private:
  cluster_options options_;
  temp_dir dir_{"rekindle-cluster"};
  std::filesystem::path config_;
  std::filesystem::path data_;
  std::map<std::string, std::unique_ptr<child_process>> daemons_;
};

/// cluster_options::extra for a cluster with authentication: the admin token in "admin.token" and
/// a read-only one in "ro.token", beside the configuration (write_token_files writes them).
inline constexpr const char* token_files_toml =
    "\n[security]\ntoken_file = \"admin.token\"\nreadonly_token_file = \"ro.token\"\n";
/// Writes the two token files of token_files_toml, readable by their owner only.
void write_token_files(const local_cluster& c, const std::string& admin, const std::string& readonly);

/// The loss the job ended with: report["losses"] at its last step.
double final_loss(const nlohmann::json& report);

}  // namespace rekindle::testing
