// The seeded chaos campaign (scripts/chaos, docs/RELIABILITY.md): job after job on a real local
// cluster, each with faults drawn from the seed (kills of ranks, daemons and the supervisor, stops
// past the hang timeout, two faults at once, a fault during a recovery, a full disk, corrupted
// snapshots and checkpoint shards, partitions), and after each job the checks:
//   finished    the job completed every step;
//   loss        its final loss is bitwise the failure-free run's (the world keeps its size);
//   committed   no recovery restored a step older than one the status called committed before
//               the fault;
//   leftovers   no process and no /dev/shm slot of the cluster is left once its daemons exited;
//   fence       no process delivered a message of an older epoch than one it delivered before
//               (the bridges' fence counters, logged when each daemon ends);
//   checkpoints every checkpoint shard `rekindle checkpoint verify` finds damaged is one the
//               campaign damaged, and it found each of those.
//
// usage: rekindle-chaos --seed N [--duration 10m] [--steps 8000] [--report FILE.json]
//                       [--max-jobs N] [--keep-going]
// Exit status: 0 when every check of every job held, 1 when one failed, 2 for bad usage.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "storage/snapshot_slot.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/etcd.hpp"
#include "tests/support/faults.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/values.hpp"

namespace rekindle::chaos {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using json = nlohmann::json;
using steady = std::chrono::steady_clock;

std::atomic<bool> interrupted{false};

// ---- the faults ------------------------------------------------------------------------------

enum class fault : int {
  kill_rank,           // SIGKILL of one rank's worker
  kill_two_ranks,      // two ranks on different nodes at the same moment
  stop_rank,           // SIGSTOP of a rank's worker, left stopped past the hang timeout
  kill_rank_in_recovery,  // a rank killed, then another while the job recovers
  kill_node,           // SIGKILL of a worker node's daemon (its ranks die with it), started again later
  kill_node_and_rank,  // a worker node's daemon and a rank of another node at the same moment
  kill_supervisor,     // SIGKILL of the supervisor's daemon; started again (or the standby takes over)
  partition,           // `rekindle partition` between a worker node and the supervisor's, past the node timeout
  short_partition,     // the same, healed before the node timeout
  disk_full,           // the checkpoint file system filled for a while
  corrupt_slot,        // both halves of a rank's snapshot slot damaged, then the rank killed
  corrupt_shard,       // a byte of a committed checkpoint shard flipped
};
constexpr int fault_kinds = 12;

const char* name(fault f) {
  switch (f) {
    case fault::kill_rank: return "kill rank";
    case fault::kill_two_ranks: return "kill two ranks at once";
    case fault::stop_rank: return "stop rank past the hang timeout";
    case fault::kill_rank_in_recovery: return "kill a rank during a recovery";
    case fault::kill_node: return "kill a node's daemon";
    case fault::kill_node_and_rank: return "kill a node and a rank at once";
    case fault::kill_supervisor: return "kill the supervisor's daemon";
    case fault::partition: return "partition past the node timeout";
    case fault::short_partition: return "partition healed in time";
    case fault::disk_full: return "checkpoint disk full";
    case fault::corrupt_slot: return "corrupted snapshot slot";
    case fault::corrupt_shard: return "corrupted checkpoint shard";
  }
  return "?";
}

// How often each is drawn, relative to the others.
constexpr int weight[fault_kinds] = {14, 8, 4, 8, 5, 3, 7, 4, 5, 5, 6, 5};

// A fault that loses a node for good uses the spare: one per job, so the world keeps its size.
bool loses_a_node(fault f, bool standby) {
  return f == fault::kill_node || f == fault::kill_node_and_rank || f == fault::partition ||
         (f == fault::kill_supervisor && standby);
}

// ---- the cluster -----------------------------------------------------------------------------

std::int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = steady::now() + timeout;
  while (!interrupted.load()) {
    if (pred())
      return true;
    if (steady::now() > deadline)
      return false;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

struct rank_view {
  int rank = -1;
  std::string node;
  int pid = -1;
};

std::vector<rank_view> ranks_of(const json& status) {
  std::vector<rank_view> out;
  if (!status.is_object() || !status.contains("ranks") || !status["ranks"].is_array())
    return out;
  for (const auto& r : status["ranks"])
    out.push_back({r.value("rank", -1), r.value("node", std::string{}), r.value("pid", -1)});
  return out;
}

// ---- one job ---------------------------------------------------------------------------------

struct injected {
  fault kind;
  std::int64_t at_ns = 0;
  std::uint64_t committed_before = 0;
  std::string detail;
};

struct job_result {
  int index = 0;
  bool standby = false;
  std::vector<injected> faults;
  std::map<std::string, std::string> failed;  // check -> why
  std::vector<double> recovery_s;
  std::uint64_t steps_retrained = 0;
  std::uint64_t stale_dropped = 0;
  std::uint64_t stale_delivered = 0;
  std::uint32_t recoveries = 0;
  std::uint32_t skipped = 0;
  double seconds = 0;
  std::string logs_kept;
};

class job {
 public:
  job(int index, std::mt19937_64& rng, std::uint64_t steps, const std::optional<std::string>& etcd_endpoint)
      : rng_(rng), steps_(steps) {
    result_.index = index;
    result_.standby = etcd_endpoint.has_value() && pick(3) == 0;
    testing::cluster_options o{.spare = true, .steps = steps};
    o.extra = "[recovery]\nmax_restarts_per_rank = 1000\n";
    disk_ = std::make_unique<testing::small_disk>(scratch_.path() / "checkpoints", "64m");
    if (disk_->mounted())
      o.checkpoint_dir = disk_->path().string();
    if (result_.standby)
      o.cluster_extra = "standby = \"n1\"\netcd = \"" + *etcd_endpoint + "\"\nlease = \"2s\"\n";
    cluster_ = std::make_unique<testing::local_cluster>(o);
    checkpoint_dir_ = disk_->mounted() ? disk_->path() : cluster_->data_dir() / "checkpoints";
  }

  job_result run(double baseline_loss, int faults_to_draw) {
    const auto started = steady::now();
    cluster_->start_all();
    if (!wait_running(0, 120s)) {
      result_.failed["finished"] = "the job never started training";
      return finish(baseline_loss, started);
    }
    for (int i = 0; i < faults_to_draw && !interrupted.load(); ++i) {
      // Some training between faults: 20 to 400 steps past the newest rank step.
      const auto gap = 20 + pick(381);
      const auto now_step = newest_step();
      if (now_step + gap + 50 >= steps_)
        break;  // too near the end for the job to show what the fault did
      if (!wait_until([&] { return newest_step() >= now_step + gap || done(); }, 120s) || done())
        break;
      const auto f = draw();
      if (!inject(f))
        break;
    }
    return finish(baseline_loss, started);
  }

 private:
  std::uint64_t pick(std::uint64_t n) { return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng_); }
  std::chrono::milliseconds between(int lo_ms, int hi_ms) {
    return std::chrono::milliseconds{lo_ms + static_cast<int>(pick(static_cast<std::uint64_t>(hi_ms - lo_ms + 1)))};
  }

  fault draw() {
    for (;;) {
      int total = 0;
      for (int w : weight)
        total += w;
      auto x = static_cast<int>(pick(static_cast<std::uint64_t>(total)));
      int k = 0;
      while (x >= weight[k])
        x -= weight[k++];
      const auto f = static_cast<fault>(k);
      if (loses_a_node(f, result_.standby) && spare_used_)
        continue;
      // With a standby, both worker nodes run a supervisor: a worker node's fault waits for the
      // spare to hold ranks.
      const bool on_worker_node = f == fault::kill_node || f == fault::kill_node_and_rank || f == fault::partition ||
                                  f == fault::short_partition;
      if (on_worker_node && worker_node().empty())
        continue;
      if (f == fault::disk_full && !disk_->mounted())
        continue;
      if (f == fault::corrupt_shard && newest_manifest().empty())
        continue;
      return f;
    }
  }

  [[nodiscard]] json status() const { return cluster_->status(); }
  [[nodiscard]] bool done() const { return !cluster_->report().is_null(); }

  [[nodiscard]] std::uint64_t newest_step() const {
    std::uint64_t s = 0;
    const auto st = status();
    if (st.is_object() && st.contains("step") && st["step"].is_number_unsigned())
      s = st["step"].get<std::uint64_t>();
    return s;
  }

  // Until the status shows an epoch past `epoch` running with every rank past its first step.
  bool wait_running(std::uint64_t epoch, std::chrono::milliseconds timeout) {
    return wait_until(
        [&] {
          if (done())
            return true;
          const auto s = status();
          if (!s.is_object() || s.value("state", "") != "running" || s.value("epoch", std::uint64_t{0}) <= epoch)
            return false;
          const auto ranks = ranks_of(s);
          if (ranks.empty())
            return false;
          for (const auto& r : s["ranks"])
            if (r.value("state", "") != "training" && r.value("state", "") != "completed")
              return false;
          return true;
        },
        timeout);
  }

  // A rank's worker pid from the current status (-1 when it has none now).
  int pid_of(int rank) const {
    for (const auto& r : ranks_of(status()))
      if (r.rank == rank)
        return r.pid;
    return -1;
  }

  // A rank placed on `node` (or on any node when empty), or -1.
  int rank_on(const std::string& node, const std::string& not_node = {}) {
    std::vector<rank_view> c;
    for (const auto& r : ranks_of(status()))
      if ((node.empty() || r.node == node) && (not_node.empty() || r.node != not_node) && r.pid > 0)
        c.push_back(r);
    if (c.empty())
      return -1;
    return c[pick(c.size())].rank;
  }

  // The worker node (not the supervisor's or the standby's) whose ranks a node fault takes.
  std::string worker_node() {
    const auto ranks = ranks_of(status());
    std::set<std::string> nodes;
    for (const auto& r : ranks)
      if (r.node != "n0" && !(result_.standby && r.node == "n1"))
        nodes.insert(r.node);
    if (nodes.empty())
      return {};
    auto it = nodes.begin();
    std::advance(it, static_cast<long>(pick(nodes.size())));
    return *it;
  }

  // The node whose daemon leads now (the standby's after a takeover).
  std::string leader() const {
    return took_over_ ? "n1" : "n0";
  }

  bool kill_rank(int rank, int sig = SIGKILL) {
    const int pid = pid_of(rank);
    return pid > 0 && ::kill(pid, sig) == 0;
  }

  void restart_later(const std::string& node, std::chrono::milliseconds after) {
    (void)cluster_->wait_node(node, 30s);
    std::this_thread::sleep_for(after);
    cluster_->start(node);
  }

  // A fault the job's state did not allow (no rank with a process at that moment, a drill
  // refused): said, not counted, and the job goes on.
  bool skipped(fault f, const injected& in) {
    ++result_.skipped;
    std::cout << "    (not injected: " << name(f) << (in.detail.empty() ? "" : ": " + in.detail) << ")\n" << std::flush;
    return true;
  }

  // Whether the job can take more faults.
  bool inject(fault f) {
    const auto before = status();
    injected in{f, monotonic_ns(), before.value("committed_step", std::uint64_t{0}), {}};
    const auto epoch = before.value("epoch", std::uint64_t{0});
    bool recovers = true;
    switch (f) {
      case fault::kill_rank: {
        const int r = rank_on("");
        in.detail = "rank " + std::to_string(r);
        if (r < 0 || !kill_rank(r))
          return skipped(f, in);
        break;
      }
      case fault::kill_two_ranks: {
        const int a = rank_on("n0");
        const int b = rank_on("", "n0");
        in.detail = "ranks " + std::to_string(a) + " and " + std::to_string(b);
        if (a < 0 || b < 0 || !kill_rank(a) || !kill_rank(b))
          return skipped(f, in);
        break;
      }
      case fault::stop_rank: {
        const int r = rank_on("");
        in.detail = "rank " + std::to_string(r) + " (SIGSTOP)";
        if (r < 0 || !kill_rank(r, SIGSTOP))
          return skipped(f, in);
        break;
      }
      case fault::kill_rank_in_recovery: {
        const int a = rank_on("");
        if (a < 0 || !kill_rank(a))
          return skipped(f, in);
        // The second fault lands while the first one's recovery runs: once the new epoch is
        // announced, or a moment after the kill.
        (void)wait_until([&] { return status().value("epoch", std::uint64_t{0}) > epoch; }, between(0, 1500));
        const int b = rank_on("");
        in.detail = "rank " + std::to_string(a) + ", then rank " + std::to_string(b);
        if (b >= 0)
          (void)kill_rank(b);
        break;
      }
      case fault::kill_node: {
        const auto node = worker_node();
        in.detail = node;
        if (node.empty())
          return skipped(f, in);
        cluster_->signal_node(node, SIGKILL);
        spare_used_ = true;
        restart_later(node, between(200, 5000));
        break;
      }
      case fault::kill_node_and_rank: {
        const auto node = worker_node();
        const int r = rank_on("n0");
        in.detail = node + " and rank " + std::to_string(r);
        if (node.empty() || r < 0)
          return skipped(f, in);
        const int pid = pid_of(r);
        cluster_->signal_node(node, SIGKILL);
        if (pid > 0)
          ::kill(pid, SIGKILL);
        spare_used_ = true;
        restart_later(node, between(200, 5000));
        break;
      }
      case fault::kill_supervisor: {
        const auto node = leader();
        in.detail = node;
        cluster_->signal_node(node, SIGKILL);
        if (result_.standby) {
          spare_used_ = true;
          took_over_ = true;
          // The old leader's node comes back later, as a node without ranks.
          restart_later(node, between(3000, 6000));
        } else {
          restart_later(node, between(200, 1500));
        }
        break;
      }
      case fault::partition:
      case fault::short_partition: {
        const auto node = worker_node();
        if (node.empty())
          return skipped(f, in);
        const bool longer = f == fault::partition;
        const auto d = longer ? between(4000, 7000) : between(300, 1500);
        in.detail = node + " from " + leader() + " for " + std::to_string(d.count()) + " ms";
        const auto r = cluster_->admin({"partition", node, leader(), "--for", std::to_string(d.count()) + "ms", "--yes"});
        if (r.exit_code != 0) {
          in.detail += " (refused: " + r.err.substr(0, 200) + ")";
          return skipped(f, in);
        }
        if (longer)
          spare_used_ = true;
        recovers = longer;
        if (!longer)
          std::this_thread::sleep_for(d);
        break;
      }
      case fault::disk_full: {
        const auto d = between(1000, 3000);
        in.detail = std::to_string(d.count()) + " ms";
        disk_->fill();
        std::this_thread::sleep_for(d);
        disk_->free_up();
        recovers = false;
        break;
      }
      case fault::corrupt_slot: {
        const int r = rank_on("");
        const auto st = status();
        std::string node;
        std::vector<int> local;
        for (const auto& v : ranks_of(st))
          if (v.rank == r)
            node = v.node;
        for (const auto& v : ranks_of(st))
          if (v.node == node)
            local.push_back(v.rank);
        std::sort(local.begin(), local.end());
        const auto index = static_cast<std::uint32_t>(std::find(local.begin(), local.end(), r) - local.begin());
        in.detail = "rank " + std::to_string(r) + " on " + node;
        const int pid = pid_of(r);
        if (r < 0 || pid <= 0)
          return skipped(f, in);
        ::kill(pid, SIGSTOP);  // it writes nothing more into the slot
        (void)testing::corrupt_slot(storage::snapshot_slot::name_for(cluster_->data_dir() / node, "test", index));
        ::kill(pid, SIGKILL);
        break;
      }
      case fault::corrupt_shard: {
        const auto shard = corrupt_a_shard();
        if (shard.empty())
          return skipped(f, in);
        in.detail = shard.filename().string();
        recovers = false;
        // `checkpoint verify` must find it now (retention may remove it later).
        const auto v = testing::run_process(
            {(testing::bin_dir() / "rekindle").string(), "checkpoint", "verify", checkpoint_dir_.string()}, 60s);
        if (fs::exists(shard) && (v.exit_code != 1 || (v.out + v.err).find(shard.filename().string()) == std::string::npos))
          result_.failed["checkpoints"] = "verify did not find the shard damaged on purpose (" +
                                          shard.filename().string() + "), exit " + std::to_string(v.exit_code) + ": " +
                                          v.out.substr(0, 300) + v.err.substr(0, 300);
        damaged_.insert(shard.filename().string());
        break;
      }
    }
    result_.faults.push_back(in);
    std::cout << "    " << name(f) << (in.detail.empty() ? "" : ": " + in.detail) << "\n" << std::flush;
    if (recovers && !wait_running(epoch, 180s)) {
      result_.failed["finished"] = std::string{"no recovery after '"} + name(f) + "' within 180 s";
      return false;
    }
    return true;
  }

  [[nodiscard]] fs::path newest_manifest() const {
    fs::path newest;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(checkpoint_dir_, ec))
      if (e.path().string().ends_with(".manifest.json") && (newest.empty() || e.path().filename() > newest.filename()))
        newest = e.path();
    return newest;
  }

  // Flips one byte in the middle of a shard the newest committed manifest names.
  fs::path corrupt_a_shard() {
    const auto manifest = newest_manifest();
    if (manifest.empty())
      return {};
    json m;
    try {
      std::ifstream in(manifest);
      m = json::parse(in);
    } catch (...) {
      return {};
    }
    std::vector<fs::path> shards;
    for (const auto& s : m.value("shards", json::array()))
      if (s.is_object() && s.contains("file") && s["file"].is_string())
        shards.push_back(checkpoint_dir_ / s["file"].get<std::string>());
    if (shards.empty())
      return {};
    const auto shard = shards[pick(shards.size())];
    const int fd = ::open(shard.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0)
      return {};
    const off_t size = ::lseek(fd, 0, SEEK_END);
    const off_t at = size / 2;
    unsigned char b = 0;
    bool ok = size > 0 && ::pread(fd, &b, 1, at) == 1;
    b ^= 0x01;
    ok = ok && ::pwrite(fd, &b, 1, at) == 1;
    ::close(fd);
    return ok ? shard : fs::path{};
  }

  job_result finish(double baseline_loss, steady::time_point started) {
    const auto report = cluster_->wait_done(interrupted.load() ? 1ms : 600s);
    auto& failed = result_.failed;
    // finished
    if (report.is_null())
      failed.emplace("finished", "no report within 600 s; status: " + status().dump().substr(0, 400));
    else if (report.value("state", "") != "completed" || report.value("step", std::uint64_t{0}) != steps_)
      failed.emplace("finished", "ended " + report.value("state", std::string{"?"}) + " at step " +
                                     std::to_string(report.value("step", std::uint64_t{0})) + ": " +
                                     report.value("reason", std::string{}));
    // loss
    if (!report.is_null() && !failed.contains("finished")) {
      if (report.value("world", 0) != 4)
        failed.emplace("loss", "the world changed size to " + std::to_string(report.value("world", 0)));
      else if (testing::bits(testing::final_loss(report)) != testing::bits(baseline_loss))
        failed.emplace("loss", "final loss " + testing::bits(testing::final_loss(report)) + ", failure-free " +
                                   testing::bits(baseline_loss));
    }
    // committed, and the recoveries' figures
    if (!report.is_null()) {
      for (const auto& r : report.value("recoveries", json::array())) {
        ++result_.recoveries;
        const auto restored = r.value("restored_step", std::uint64_t{0});
        const auto detected = r.value("detected_at_ns", std::int64_t{0});
        if (r.value("done", false))
          result_.recovery_s.push_back(r.value("total_s", 0.0));
        result_.steps_retrained += r.value("steps_lost", std::uint64_t{0});
        for (const auto& f : result_.faults)
          if (detected > f.at_ns && restored < f.committed_before && !failed.contains("committed"))
            failed.emplace("committed", "a recovery (" + r.value("cause", std::string{}) + ", epoch " +
                                            std::to_string(r.value("epoch", 0)) + ") restored step " +
                                            std::to_string(restored) + " after step " +
                                            std::to_string(f.committed_before) + " was committed (before '" +
                                            name(f.kind) + "')");
      }
    }
    // Every daemon ends with the job; then nothing of the cluster may be left.
    for (const auto& n : cluster_->node_names()) {
      const auto code = cluster_->wait_node(n, 60s);
      if (!code)
        failed.emplace("leftovers", "the daemon of " + n + " did not exit when the job ended");
      else if (*code < 128)
        ended_.push_back(n);
    }
    if (!failed.contains("leftovers"))
      check_leftovers();
    check_fence();
    check_checkpoints();
    result_.seconds = std::chrono::duration<double>(steady::now() - started).count();
    return result_;
  }

  void check_leftovers() {
    const auto root = cluster_->config().parent_path().string();
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const auto pid = e.path().filename().string();
      if (pid.find_first_not_of("0123456789") != std::string::npos)
        continue;
      std::ifstream in(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      if (cmd.find(root) != std::string::npos && std::to_string(::getpid()) != pid) {
        result_.failed.emplace("leftovers", "process " + pid + " is left: " + cmd.substr(0, 200));
        return;
      }
    }
    for (const auto& n : cluster_->node_names()) {
      const auto prefix = storage::snapshot_slot::name_prefix(cluster_->data_dir() / n, "test");
      for (const auto& e : fs::directory_iterator("/dev/shm", ec))
        if (("/" + e.path().filename().string()).starts_with(prefix)) {
          result_.failed.emplace("leftovers", "snapshot slot " + e.path().string() + " is left");
          return;
        }
    }
  }

  // Every daemon that ended logged its bridge's fence counters.
  void check_fence() {
    static const std::regex line{R"(fence: (\d+) stale dropped, (\d+) stale delivered)"};
    for (const auto& n : cluster_->node_names()) {
      const auto log = cluster_->log(n);
      if (std::find(ended_.begin(), ended_.end(), n) != ended_.end() && !std::regex_search(log, line))
        result_.failed.emplace("fence", "the daemon of " + n + " ended without logging its fence counts");
      for (std::sregex_iterator it{log.begin(), log.end(), line}, end; it != end; ++it) {
        result_.stale_dropped += parse_whole_number((*it)[1].str()).value_or(0);
        result_.stale_delivered += parse_whole_number((*it)[2].str()).value_or(0);
      }
    }
    if (result_.stale_delivered > 0)
      result_.failed.emplace("fence", std::to_string(result_.stale_delivered) +
                                          " message(s) delivered with an older epoch than one delivered before");
  }

  void check_checkpoints() {
    std::error_code ec;
    if (!fs::exists(checkpoint_dir_, ec) || newest_manifest().empty())
      return;
    const auto v = testing::run_process(
        {(testing::bin_dir() / "rekindle").string(), "checkpoint", "verify", checkpoint_dir_.string(), "--json"}, 120s);
    if (v.exit_code == 0)
      return;
    // Each problem found must name a shard the campaign damaged.
    const auto text = v.out + v.err;
    bool ours = v.exit_code == 1 && !damaged_.empty();
    try {
      const auto j = json::parse(v.out);
      for (const auto& c : j.value("checkpoints", json::array()))
        for (const auto& p : c.value("problems", json::array())) {
          const auto problem = p.get<std::string>();
          ours = ours && std::any_of(damaged_.begin(), damaged_.end(),
                                     [&](const std::string& d) { return problem.find(d) != std::string::npos; });
        }
    } catch (const json::exception&) {
      ours = false;
    }
    if (!ours)
      result_.failed.emplace("checkpoints", "checkpoint verify exit " + std::to_string(v.exit_code) + ": " +
                                                text.substr(0, 600));
  }

  std::mt19937_64& rng_;
  std::uint64_t steps_;
  testing::temp_dir scratch_{"rekindle-chaos"};
  std::unique_ptr<testing::small_disk> disk_;
  std::unique_ptr<testing::local_cluster> cluster_;
  fs::path checkpoint_dir_;
  job_result result_;
  bool spare_used_ = false;
  bool took_over_ = false;
  std::set<std::string> damaged_;
  std::vector<std::string> ended_;  // nodes whose daemon exited by itself at the job's end

 public:
  // Keeps the cluster's logs of a failed job.
  void keep_logs(const fs::path& to) {
    fs::create_directories(to);
    for (const auto& n : cluster_->node_names())
      std::ofstream(to / (n + ".log")) << cluster_->log(n);
    std::ofstream(to / "status.json") << cluster_->status().dump(2);
    std::ofstream(to / "report.json") << cluster_->report().dump(2);
  }
};

double failure_free_loss(std::uint64_t steps) {
  testing::local_cluster c{{.spare = true, .steps = steps}};
  c.start_all();
  const auto report = c.wait_done(600s);
  if (report.is_null() || report.value("state", "") != "completed")
    return std::numeric_limits<double>::quiet_NaN();
  return testing::final_loss(report);
}

int usage(const std::string& why) {
  std::cerr << "rekindle-chaos: " << why << "\n"
            << "usage: rekindle-chaos --seed N [--duration 10m] [--steps 8000] [--report FILE.json] [--max-jobs N]\n";
  return 2;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

int main(int argc, char** argv) {
  std::optional<std::uint64_t> seed;
  std::chrono::nanoseconds duration = 10min;
  std::uint64_t steps = 8000;
  std::uint64_t max_jobs = 1'000'000;
  fs::path report_path;
  fs::path logs_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--seed") {
        auto n = parse_whole_number(value());
        if (!n)
          return usage("--seed: " + n.to_status().message());
        seed = *n;
      } else if (a == "--duration") {
        auto d = parse_duration(value());
        if (!d || *d <= std::chrono::nanoseconds{0} || *d > std::chrono::hours{24 * 7})
          return usage("--duration: a duration from 1s to 7 days, e.g. 10m");
        duration = *d;
      } else if (a == "--steps") {
        auto n = parse_whole_number(value(), 200, 1'000'000);
        if (!n)
          return usage("--steps: " + n.to_status().message());
        steps = *n;
      } else if (a == "--max-jobs") {
        auto n = parse_whole_number(value(), 1, 1'000'000);
        if (!n)
          return usage("--max-jobs: " + n.to_status().message());
        max_jobs = *n;
      } else if (a == "--report") {
        report_path = value();
      } else if (a == "--logs") {
        logs_dir = value();
      } else if (a == "--help" || a == "-h") {
        std::cout << "usage: rekindle-chaos --seed N [--duration 10m] [--steps 8000] [--report FILE.json] "
                     "[--logs DIR] [--max-jobs N]\n";
        return 0;
      } else {
        return usage("unknown option '" + a + "'");
      }
    } catch (const std::invalid_argument& e) {
      return usage(e.what());
    }
  }
  if (!seed)
    return usage("--seed is required");

  struct sigaction sa{};
  sa.sa_handler = [](int) { interrupted.store(true); };
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  std::cout << "chaos: seed " << *seed << ", " << format_duration(duration) << ", jobs of " << steps
            << " steps on 2 nodes of 2 ranks and a spare\n";
  const double baseline = failure_free_loss(steps);
  if (std::isnan(baseline)) {
    std::cerr << "chaos: the failure-free run did not complete\n";
    return 1;
  }
  std::cout << "chaos: failure-free final loss " << baseline << " (" << testing::bits(baseline) << ")\n";

  testing::temp_dir etcd_dir{"rekindle-chaos-etcd"};
  std::unique_ptr<testing::etcd_server> etcd;
  std::optional<std::string> endpoint;
  if (auto why = testing::etcd_server::missing()) {
    std::cout << "chaos: no standby jobs: " << *why << "\n";
  } else {
    etcd = std::make_unique<testing::etcd_server>(etcd_dir.path());
    if (etcd->ready())
      endpoint = etcd->endpoint();
    else
      std::cout << "chaos: no standby jobs: etcd did not start (" << etcd->log().string() << ")\n";
  }

  std::mt19937_64 rng{*seed};
  std::vector<job_result> results;
  const auto deadline = steady::now() + duration;
  while (!interrupted.load() && steady::now() < deadline && results.size() < max_jobs) {
    const int index = static_cast<int>(results.size()) + 1;
    const int faults = 5 + static_cast<int>(rng() % 6);
    job j{index, rng, steps, endpoint};
    std::cout << "job " << index << ":" << "\n" << std::flush;
    auto r = j.run(baseline, faults);
    std::cout << "  " << r.faults.size() << " fault(s)" << (r.skipped ? " (" + std::to_string(r.skipped) + " not injected)" : "")
              << ", " << r.recoveries << " recoveries, "
              << std::lround(r.seconds) << " s: " << (r.failed.empty() ? "ok" : "FAILED") << "\n";
    for (const auto& [check, why] : r.failed)
      std::cout << "  " << check << ": " << why << "\n";
    if (!r.failed.empty() && !logs_dir.empty()) {
      j.keep_logs(logs_dir / ("job-" + std::to_string(index)));
      r.logs_kept = (logs_dir / ("job-" + std::to_string(index))).string();
      std::cout << "  logs: " << r.logs_kept << "\n";
    }
    std::cout << std::flush;
    results.push_back(std::move(r));
  }

  // The summary.
  std::map<std::string, int> by_kind;
  std::map<std::string, int> failed_checks;
  std::vector<double> recovery_s;
  std::uint64_t faults = 0, retrained = 0, dropped = 0, delivered = 0, recoveries = 0, standby_jobs = 0;
  int failed_jobs = 0;
  for (const auto& r : results) {
    for (const auto& f : r.faults)
      ++by_kind[name(f.kind)];
    faults += r.faults.size();
    for (const auto& [c, _] : r.failed)
      ++failed_checks[c];
    failed_jobs += r.failed.empty() ? 0 : 1;
    recovery_s.insert(recovery_s.end(), r.recovery_s.begin(), r.recovery_s.end());
    retrained += r.steps_retrained;
    dropped += r.stale_dropped;
    delivered += r.stale_delivered;
    recoveries += r.recoveries;
    standby_jobs += r.standby ? 1 : 0;
  }
  std::cout << "\nchaos: seed " << *seed << ": " << results.size() << " jobs (" << standby_jobs << " with a standby), "
            << faults << " faults, " << recoveries << " recoveries; " << failed_jobs << " job(s) failed a check\n\n";
  std::cout << "| fault | injected |\n|---|---|\n";
  for (const auto& [k, n] : by_kind)
    std::cout << "| " << k << " | " << n << " |\n";
  std::cout << "\n| check | jobs that passed |\n|---|---|\n";
  for (const char* c : {"finished", "loss", "committed", "leftovers", "fence", "checkpoints"})
    std::cout << "| " << c << " | " << results.size() - static_cast<std::size_t>(failed_checks[c]) << " of "
              << results.size() << " |\n";
  std::cout << "\nrecovery time: median " << percentile(recovery_s, 0.5) << " s, p90 " << percentile(recovery_s, 0.9)
            << " s, max " << percentile(recovery_s, 1.0) << " s; steps trained again: " << retrained
            << "; stale-epoch messages dropped: " << dropped << ", delivered: " << delivered << "\n";

  if (!report_path.empty()) {
    json out;
    out["seed"] = *seed;
    out["steps"] = steps;
    out["failure_free_loss_bits"] = testing::bits(baseline);
    out["jobs"] = json::array();
    for (const auto& r : results) {
      json j;
      j["index"] = r.index;
      j["standby"] = r.standby;
      j["seconds"] = r.seconds;
      j["recoveries"] = r.recoveries;
      j["not_injected"] = r.skipped;
      j["steps_retrained"] = r.steps_retrained;
      j["stale_dropped"] = r.stale_dropped;
      j["stale_delivered"] = r.stale_delivered;
      j["failed"] = r.failed;
      j["faults"] = json::array();
      for (const auto& f : r.faults)
        j["faults"].push_back({{"kind", name(f.kind)}, {"detail", f.detail}, {"committed_before", f.committed_before}});
      if (!r.logs_kept.empty())
        j["logs"] = r.logs_kept;
      out["jobs"].push_back(j);
    }
    out["by_kind"] = by_kind;
    out["recovery_s"] = {{"median", percentile(recovery_s, 0.5)},
                         {"p90", percentile(recovery_s, 0.9)},
                         {"max", percentile(recovery_s, 1.0)}};
    std::ofstream(report_path) << out.dump(2) << "\n";
  }
  if (interrupted.load()) {
    std::cout << "chaos: interrupted\n";
    return 1;
  }
  return failed_jobs == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rekindle::chaos

int main(int argc, char** argv) { return rekindle::chaos::main(argc, argv); }
