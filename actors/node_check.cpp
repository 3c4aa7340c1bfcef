#include "actors/node_check.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include "common/clock.hpp"
#include "common/gpu_plugin.hpp"
#include "config/spec.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu_ops.hpp"

namespace rekindle::actors {

namespace {

// Rounds of the compute and memory checks; the best counts.
constexpr int rounds = 5;
// CPU time one round of the compute check lasts at least.
constexpr double round_seconds = 0.02;

double thread_cpu_seconds() { return to_seconds(thread_cpu_time()); }

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Times the work is repeated under the drill (at least 1).
// The drill's factor for measurement `what`.
double drilled(const node_check_options& o, std::string_view what) {
  return o.slow_only.empty() || o.slow_only == what ? o.slow_factor : 1.0;
}

std::size_t repeats(double slow_factor) {
  return static_cast<std::size_t>(std::max(1.0, std::round(std::clamp(slow_factor, 1.0, 1000.0))));
}

double gemm_gflops(const node_check_options& o) {
  const std::size_t m = std::max<std::size_t>(o.m, 1), n = std::max<std::size_t>(o.n, 1),
                    k = std::max<std::size_t>(o.k, 1);
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (std::size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<float>(i % 13) * 0.01f;
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<float>(i % 7) * 0.02f;
  kernels::use_single_threaded_blas();
  const auto product = [&] { kernels::gemm<float>(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n); };
  // Enough products for one round to last round_seconds of CPU time.
  product();
  std::size_t per_round = 1;
  for (;;) {
    const double t0 = thread_cpu_seconds();
    for (std::size_t i = 0; i < per_round; ++i)
      product();
    if (thread_cpu_seconds() - t0 >= round_seconds / 4 || per_round >= (1u << 20))
      break;
    per_round *= 2;
  }
  per_round *= 4;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
                       static_cast<double>(per_round);
  const std::size_t work = per_round * repeats(drilled(o, "compute"));
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = thread_cpu_seconds();
    for (std::size_t i = 0; i < work; ++i)
      product();
    const double spent = thread_cpu_seconds() - t0;
    if (spent > 0)
      best = std::max(best, flops / spent / 1e9);
  }
  return best;
}

double memory_gbps(const node_check_options& o) {
  const std::size_t bytes = std::max<std::size_t>(o.memory_bytes, 1u << 20);
  std::vector<unsigned char> from(bytes, 1), to(bytes, 2);  // touched: no page faults while timed
  constexpr int copies = 4;
  const std::size_t work = copies * repeats(drilled(o, "memory"));
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = thread_cpu_seconds();
    for (std::size_t i = 0; i < work; ++i) {
      std::memcpy(to.data(), from.data(), bytes);
      from[i % bytes] = to[(i * 7) % bytes];  // each copy is used: not optimised away
    }
    const double spent = thread_cpu_seconds() - t0;
    if (spent > 0)
      best = std::max(best, static_cast<double>(bytes) * copies / spent / 1e9);
  }
  return best;
}

// Writes `bytes` (times the drill's factor) to a file in `dir`, fsyncs it, removes it.
void disk(const node_check_options& o, policy::node_figures& f) {
  std::error_code ec;
  std::filesystem::create_directories(o.directory, ec);
  const auto path = o.directory / (".node-check-" + std::to_string(::getpid()));
  const auto failed = [&](const char* what) {
    f.error = std::string{"disk: cannot "} + what + " " + path.string() + ": " + std::strerror(errno);
  };
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    failed("create");
    return;
  }
  const std::vector<char> chunk(1u << 20, 'k');
  const std::uint64_t total = o.disk_bytes * repeats(drilled(o, "disk"));
  const double t0 = wall_seconds();
  bool ok = true;
  for (std::uint64_t done = 0; ok && done < total;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), total - done));
    const auto w = ::write(fd, chunk.data(), n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      failed("write");
      ok = false;
      break;
    }
    done += static_cast<std::uint64_t>(w);
  }
  const double t1 = wall_seconds();
  if (ok && ::fsync(fd) != 0) {
    failed("fsync");
    ok = false;
  }
  const double t2 = wall_seconds();
  ::close(fd);
  std::filesystem::remove(path, ec);
  if (!ok)
    return;
  f.fsync_ms = (t2 - t1) * 1e3;
  if (t2 > t0)
    f.disk_mbps = static_cast<double>(o.disk_bytes) / (t2 - t0) / 1e6;
}

// Every GPU: a cuBLAS GEMM and the driver's error state. The node's figure is its slowest GPU.
void check_gpus(policy::node_figures& f) {
  auto devices = kernels::check_cuda_devices();
  if (!devices) {
    f.gpu_faults = "the GPUs could not be measured: " + devices.error().message();
    return;
  }
  std::vector<std::string> faults, details;
  double slowest = 0;
  for (const auto& d : *devices) {
    const auto who = "cuda:" + std::to_string(d.index);
    if (!d.error.empty()) {
      faults.push_back(who + ": " + d.error);
      continue;
    }
    slowest = slowest == 0 ? d.gemm_gflops : std::min(slowest, d.gemm_gflops);
    char rate[64];
    std::snprintf(rate, sizeof rate, "%.0f GFLOP/s", d.gemm_gflops);
    details.push_back(who + " " + d.name + " " + rate);
    const auto health = read_gpu_health(d.pci_bus_id);
    for (const auto& fault : health.faults)
      faults.push_back(who + ": " + fault);
    if (!health.unreadable.empty())
      details.push_back(who + ": " + health.unreadable);
  }
  f.gpu_gflops = slowest;
  for (const auto& d : details)
    f.gpu_detail += (f.gpu_detail.empty() ? "" : "; ") + d;
  for (const auto& x : faults)
    f.gpu_faults += (f.gpu_faults.empty() ? "" : "; ") + x;
}

}  // namespace

node_check_options node_check_options_of(const config::spec& spec, std::size_t node) {
  node_check_options o;
  o.m = std::size_t{spec.job.micro_batch} * spec.model.seq_len;
  o.k = spec.model.width;
  o.n = 4 * std::size_t{spec.model.width};
  o.directory = spec.checkpoint.directory;
  o.disk_bytes = spec.checks.disk_bytes;
  if (node < spec.nodes.size())
    o.gpus_expected = static_cast<std::int32_t>(std::count_if(
        spec.nodes[node].devices.begin(), spec.nodes[node].devices.end(),
        [](const config::device_spec& d) { return d.type == config::device_spec::kind::cuda; }));
  return o;
}

node_check_report report_of(node_id node, std::uint64_t id, const policy::node_figures& f) {
  return {node,         id,      f.gemm_gflops, f.memory_gbps, f.disk_mbps, f.fsync_ms, f.gpus, f.gpus_expected,
          f.gpu_detail, f.error, f.gpu_gflops,  f.gpu_faults};
}

policy::node_figures figures_of(const node_check_report& r) {
  return {r.gemm_gflops, r.memory_gbps, r.disk_mbps, r.fsync_ms, r.gpus,
          r.gpus_expected, r.gpu_detail,  r.gpu_gflops, r.gpu_faults, r.error};
}

policy::node_figures check_node(const node_check_options& o) {
  policy::node_figures f;
  f.gemm_gflops = gemm_gflops(o);
  f.memory_gbps = memory_gbps(o);
  disk(o, f);
  const auto gpus = probe_gpus();
  f.gpus = gpus.devices;
  f.gpus_expected = o.gpus_expected;
  f.gpu_detail = gpus.detail;
  if (gpus.devices > 0)
    check_gpus(f);
  return f;
}

}  // namespace rekindle::actors
