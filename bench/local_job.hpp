#pragma once

// Shared by the benchmarks that run the built-in model's job on this host: as plain processes
// (the bare loop, what the service is measured against) and under one rekindled.

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/admin_client.hpp"
#include "bench/model_choice.hpp"
#include "config/spec.hpp"

namespace rekindle::bench {

namespace fs = std::filesystem;
using json = nlohmann::json;

/// One node "n0" on loopback with every rank; each rank runs one micro-batch of one sequence a
/// step, a snapshot every `snapshot_every` steps and a checkpoint on disk every `persist_every`
/// snapshots (0: none). `job_keys`: more of [job] (a job.command).
std::string config_text(const model_choice& m, int world, std::uint64_t steps, std::uint64_t snapshot_every,
                        const fs::path& data, const std::string& job_keys = {}, std::uint64_t persist_every = 10,
                        const std::string& recovery_keys = {});

/// The benchmark's work directory: `given` (created), or a new temporary one named after
/// `bench`, which the caller removes when done. Empty when it cannot be made (the reason printed).
fs::path make_work_dir(const std::string& given, const std::string& bench);

double mean(const std::vector<double>& v);
std::int64_t now_ns();
/// Waits for a child to exit, at most `timeout`; its wait status, or nullopt.
std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds timeout);

/// What rank 0 of the bare loop measured: each step's period (from the end of the step before)
/// and its process's CPU time in it, in seconds.
struct bare_steps {
  std::vector<double> seconds;
  std::vector<double> cpu_seconds;
};

/// One rank of the bare loop: the training task over the ring communicator, nothing else. Rank 0
/// keeps its step count in DIR/step (8 bytes, mapped: watching it costs the loop nothing) and
/// writes its bare_steps to DIR/bare.json at the end. The gradients lie in the ring's shared
/// buffers, as the worker places them, unless `shared_buffers` is false (the ring then carries
/// them). The benchmark runs it as
/// `<benchmark> --bare-rank R --world W --config FILE --dir DIR [--private-buffers]`.
int run_bare_rank(const fs::path& config_path, int rank, int world, const fs::path& dir, bool shared_buffers = true);

/// The bare loop's ranks as processes of this program; `on_start` gets their pids once all run
/// (and returns when it is done watching them). Empty when a rank failed.
bare_steps run_bare(const fs::path& config_path, int world, const fs::path& dir,
                    const std::function<void(const std::vector<pid_t>&)>& on_start = {}, bool shared_buffers = true);

/// The step rank 0 of a bare loop running in `dir` has finished (0 before it starts).
class bare_step_watch {
 public:
  explicit bare_step_watch(fs::path dir) : dir_(std::move(dir)) {}
  ~bare_step_watch();
  bare_step_watch(const bare_step_watch&) = delete;
  bare_step_watch& operator=(const bare_step_watch&) = delete;
  [[nodiscard]] std::uint64_t step();

 private:
  fs::path dir_;
  std::uint64_t* mapped_ = nullptr;
};

/// A one-node rekindle cluster: the daemon (and with it its workers) dies with this object.
class cluster {
 public:
  cluster(const fs::path& dir, const std::string& config);
  cluster(const cluster&) = delete;
  cluster& operator=(const cluster&) = delete;
  ~cluster();
  /// The daemon's pid (-1 once it was reaped).
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  /// The supervisor's status through an admin request, or null while it cannot be had.
  json status(bool full = false);
  /// The step of status.json, which the supervisor writes once a tick: costs the service nothing.
  [[nodiscard]] std::uint64_t file_step() const;
  /// Polls the status until `pred` holds; the status then, or null after `timeout`.
  json wait(const std::function<bool(const json&)>& pred, std::chrono::seconds timeout);
  void stop();
  [[nodiscard]] const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  fs::path config_;
  config::spec spec_;
  pid_t pid_ = -1;
  std::unique_ptr<actors::admin_client> client_;
};

/// Whether a status says the job trains.
bool training(const json& s);

/// What `root` and every process below it used so far.
struct tree_usage {
  /// CPU seconds, user and system, of every thread (ended ones included).
  double cpu_seconds = 0;
  /// Voluntary context switches of the live threads: each time one blocked and was woken again
  /// (a message waited for, a sleep, a lock), so a count of the processes' wake-ups.
  long long wakeups = 0;
};
tree_usage usage_of_tree(pid_t root);

}  // namespace rekindle::bench
