#include "bench/local_job.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <fstream>
#include <iostream>
#include <string_view>
#include <numeric>
#include <sstream>
#include <thread>

#include "actors/worker.hpp"
#include "common/process.hpp"
#include "config/load.hpp"
#include "storage/snapshot_slot.hpp"
#include "training/training_task.hpp"
#include "transport/rendezvous.hpp"
#include "transport/ring_communicator.hpp"

namespace rekindle::bench {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::string config_text(const model_choice& m, int world, std::uint64_t steps, std::uint64_t snapshot_every,
                        const fs::path& data, const std::string& job_keys, std::uint64_t persist_every,
                        const std::string& recovery_keys) {
  std::ostringstream t;
  t << "[cluster]\nname = \"bench\"\nsupervisor = \"n0\"\nranks_per_node = " << world << "\n"
    << "\n[[nodes]]\nname = \"n0\"\nhost = \"127.0.0.1\"\nport = 0\n"
    << "\n[job]\nname = \"recovery\"\nsteps = " << steps << "\nglobal_batch = " << world
    << "\nmicro_batch = 1\nseed = 1\n" << job_keys
    << "\n[model]\nlayers = " << m.layers << "\nheads = " << m.heads << "\nwidth = " << m.width
    << "\nseq_len = " << m.seq_len << "\n"
    << "\n[checkpoint]\nsnapshot_every = " << snapshot_every << "\npersist_every = " << persist_every << "\n"
    << "\n[timeouts]\nnode = \"3s\"\nhang = \"30s\"\ncollective = \"10s\"\n"
    // A benchmark kills ranks on purpose (up to 100 per world size): the restart limits, which
    // end a job whose rank keeps failing, are not what it measures.
    << "\n[recovery]\nmax_restarts_per_rank = 100000\nmax_restarts = 100000\n" << recovery_keys
    << "\n[transport]\nnet_devices = \"lo\"\n"
    << "\n[daemon]\ndata_dir = \"" << data.string() << "\"\n";
  return t.str();
}

fs::path make_work_dir(const std::string& given, const std::string& bench) {
  if (!given.empty()) {
    const auto work = fs::absolute(given);
    std::error_code ec;
    fs::create_directories(work, ec);
    if (ec)
      std::cerr << bench << ": cannot create " << work.string() << ": " << ec.message() << "\n";
    return ec ? fs::path{} : work;
  }
  std::string pattern = (fs::temp_directory_path() / ("rekindle-bench-" + bench + "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    std::cerr << bench << ": cannot create a temporary directory\n";
    return {};
  }
  return pattern;
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

std::int64_t now_ns() { return clock_type::now().time_since_epoch().count(); }

std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds timeout) {
  const auto until = clock_type::now() + timeout;
  while (clock_type::now() < until) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid)
      return st;
    std::this_thread::sleep_for(20ms);
  }
  return std::nullopt;
}

namespace {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// DIR/step, mapped: rank 0 stores its step there, the benchmark reads it. Rank 0 makes it whole
// under another name first, so a reader never maps a file shorter than the counter.
std::uint64_t* map_step_file(const fs::path& dir, bool create) {
  const auto path = dir / (create ? "step.new" : "step");
  const int fd = ::open(path.c_str(), create ? O_RDWR | O_CREAT | O_TRUNC : O_RDONLY, 0600);
  if (fd < 0)
    return nullptr;
  if (create && ::ftruncate(fd, sizeof(std::uint64_t)) != 0) {
    ::close(fd);
    return nullptr;
  }
  void* p = ::mmap(nullptr, sizeof(std::uint64_t), create ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    return nullptr;
  std::error_code ec;
  if (create)
    fs::rename(path, dir / "step", ec);
  return static_cast<std::uint64_t*>(p);
}

}  // namespace

int run_bare_rank(const fs::path& config_path, int rank, int world, const fs::path& dir, bool shared_buffers) {
  auto spec = config::load(config_path);
  if (!spec) {
    std::cerr << spec.error().message() << "\n";
    return 1;
  }
  transport::ring_options ro;
  ro.timeout = spec->timeouts.collective;
  ro.chunk_size = spec->transport.chunk_size;
  ro.net_devices = spec->transport.net_devices;
  // As the worker: the gradients in the ring's shared buffers.
  auto resources = transport::ring_resources::create(ro);
  if (!resources) {
    std::cerr << "rank " << rank << ": " << resources.error().message() << "\n";
    return 1;
  }
  training::task_options options;
  if (shared_buffers) {
    auto memory = actors::shared_gradient_memory(**resources, *spec);
    if (!memory) {
      std::cerr << "rank " << rank << ": " << memory.error().message() << "\n";
      return 1;
    }
    options.gradient_memory = *memory;
  }
  auto comm = transport::ring_communicator::create(*resources, rank, world, ro);
  if (!comm) {
    std::cerr << "rank " << rank << ": " << comm.error().message() << "\n";
    return 1;
  }
  auto addresses = transport::file_rendezvous(dir, rank, world, (*comm)->address(), 120s);
  if (!addresses || !(*comm)->connect(*addresses).ok()) {
    std::cerr << "rank " << rank << ": rendezvous or connect failed\n";
    return 1;
  }
  auto task = training::make_training_task(*spec, rank, world, **comm, options);
  if (!task) {
    std::cerr << "rank " << rank << ": " << task.error().message() << "\n";
    return 1;
  }
  std::uint64_t* counter = rank == 0 ? map_step_file(dir, true) : nullptr;
  bare_steps out;
  auto previous = clock_type::now();
  double previous_cpu = process_cpu_seconds();
  while ((*task)->current_step().value() < (*task)->total_steps()) {
    auto r = (*task)->step();
    if (!r) {
      std::cerr << "rank " << rank << ": " << r.error().message() << "\n";
      return 1;
    }
    const auto end = clock_type::now();
    const double cpu = process_cpu_seconds();
    out.seconds.push_back(std::chrono::duration<double>(end - previous).count());
    out.cpu_seconds.push_back(cpu - previous_cpu);
    previous = end;
    previous_cpu = cpu;
    if (counter != nullptr)
      std::atomic_ref<std::uint64_t>(*counter).store(r->step.value(), std::memory_order_relaxed);
  }
  if (rank == 0)
    std::ofstream(dir / "bare.json") << json{{"step_seconds", out.seconds}, {"cpu_seconds", out.cpu_seconds}}.dump();
  return 0;
}

bare_step_watch::~bare_step_watch() {
  if (mapped_ != nullptr)
    ::munmap(mapped_, sizeof(std::uint64_t));
}

std::uint64_t bare_step_watch::step() {
  if (mapped_ == nullptr)
    mapped_ = map_step_file(dir_, false);  // rank 0 creates it once it trains
  return mapped_ == nullptr ? 0 : std::atomic_ref<std::uint64_t>(*mapped_).load(std::memory_order_relaxed);
}

bare_steps run_bare(const fs::path& config_path, int world, const fs::path& dir,
                    const std::function<void(const std::vector<pid_t>&)>& on_start, bool shared_buffers) {
  fs::create_directories(dir);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args{fs::read_symlink("/proc/self/exe").string(), "--bare-rank", std::to_string(r), "--world",
                                  std::to_string(world), "--config", config_path.string(), "--dir", dir.string()};
    if (!shared_buffers)
      args.emplace_back("--private-buffers");
    auto pid = spawn_child(args, {.log = dir / ("rank-" + std::to_string(r) + ".log")});
    if (pid)
      pids.push_back(*pid);
  }
  bool ok = pids.size() == static_cast<std::size_t>(world);
  if (ok && on_start)
    on_start(pids);
  for (pid_t p : pids) {
    auto st = wait_child(p, 600s);
    ok = ok && st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0;
    kill_child_group(p);
  }
  if (!ok) {
    std::cerr << "bench: the bare loop failed; see " << dir.string() << "/rank-*.log\n";
    return {};
  }
  std::ifstream in(dir / "bare.json");
  const auto j = json::parse(in);
  return {j.at("step_seconds").get<std::vector<double>>(), j.at("cpu_seconds").get<std::vector<double>>()};
}

cluster::cluster(const fs::path& dir, const std::string& config) : dir_(dir) {
  fs::create_directories(dir_ / "data");
  config_ = dir_ / "cluster.toml";
  std::ofstream(config_) << config;
  auto spec = config::load(config_);
  if (!spec) {
    std::cerr << spec.error().message() << "\n";
    std::exit(1);
  }
  spec_ = *spec;
  const auto bin = fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "bin" / "rekindled";
  auto pid = spawn_child({bin.string(), "--config", config_.string(), "--node", "n0", "--exit-when-done"},
                         {.log = dir_ / "n0.log"});
  if (!pid) {
    std::cerr << "bench: " << pid.error().message() << "\n";
    std::exit(1);
  }
  pid_ = *pid;
}

cluster::~cluster() {
  client_.reset();
  kill_child_group(pid_);
  (void)storage::snapshot_slot::remove_with_prefix(
      storage::snapshot_slot::name_prefix(dir_ / "data" / "n0", spec_.job.name));
}

json cluster::status(bool full) {
  if (!client_) {
    auto c = actors::admin_client::connect(spec_, {}, 2s);
    if (!c)
      return nullptr;
    client_ = std::move(*c);
  }
  auto r = client_->call(actors::admin_status{0, full}, 10s);
  if (!r)
    return nullptr;
  return json::parse(r->json, nullptr, false);
}

std::uint64_t cluster::file_step() const {
  std::ifstream in(dir_ / "data" / "status.json");
  // The top-level key, indented by two: the ranks' own "step" keys are deeper.
  for (std::string line; std::getline(in, line);)
    if (line.rfind("  \"step\": ", 0) == 0)
      return std::strtoull(line.c_str() + 10, nullptr, 10);
  return 0;
}

json cluster::wait(const std::function<bool(const json&)>& pred, std::chrono::seconds timeout) {
  const auto until = clock_type::now() + timeout;
  while (clock_type::now() < until) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return nullptr;
    }
    json s = status();
    if (!s.is_null() && !s.is_discarded() && pred(s))
      return s;
    std::this_thread::sleep_for(20ms);
  }
  return nullptr;
}

void cluster::stop() {
  if (client_)
    (void)client_->call(actors::admin_stop{}, 10s);
  client_.reset();
  if (pid_ > 0 && wait_child(pid_, 60s))
    pid_ = -1;
}

bool training(const json& s) { return s.value("state", "") == "running"; }

namespace {

// utime + stime of one process (every thread, live and ended), in clock ticks; -1 when gone.
long long process_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const auto close = text.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos)
    return -1;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14)
      utime = std::atoll(field.c_str());
    if (i == 15)
      stime = std::atoll(field.c_str());
  }
  return utime + stime;
}

// The times one thread gave up its core to wait (voluntary context switches); 0 when gone.
long long thread_waits(const fs::path& task) {
  std::ifstream in(task / "status");
  static constexpr std::string_view key = "voluntary_ctxt_switches:";
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(key))
      return std::atoll(line.c_str() + key.size());
  return 0;
}

void add_tree(pid_t pid, long long& ticks, long long& waits, int depth) {
  const auto t = process_ticks(pid);
  if (t < 0 || depth > 16)
    return;
  ticks += t;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    waits += thread_waits(task.path());
    std::ifstream children(task.path() / "children");
    for (pid_t child; children >> child;)
      add_tree(child, ticks, waits, depth + 1);
  }
}

}  // namespace

tree_usage usage_of_tree(pid_t root) {
  long long ticks = 0, waits = 0;
  add_tree(root, ticks, waits, 0);
  return {static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK)), waits};
}

}  // namespace rekindle::bench
