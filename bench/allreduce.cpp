// allreduce: bandwidth of the UCX ring allreduce between processes on this machine, next to
// Open MPI's MPI_Allreduce, Gloo's ring allreduce and memcpy, all measured in the same run.
//
//   allreduce [--ranks 2,4] [--min 4KiB] [--max 256MiB] [--runs 5] [--chunk 512KiB] [--json]
//             [--no-baselines] [--no-shared]
//
// Every rank is a separate process. For each size the result is verified first (exact integer
// sums), then timed: a barrier, `iters` back-to-back calls, and the time per call; the median of
// --runs such runs is reported. algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests).
// Our allreduce runs twice: on buffers of the rank's own (the ring), and on buffers in shared
// memory (ring_resources::allocate_shared: the ranks read each other's buffers in place).

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <iostream>
#include <string>
#include <vector>

#include "common/text.hpp"
#include "transport/rendezvous.hpp"
#include "transport/ring_communicator.hpp"

namespace {

using namespace rekindle;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct options {
  std::vector<int> ranks{2, 4};
  std::uint64_t min = 4 << 10;
  std::uint64_t max = 256 << 20;
  int runs = 5;
  std::uint64_t chunk = transport::ring_options{}.chunk_size;  // the default of transport.chunk_size
  bool json = false;
  bool baselines = true;
  bool shared = true;
};

std::vector<std::uint64_t> sizes_of(const options& o) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t s = o.min; s <= o.max; s *= 4)
    out.push_back(s);
  return out;
}

int iterations_for(std::uint64_t bytes) {
  return static_cast<int>(std::clamp<std::uint64_t>((std::uint64_t{512} << 20) / bytes, 3, 2000));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One rank: rendezvous, verify, time; rank 0 writes {size: seconds per call} to DIR/result.json.
int run_worker(int rank, int size, const fs::path& dir, const options& o, bool shared) {
  transport::ring_options ro;
  ro.chunk_size = o.chunk;
  ro.timeout = std::chrono::seconds{120};
  ro.net_devices = "lo";
  auto resources = transport::ring_resources::create(ro);
  if (!resources) {
    std::cerr << "rank " << rank << ": " << resources.error() << "\n";
    return 1;
  }
  std::vector<float> own;
  float* data = nullptr;
  if (shared) {
    auto memory = (*resources)->allocate_shared(o.max);
    if (!memory) {
      std::cerr << "rank " << rank << ": " << memory.error() << "\n";
      return 1;
    }
    data = reinterpret_cast<float*>(memory->data());
  } else {
    own.resize(o.max / 4);
    data = own.data();
  }
  auto comm = transport::ring_communicator::create(*resources, rank, size, ro);
  if (!comm) {
    std::cerr << "rank " << rank << ": " << comm.error() << "\n";
    return 1;
  }
  auto addresses = transport::file_rendezvous(dir, rank, size, (*comm)->address(), std::chrono::seconds{60});
  if (!addresses || !(*comm)->connect(*addresses).ok()) {
    std::cerr << "rank " << rank << ": rendezvous or connect failed\n";
    return 1;
  }
  auto& c = **comm;
  if (shared && !c.reads_shared_buffers()) {
    std::cerr << "rank " << rank << ": the ranks do not map each other's shared buffers\n";
    return 1;
  }
  nlohmann::json result = nlohmann::json::object();
  for (auto bytes : sizes_of(o)) {
    const std::size_t count = bytes / 4;
    for (std::size_t i = 0; i < count; ++i)
      data[i] = static_cast<float>((i % 97) + static_cast<std::size_t>(rank));
    if (auto st = c.allreduce(data, count, transport::dtype::f32, transport::reduce_op::sum); !st.ok()) {
      std::cerr << "rank " << rank << ": " << st << "\n";
      return 1;
    }
    for (std::size_t i = 0; i < count; ++i) {
      const float want = static_cast<float>(size * static_cast<int>(i % 97) + size * (size - 1) / 2);
      if (data[i] != want) {
        std::cerr << "rank " << rank << ": wrong result at element " << i << " of " << count << "\n";
        return 1;
      }
    }
    const int iters = iterations_for(bytes);
    std::vector<double> times;
    for (int run = 0; run < o.runs + 1; ++run) {  // the first run warms up
      (void)c.barrier();
      const auto t0 = clock_type::now();
      for (int it = 0; it < iters; ++it)
        if (auto st = c.allreduce(data, count, transport::dtype::f32, transport::reduce_op::sum); !st.ok()) {
          std::cerr << "rank " << rank << ": " << st << "\n";
          return 1;
        }
      const double t = std::chrono::duration<double>(clock_type::now() - t0).count() / iters;
      if (run > 0)
        times.push_back(t);
    }
    result[std::to_string(bytes)] = median(times);
  }
  if (rank == 0)
    std::ofstream(dir / "result.json") << result.dump();
  return 0;
}

// Starts `argv` once per rank, with "{rank}" replaced; returns true when all exit 0.
bool run_ranks(int n, const std::vector<std::string>& argv) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      std::vector<std::string> args = argv;
      for (auto& a : args)
        if (a == "{rank}")
          a = std::to_string(r);
      std::vector<char*> cargs;
      for (auto& a : args)
        cargs.push_back(a.data());
      cargs.push_back(nullptr);
      execv(cargs[0], cargs.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  return ok;
}

std::optional<nlohmann::json> read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in)
    return std::nullopt;
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Seconds per memcpy of `bytes` into memory already touched (the physical limit of a copy).
double memcpy_seconds(std::uint64_t bytes, int runs) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  const int iters = iterations_for(bytes);
  std::vector<double> times;
  for (int run = 0; run < runs + 1; ++run) {
    const auto t0 = clock_type::now();
    for (int it = 0; it < iters; ++it) {
      std::memcpy(b.data(), a.data(), bytes);
      a[static_cast<std::size_t>(it) % bytes] = b[(static_cast<std::size_t>(it) * 7) % bytes];
    }
    if (run > 0)
      times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count() / iters);
  }
  return median(times);
}

std::string self_path() { return fs::read_symlink("/proc/self/exe").string(); }

std::string common_args(const options& o) {
  return "--min " + std::to_string(o.min) + " --max " + std::to_string(o.max) + " --runs " + std::to_string(o.runs);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  bool worker = false;
  bool shared_worker = false;
  int rank = 0, size = 0;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "allreduce: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    const auto size_arg = [&](std::uint64_t& out) {
      auto v = parse_size(next());
      if (!v) {
        std::cerr << "allreduce: " << a << ": " << v.error().message() << "\n";
        std::exit(2);
      }
      out = *v;
    };
    if (a == "--ranks") {
      o.ranks.clear();
      for (auto part : split(next(), ','))
        o.ranks.push_back(std::stoi(std::string{part}));
    } else if (a == "--min") size_arg(o.min);
    else if (a == "--max") size_arg(o.max);
    else if (a == "--chunk") size_arg(o.chunk);
    else if (a == "--runs") o.runs = std::stoi(next());
    else if (a == "--json") o.json = true;
    else if (a == "--no-baselines") o.baselines = false;
    else if (a == "--no-shared") o.shared = false;
    else if (a == "--shared-worker") shared_worker = true;
    else if (a == "--worker") worker = true;
    else if (a == "--rank") rank = std::stoi(next());
    else if (a == "--size") size = std::stoi(next());
    else if (a == "--dir") dir = next();
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: allreduce [--ranks 2,4] [--min 4KiB] [--max 256MiB] [--runs 5] [--chunk 512KiB] [--json] "
                   "[--no-baselines] [--no-shared]\n"
                   "  --no-shared     skip the run on buffers in shared memory (read in place by the ranks)\n";
      return 0;
    } else {
      std::cerr << "allreduce: unknown argument '" << a << "' (see --help)\n";
      return 2;
    }
  }
  if (worker)
    return run_worker(rank, size, dir, o, shared_worker);

  const auto bench_dir = fs::path{self_path()}.parent_path();
  nlohmann::json report;
  report["benchmark"] = "allreduce";
  report["dtype"] = "float32";
  report["op"] = "sum";
  for (int n : o.ranks) {
    const fs::path tmp = fs::temp_directory_path() / ("rekindle-allreduce-" + std::to_string(getpid()) + "-" + std::to_string(n));
    fs::create_directories(tmp);
    const auto run_ours = [&](bool shared) -> std::optional<nlohmann::json> {
      std::cerr << "allreduce: " << n << " ranks, ours on " << (shared ? "shared" : "private") << " buffers ...\n";
      const auto run_dir = tmp / (shared ? "shared" : "private");
      fs::create_directories(run_dir);
      std::vector<std::string> args{self_path(), "--worker", "--rank", "{rank}", "--size", std::to_string(n), "--dir",
                                    run_dir.string(), "--min", std::to_string(o.min), "--max", std::to_string(o.max), "--runs",
                                    std::to_string(o.runs), "--chunk", std::to_string(o.chunk)};
      if (shared)
        args.push_back("--shared-worker");
      const bool ok = run_ranks(n, args);
      auto result = read_json(run_dir / "result.json");
      if (!ok || !result) {
        std::cerr << "allreduce: the run on " << (shared ? "shared" : "private") << " buffers failed\n";
        return std::nullopt;
      }
      return result;
    };
    auto ours = run_ours(false);
    if (!ours)
      return 1;
    std::optional<nlohmann::json> shared;
    if (o.shared && !(shared = run_ours(true)))
      return 1;
    std::optional<nlohmann::json> mpi, gloo;
    if (o.baselines) {
      const auto mpi_bin = bench_dir / "mpi_allreduce";
      if (fs::exists(mpi_bin)) {
        std::cerr << "allreduce: " << n << " ranks, Open MPI ...\n";
        const std::string cmd = "mpirun --allow-run-as-root --oversubscribe --bind-to none -np " + std::to_string(n) +
                                " " + mpi_bin.string() + " " + common_args(o) + " --out " + (tmp / "mpi.json").string() +
                                " > " + (tmp / "mpi.log").string() + " 2>&1";
        if (std::system(cmd.c_str()) == 0)
          mpi = read_json(tmp / "mpi.json");
        else
          std::cerr << "allreduce: Open MPI run failed (" << (tmp / "mpi.log").string() << ")\n";
      }
      const auto gloo_bin = bench_dir / "gloo_allreduce";
      if (fs::exists(gloo_bin)) {
        std::cerr << "allreduce: " << n << " ranks, Gloo ...\n";
        fs::create_directories(tmp / "gloo");
        if (run_ranks(n, {gloo_bin.string(), "--rank", "{rank}", "--size", std::to_string(n), "--dir",
                          (tmp / "gloo").string(), "--min", std::to_string(o.min), "--max", std::to_string(o.max),
                          "--runs", std::to_string(o.runs), "--out", (tmp / "gloo.json").string()}))
          gloo = read_json(tmp / "gloo.json");
        else
          std::cerr << "allreduce: Gloo run failed\n";
      }
    }
    nlohmann::json rows = nlohmann::json::array();
    const double factor = 2.0 * (n - 1) / n;
    if (!o.json) {
      std::printf("\nallreduce float32 sum, %d ranks as processes on this machine (median of %d runs)\n", n, o.runs);
      std::printf("%10s %11s %9s %9s | %9s %7s | %11s %11s | %8s %8s | %11s %9s\n", "size", "time", "algbw", "busbw",
                  "shared", "vs MPI", "MPI busbw", "Gloo busbw", "vs MPI", "vs Gloo", "memcpy GB/s", "memcpy/sh");
    }
    for (auto bytes : sizes_of(o)) {
      const std::string key = std::to_string(bytes);
      const double t = (*ours)[key].get<double>();
      const double algbw = static_cast<double>(bytes) / t / 1e9;
      const double busbw = algbw * factor;
      const auto other = [&](const std::optional<nlohmann::json>& j) -> double {
        return j && j->contains(key) ? static_cast<double>(bytes) / (*j)[key].get<double>() / 1e9 * factor : 0.0;
      };
      const double mpi_bw = other(mpi), gloo_bw = other(gloo), shared_bw = other(shared);
      const double mem_bw = static_cast<double>(bytes) / memcpy_seconds(bytes, o.runs) / 1e9;
      rows.push_back({{"bytes", bytes}, {"seconds", t}, {"algbw_gbs", algbw}, {"busbw_gbs", busbw},
                      {"shared_busbw_gbs", shared_bw}, {"mpi_busbw_gbs", mpi_bw}, {"gloo_busbw_gbs", gloo_bw},
                      {"memcpy_gbs", mem_bw}});
      if (!o.json) {
        const auto ratio_of = [](double a, double b) {
          char buf[16];
          if (a > 0 && b > 0)
            std::snprintf(buf, sizeof buf, "%.2fx", a / b);
          else
            std::snprintf(buf, sizeof buf, "-");
          return std::string{buf};
        };
        const auto ratio = [&](double x) { return ratio_of(busbw, x); };
        const auto bw = [](double x) {
          char buf[16];
          if (x > 0)
            std::snprintf(buf, sizeof buf, "%.2f", x);
          else
            std::snprintf(buf, sizeof buf, "-");
          return std::string{buf};
        };
        std::printf("%10s %11s %9.2f %9.2f | %9s %7s | %11s %11s | %8s %8s | %11.2f %9s\n", size_to_string(bytes).c_str(),
                    format_duration(std::chrono::nanoseconds{static_cast<long long>(t * 1e9)}).c_str(), algbw, busbw,
                    bw(shared_bw).c_str(), ratio_of(shared_bw, mpi_bw).c_str(), bw(mpi_bw).c_str(), bw(gloo_bw).c_str(),
                    ratio(mpi_bw).c_str(), ratio(gloo_bw).c_str(), mem_bw, ratio_of(mem_bw, shared_bw).c_str());
      }
    }
    report["runs"].push_back({{"ranks", n}, {"rows", rows}});
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }
  if (o.json)
    std::cout << report.dump(2) << "\n";
  return 0;
}
