#include "tests/support/cluster.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <thread>

#include "storage/snapshot_slot.hpp"
#include "tests/support/wait.hpp"

namespace rekindle::testing {

namespace fs = std::filesystem;

local_cluster::local_cluster(cluster_options options) : options_(std::move(options)) {
  config_ = dir_.path() / "cluster.toml";
  data_ = dir_.path() / "data";
  std::string toml = "[cluster]\nname = \"test\"\nranks_per_node = " + std::to_string(options_.ranks_per_node) + "\n" +
                     options_.cluster_extra;
  for (const auto& n : node_names())
    toml += "\n[[nodes]]\nname = \"" + n + "\"\nhost = \"" + (options_.host ? options_.host(n) : "127.0.0.1") + "\"\n" +
            (options_.port != 0 ? "port = " + std::to_string(options_.port) + "\n" : "") +
            (options_.bind && !options_.bind(n).empty() ? "bind = \"" + options_.bind(n) + "\"\n" : "") + (n == "s0" ? "spare = true\n" : "") +
            (options_.speeds.contains(n) ? "speed = " + std::to_string(options_.speeds.at(n)) + "\n" : "") +
            (options_.domains.contains(n) ? "domain = \"" + options_.domains.at(n) + "\"\n" : "");
  toml += "\n[job]\nname = \"test\"\nsteps = " + std::to_string(options_.steps) +
          "\nglobal_batch = " + std::to_string(options_.global_batch) +
          "\nmicro_batch = " + std::to_string(options_.micro_batch) + "\nseed = 7\n" +
          (options_.balance.empty() ? std::string{} : "balance = \"" + options_.balance + "\"\n") + options_.job_extra +
          "\n[model]\nlayers = 2\nheads = 2\nwidth = " + std::to_string(options_.width) + "\nseq_len = 16\n"
          "\n[checkpoint]\nsnapshot_every = " +
          std::to_string(options_.snapshot_every) + "\npersist_every = " + std::to_string(options_.persist_every) +
          "\nkeep = " + std::to_string(options_.keep) + "\n" +
          (options_.checkpoint_dir.empty() ? std::string{} : "directory = \"" + options_.checkpoint_dir + "\"\n") +
          "overlap = " + (options_.overlap ? "true" : "false") + "\n" +
          "\n"
          "\n[timeouts]\nheartbeat = \"100ms\"\nnode = \"" + options_.node_timeout + "\"\nhang = \"20s\"\nrendezvous = \"" + options_.rendezvous + "\"\ncollective = \"5s\"\n"
          "\n[transport]\nnet_devices = \"" + options_.net_devices + "\"\ntls = \"" + options_.tls + "\"\n" +
          "\n[checks]\n" + options_.checks +
          "\n[daemon]\ndata_dir = \"" +
          data_.string() + "\"\n" + options_.extra;
  std::ofstream(config_) << toml;
}

local_cluster::~local_cluster() {
  for (auto& [name, d] : daemons_)
    d->kill_all();
  // Daemons killed on purpose left their snapshot slots behind.
  for (const auto& n : node_names())
    (void)storage::snapshot_slot::remove_with_prefix(storage::snapshot_slot::name_prefix(node_dir(n), "test"));
}

std::vector<std::string> local_cluster::node_names() const {
  std::vector<std::string> out;
  for (int i = 0; i < options_.nodes; ++i)
    out.push_back("n" + std::to_string(i));
  if (options_.spare)
    out.push_back("s0");
  return out;
}

void local_cluster::start(const std::string& node) {
  fs::create_directories(data_);
  std::vector<std::string> argv = options_.wrap ? options_.wrap(node) : std::vector<std::string>{};
  for (const auto& word : {(bin_dir() / "rekindled").string(), std::string{"--config"}, config_.string(),
                           std::string{"--node"}, node, std::string{"--exit-when-done"}})
    argv.push_back(word);
  if (options_.own_data_dirs) {
    argv.push_back("--data-dir");
    argv.push_back(node_dir(node).parent_path().string());
  }
  daemons_[node] = std::make_unique<child_process>(argv, dir_.path() / (node + ".log"));
}

void local_cluster::start_all() {
  for (const auto& n : node_names())
    start(n);
}

void local_cluster::signal_node(const std::string& node, int sig) {
  if (auto it = daemons_.find(node); it != daemons_.end())
    it->second->signal(sig);
}

std::optional<int> local_cluster::wait_node(const std::string& node, std::chrono::milliseconds timeout) {
  auto it = daemons_.find(node);
  if (it == daemons_.end())
    return std::nullopt;
  auto raw = it->second->wait_for(timeout);
  if (!raw)
    return std::nullopt;
  return WIFEXITED(*raw) ? WEXITSTATUS(*raw) : 128 + WTERMSIG(*raw);
}

namespace {
// A JSON file the supervisor writes (atomically), or null when absent or unreadable.
nlohmann::json read_json(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in)
    return nullptr;
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception&) {
    return nullptr;
  }
}
}  // namespace

std::filesystem::path local_cluster::node_dir(const std::string& node) const {
  return options_.own_data_dirs ? data_ / (node + ".data") / node : data_ / node;
}

nlohmann::json local_cluster::status() const { return read_json(node_dir("n0").parent_path() / "status.json"); }

nlohmann::json local_cluster::report() const { return read_json(node_dir("n0").parent_path() / "report.json"); }

bool local_cluster::wait_for(const std::function<bool(const nlohmann::json&)>& pred, std::chrono::milliseconds timeout) const {
  return wait_until(
      [&] {
        auto s = status();
        return !s.is_null() && pred(s);
      },
      timeout);
}

bool local_cluster::wait_step(std::uint64_t step, std::chrono::milliseconds timeout) const {
  return wait_for(
      [&](const nlohmann::json& s) {
        if (s.value("state", "") != "running" || s["ranks"].empty())
          return false;
        for (const auto& r : s["ranks"])
          if (r.value("step", 0ull) < step)
            return false;
        return true;
      },
      timeout);
}

nlohmann::json local_cluster::wait_done(std::chrono::milliseconds timeout) const {
  nlohmann::json out;
  (void)wait_until(
      [&] {
        out = report();
        return !out.is_null();
      },
      timeout);
  return out;
}

int local_cluster::rank_pid(int rank) const {
  // A rank between processes (or a status being rewritten) has none yet: wait a little.
  int pid = -1;
  (void)wait_for(
      [&](const nlohmann::json& s) {
        for (const auto& r : s.value("ranks", nlohmann::json::array()))
          if (r.value("rank", -1) == rank)
            pid = r.value("pid", -1);
        return pid > 0;
      },
      std::chrono::seconds{10});
  return pid;
}

process_result local_cluster::admin(std::vector<std::string> args) const {
  std::vector<std::string> argv{(bin_dir() / "rekindle").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--config");
  argv.push_back(config_.string());
  return run_process(argv, std::chrono::seconds{60});
}

std::string local_cluster::log(const std::string& node) const { return read_file(dir_.path() / (node + ".log")); }

void write_token_files(const local_cluster& c, const std::string& admin, const std::string& readonly) {
  const auto dir = c.config().parent_path();
  for (const auto& [file, token] : {std::pair{"admin.token", admin}, std::pair{"ro.token", readonly}}) {
    std::ofstream(dir / file) << token << "\n";
    fs::permissions(dir / file, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  }
}

double final_loss(const nlohmann::json& report) {
  const auto& losses = report.at("losses");
  return losses.empty() ? 0.0 : losses.back().get<double>();
}

}  // namespace rekindle::testing
