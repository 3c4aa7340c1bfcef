// latency: round trip of a small control message between two processes over the messenger (UCX
// active messages over TCP on loopback, with framing, checksums and the token handshake done),
// next to ucx_perftest's UCP active-message latency on the same transport, in the same run.
//
//   latency [--iters 20000] [--size 8] [--runs 5] [--spin US] [--json] [--no-baseline]
//
// The ping-pong runs between the two messengers' loop threads: a frame arrives, the handler
// sends the next one. Reported: median and 99th percentile of the round trip over all
// iterations (median over --runs), and ucx_perftest's median one-way latency times two. --spin sets
// how long both loops poll after a message before they block (transport.spin; the messenger's own
// default, 200 us, unless given; the daemons' and workers' default is 0).

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "transport/messenger.hpp"

namespace {

using namespace rekindle;
using namespace rekindle::transport;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

const std::string token = "latency-benchmark-token-0123456789";
std::optional<std::chrono::microseconds> spin;

messenger_options base_options() {
  messenger_options o;
  if (spin)
    o.spin = *spin;
  o.token = token;
  o.net_devices = "lo";
  o.tls = "tcp,self";
  o.peer_timeout = std::chrono::seconds{30};
  return o;
}

int run_server(const fs::path& port_file) {
  auto o = base_options();
  o.listen_host = "127.0.0.1";
  o.name = "latency-server";
  messenger* self = nullptr;
  auto m = messenger::start(o, {.on_frame = [&self](const peer_info& from, frame&& f) { self->send(from.id, std::move(f)); }});
  if (!m) {
    std::cerr << "latency server: " << m.error() << "\n";
    return 1;
  }
  self = m->get();
  std::ofstream(port_file.string() + ".tmp") << (*m)->port();
  fs::rename(port_file.string() + ".tmp", port_file);
  for (;;)
    pause();
}

struct stats {
  double median_us = 0;
  double p99_us = 0;
};

// Round trips of `iters` frames of `size` payload bytes, driven from the client's loop thread.
expected<stats> measure(std::uint16_t port, int iters, std::size_t size) {
  std::vector<double> rtt(static_cast<std::size_t>(iters));
  std::promise<void> done;
  std::atomic<int> i{0};
  clock_type::time_point sent_at;
  messenger* self = nullptr;
  peer_id server;
  const auto ping = [&] {
    frame f;
    f.header.type = 1;
    f.payload = shared_bytes{std::vector<std::byte>(size)};
    sent_at = clock_type::now();
    self->send(server, std::move(f));
  };
  auto o = base_options();
  o.name = "latency-client";
  const int warmup = std::min(1000, iters);
  std::atomic<int> warm{0};
  auto m = messenger::start(o, {.on_frame = [&](const peer_info&, frame&&) {
                                  const auto now = clock_type::now();
                                  if (warm.load() < warmup) {
                                    ++warm;
                                    ping();
                                    return;
                                  }
                                  const int k = i.fetch_add(1);
                                  rtt[static_cast<std::size_t>(k)] = std::chrono::duration<double, std::micro>(now - sent_at).count();
                                  if (k + 1 < iters)
                                    ping();
                                  else
                                    done.set_value();
                                }});
  if (!m)
    return m.error();
  self = m->get();
  RK_ASSIGN_OR_RETURN(auto peer, (*m)->connect_blocking("127.0.0.1", port, std::chrono::seconds{30}));
  server = peer.id;
  (*m)->post(ping);
  if (done.get_future().wait_for(std::chrono::seconds{120}) != std::future_status::ready)
    return status{errc::timeout, "the ping-pong did not finish"};
  std::sort(rtt.begin(), rtt.end());
  return stats{rtt[rtt.size() / 2], rtt[rtt.size() * 99 / 100]};
}

// ucx_perftest ucp_am_lat over tcp on loopback: median one-way latency in microseconds.
std::optional<double> perftest_one_way(int iters, std::size_t size) {
  const std::string env = "UCX_TLS=tcp,self UCX_NET_DEVICES=lo ";
  const int port = 20000 + static_cast<int>(getpid() % 20000);
  const std::string args = " -t ucp_am_lat -n " + std::to_string(iters) + " -s " + std::to_string(size) + " -p " +
                           std::to_string(port);
  const std::string server_cmd = env + "ucx_perftest" + args + " > /dev/null 2>&1 &";
  if (std::system(server_cmd.c_str()) != 0)
    return std::nullopt;
  std::this_thread::sleep_for(std::chrono::milliseconds{500});
  const std::string client_cmd = env + "ucx_perftest 127.0.0.1" + args + " 2>&1";
  FILE* p = popen(client_cmd.c_str(), "r");
  if (p == nullptr)
    return std::nullopt;
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p) != nullptr)
    out += buf;
  pclose(p);
  std::smatch m;
  if (!std::regex_search(out, m, std::regex{R"(Final:\s+\d+\s+([0-9.]+))"}))
    return std::nullopt;
  return std::stod(m[1]);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20000, runs = 5;
  std::size_t size = 8;
  bool json = false, baseline = true;
  std::string server_port_file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "latency: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--iters") iters = std::stoi(next());
    else if (a == "--size") size = std::stoull(next());
    else if (a == "--runs") runs = std::stoi(next());
    else if (a == "--json") json = true;
    else if (a == "--no-baseline") baseline = false;
    else if (a == "--spin") spin = std::chrono::microseconds{std::stoll(next())};
    else if (a == "--server") server_port_file = next();
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: latency [--iters 20000] [--size 8] [--runs 5] [--spin US] [--json] [--no-baseline]\n";
      return 0;
    } else {
      std::cerr << "latency: unknown argument '" << a << "' (see --help)\n";
      return 2;
    }
  }
  if (!server_port_file.empty())
    return run_server(server_port_file);

  const fs::path port_file = fs::temp_directory_path() / ("rekindle-latency-" + std::to_string(getpid()));
  const pid_t server = fork();
  if (server == 0) {
    const auto self = fs::read_symlink("/proc/self/exe").string();
    const auto spin_us = std::to_string(spin ? spin->count() : -1);
    if (spin)
      execl(self.c_str(), self.c_str(), "--spin", spin_us.c_str(), "--server", port_file.c_str(), static_cast<char*>(nullptr));
    else
      execl(self.c_str(), self.c_str(), "--server", port_file.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = clock_type::now() + std::chrono::seconds{30};
  while (!fs::exists(port_file) && clock_type::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  std::uint16_t port = 0;
  std::ifstream(port_file) >> port;
  std::vector<double> medians, p99s;
  for (int r = 0; r < runs; ++r) {
    auto s = measure(port, iters, size);
    if (!s) {
      std::cerr << "latency: " << s.error() << "\n";
      kill(server, SIGKILL);
      waitpid(server, nullptr, 0);
      return 1;
    }
    medians.push_back(s->median_us);
    p99s.push_back(s->p99_us);
  }
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
  fs::remove(port_file);
  std::sort(medians.begin(), medians.end());
  std::sort(p99s.begin(), p99s.end());
  const double ours = medians[medians.size() / 2];
  const double ours_p99 = p99s[p99s.size() / 2];
  std::optional<double> perf;
  if (baseline) {
    std::vector<double> v;
    for (int r = 0; r < runs; ++r)
      if (auto one_way = perftest_one_way(iters, size))
        v.push_back(2 * *one_way);
    if (!v.empty()) {
      std::sort(v.begin(), v.end());
      perf = v[v.size() / 2];
    }
  }
  if (json) {
    nlohmann::json j{{"benchmark", "latency"}, {"payload_bytes", size}, {"iterations", iters}, {"runs", runs},
                     {"spin_us", spin ? spin->count() : std::chrono::duration_cast<std::chrono::microseconds>(messenger_options{}.spin).count()},
                     {"messenger_rtt_median_us", ours}, {"messenger_rtt_p99_us", ours_p99}};
    if (perf)
      j["ucx_perftest_rtt_median_us"] = *perf;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  const auto spin_used = spin ? *spin : std::chrono::duration_cast<std::chrono::microseconds>(messenger_options{}.spin);
  std::printf("control-message round trip, %zu-byte payload, two processes over TCP on loopback (median of %d runs "
              "of %d), polling %lld us after each message\n",
              size, runs, iters, static_cast<long long>(spin_used.count()));
  std::printf("  messenger (framing, checksum, authenticated peers)  median %7.1f us   p99 %7.1f us\n", ours, ours_p99);
  if (perf)
    std::printf("  ucx_perftest ucp_am_lat (2 x one-way median)         median %7.1f us   ratio %.2fx\n", *perf,
                ours / *perf);
  else if (baseline)
    std::printf("  ucx_perftest: not run (is ucx-utils installed?)\n");
  return 0;
}
