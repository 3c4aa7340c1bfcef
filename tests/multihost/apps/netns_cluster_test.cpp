// A job across hosts: each host a network namespace with its own address on a bridge, one rekindled
// in each, UCX over TCP on the veth links (nothing on loopback). Faults are done to the network
// itself: a host's link pulled past the node timeout and put back, packet loss on a link, every
// process of a host killed at once.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include "tests/support/cluster.hpp"
#include "tests/support/netns.hpp"
#include "tests/support/values.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

// Long enough that the faults below all land while the job trains, on a loaded machine too.
constexpr std::uint64_t steps = 3000;

// Hosts n0, n1, n2 (two ranks each) and the spare s0, as hosts 0..3.
int host_of(const std::string& node) { return node == "s0" ? 3 : node[1] - '0'; }

testing::cluster_options options(const testing::netns_hosts* hosts) {
  testing::cluster_options o{.nodes = 3, .ranks_per_node = 2, .spare = true, .steps = steps, .global_batch = 12};
  if (hosts != nullptr) {
    o.host = [hosts](const std::string& n) { return hosts->address(host_of(n)); };
    o.wrap = [hosts](const std::string& n) { return hosts->exec(host_of(n)); };
    o.port = 7100;  // the same port on every host: each has its own network stack
    // The spare host listens on every address and advertises its own.
    o.bind = [](const std::string& n) { return n == "s0" ? std::string{"0.0.0.0"} : std::string{}; };
    o.net_devices = testing::netns_hosts::device();
    o.own_data_dirs = true;  // hosts share no file system
    // UCX tells the hosts apart by their network interfaces: shared memory within a host, TCP
    // over the veth links between hosts.
  }
  return o;
}

// The node entries of a status, by name.
nlohmann::json node_entry(const nlohmann::json& s, const std::string& name) {
  for (const auto& n : s["nodes"])
    if (n["name"] == name)
      return n;
  return nullptr;
}

std::string all_logs(const testing::local_cluster& c) {
  std::string out;
  for (const auto& n : c.node_names()) {
    out += "---- " + n + "\n" + c.log(n);
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(c.node_dir(n), ec))
      if (f.path().extension() == ".log") {
        std::ifstream in(f.path());
        out += "---- " + f.path().string() + "\n" + std::string((std::istreambuf_iterator<char>(in)), {});
      }
  }
  return out;
}

// The value of the first sample of `name` whose labels include `label` in a Prometheus text
// exposition, or -1.
double sample(const std::string& exposition, const std::string& name, const std::string& label) {
  std::istringstream lines{exposition};
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(name + "{", 0) == 0 && line.find(label) != std::string::npos)
      return std::stod(line.substr(line.rfind(' ') + 1));
  return -1;
}

// n0's /metrics, fetched over the bridge from outside every host, as Prometheus would.
std::string metrics_of(const testing::local_cluster& c) {
  std::ifstream f(c.node_dir("n0") / "http.addr");
  std::string where;
  if (!std::getline(f, where) || where.find(':') == std::string::npos)
    return {};
  httplib::Client client{where.substr(0, where.rfind(':')), std::stoi(where.substr(where.rfind(':') + 1))};
  client.set_read_timeout(10, 0);
  auto r = client.Get("/metrics");
  return r && r->status == 200 ? r->body : std::string{};
}

// Waits until every recovery the status lists has finished.
bool recoveries_done(const testing::local_cluster& c) {
  return c.wait_for(
      [](const nlohmann::json& st) {
        for (const auto& r : st["recoveries"])
          if (!r["done"].get<bool>())
            return false;
        return true;
      },
      120s);
}

std::uint64_t step_of(const testing::local_cluster& c) {
  const auto s = c.status();
  return s.is_null() ? 0 : s.value("step", 0ull);
}

TEST(netns_cluster, survives_a_pulled_link_its_return_and_packet_loss_with_the_failure_free_loss) {
  if (auto why = testing::netns_hosts::unavailable()) GTEST_SKIP() << *why;
  // The failure-free run, on loopback: the same job, so the same loss bit for bit.
  double reference = 0;
  {
    testing::local_cluster ref{options(nullptr)};
    ref.start_all();
    const auto report = ref.wait_done(400s);
    ASSERT_FALSE(report.is_null()) << ref.log("n0");
    ASSERT_EQ(report["state"], "completed");
    reference = testing::final_loss(report);
  }

  testing::netns_hosts hosts{4};
  const auto loss_why = hosts.loss_unavailable();
  testing::local_cluster c{options(&hosts)};
  c.start_all();
  ASSERT_TRUE(c.wait_step(20, 180s)) << all_logs(c);
  auto s = c.status();
  EXPECT_EQ(s["world"], 6);
  for (const auto& r : s["ranks"])
    EXPECT_NE(r["node"], "s0") << "the spare runs no rank until a failure";
  // The ring's traffic crosses the hosts' links (not shared memory): 50 steps move megabytes.
  const auto bytes_before = hosts.link_bytes(host_of("n2"));
  const auto at = step_of(c);
  ASSERT_TRUE(c.wait_for([&](const nlohmann::json& st) { return st.value("step", 0ull) >= at + 50; }, 120s));
  EXPECT_GT(hosts.link_bytes(host_of("n2")) - bytes_before, 1u << 20);

  // n1's link pulled past the node timeout (3 s): its ranks move to the spare host.
  hosts.link_down(host_of("n1"));
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& st) {
        if (st["recoveries"].empty() || !st["recoveries"].back()["done"].get<bool>())
          return false;
        for (const auto& r : st["ranks"])
          if (r["node"] == "n1")
            return false;
        return st.value("state", "") == "running";
      },
      120s))
      << c.log("n0");
  s = c.status();
  EXPECT_EQ(s["world"], 6) << "the spare host took n1's ranks: the world keeps its size";
  EXPECT_EQ(s["recoveries"].back()["node"], "n1") << s["recoveries"].dump();
  int on_spare = 0;
  for (const auto& r : s["ranks"])
    on_spare += r["node"] == "s0" ? 1 : 0;
  EXPECT_EQ(on_spare, 2);
  // Prometheus, outside every host, sees the recovery with its phases on the supervisor's daemon.
  const auto exposition = metrics_of(c);
  ASSERT_FALSE(exposition.empty()) << "n0's /metrics did not answer over the bridge";
  EXPECT_GE(sample(exposition, "rekindle_recoveries_total", "kind=\"node_lost\""), 1) << exposition;
  for (const auto* phase : {"respawn", "rendezvous", "restore", "duration"})
    EXPECT_GE(sample(exposition, std::string{"rekindle_recovery_"} + phase + "_seconds_count", "kind=\"node_lost\""), 1)
        << phase << "\n" << exposition;
  EXPECT_EQ(sample(exposition, "rekindle_node_up", "node=\"n1\""), 0) << exposition;

  // The link back: n1 rejoins (as the spare now).
  hosts.link_up(host_of("n1"));
  EXPECT_TRUE(c.wait_for([](const nlohmann::json& st) { return node_entry(st, "n1").value("up", false); }, 120s))
      << c.log("n1");

  // 5% of n2's packets dropped, both ways, for 30 s: TCP carries the job through it, and any
  // recovery it causes is reported and finished.
  if (loss_why) {
    std::cout << "[ SKIPPED part ] packet loss: " << *loss_why << "\n";
  } else {
    const auto before = c.status()["recoveries"].size();
    const auto step_before = step_of(c);
    hosts.loss(host_of("n2"), 5);
    std::this_thread::sleep_for(30s);
    hosts.loss(host_of("n2"), 0);
    s = c.status();
    EXPECT_GT(step_of(c), step_before) << "training went on under 5% loss";
    for (std::size_t i = before; i < s["recoveries"].size(); ++i)
      std::cout << "recovery under loss (reported): " << s["recoveries"][i].dump() << "\n";
    EXPECT_TRUE(recoveries_done(c));
  }

  // n2's link degraded: its traffic out at 20 Mbit/s for 15 s (a token bucket), then latency of
  // 20 ms on every packet for 15 s where the kernel has netem. The job trains on through both.
  constexpr int mbit = 20;
  constexpr auto spell = 15s;
  struct degradation {
    const char* what;
    std::optional<std::string> why_not;
    std::function<void(bool)> set;
  };
  const std::vector<degradation> degradations{
      {"rate", hosts.rate_unavailable(), [&](bool on) { hosts.rate(host_of("n2"), on ? mbit : 0); }},
      {"delay", hosts.delay_unavailable(), [&](bool on) { hosts.delay(host_of("n2"), on ? 20 : 0); }}};
  for (const auto& d : degradations) {
    if (d.why_not) {
      std::cout << "[ SKIPPED part ] " << d.what << ": " << *d.why_not << "\n";
      continue;
    }
    const auto before = c.status()["recoveries"].size();
    const auto step_before = step_of(c);
    const auto sent_before = hosts.sent_bytes(host_of("n2"));
    d.set(true);
    std::this_thread::sleep_for(spell);
    const auto sent = hosts.sent_bytes(host_of("n2")) - sent_before;
    d.set(false);
    s = c.status();
    std::cout << d.what << ": " << step_of(c) - step_before << " steps in " << spell.count() << " s, n2 sent " << sent
              << " bytes\n";
    EXPECT_GT(step_of(c), step_before) << "training went on over the degraded link (" << d.what << ")";
    if (std::string{d.what} == "rate") {  // the bucket held n2 to its rate (a second's burst of slack)
      EXPECT_LE(sent, static_cast<std::uint64_t>(mbit) * 1000000 / 8 * (spell.count() + 1));
    }
    for (std::size_t i = before; i < s["recoveries"].size(); ++i)
      std::cout << "recovery over a degraded link (reported): " << s["recoveries"][i].dump() << "\n";
    EXPECT_TRUE(recoveries_done(c));
  }
  EXPECT_LT(step_of(c), steps) << "the job ended before the last fault: the faults above did not all land";

  const auto report = c.wait_done(600s);
  ASSERT_FALSE(report.is_null()) << c.log("n0");
  EXPECT_EQ(report["state"], "completed") << c.log("n0");
  EXPECT_EQ(report["step"], steps);
  EXPECT_EQ(report["world"], 6);
  EXPECT_EQ(testing::bits(testing::final_loss(report)), testing::bits(reference))
      << "final loss " << testing::final_loss(report) << ", failure-free " << reference;
  // Every daemon learns of the end from the supervisor (no shared file tells them) and exits.
  for (const auto& n : c.node_names()) {
    const auto code = c.wait_node(n, 120s);
    EXPECT_TRUE(code.has_value()) << n << " did not exit";
    EXPECT_EQ(code.value_or(-1), 0) << n;
  }
}

TEST(netns_cluster, every_process_of_a_host_killed_at_once_is_a_lost_node_replaced_by_the_spare) {
  if (auto why = testing::netns_hosts::unavailable()) GTEST_SKIP() << *why;
  testing::netns_hosts hosts{4};
  testing::local_cluster c{options(&hosts)};
  c.start_all();
  ASSERT_TRUE(c.wait_step(10, 60s)) << all_logs(c);
  EXPECT_GE(hosts.kill_all(host_of("n2")), 3) << "the daemon and its two ranks at least";
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& st) {
        if (st["recoveries"].empty() || !st["recoveries"].back()["done"].get<bool>())
          return false;
        for (const auto& r : st["ranks"])
          if (r["node"] == "n2")
            return false;
        return st.value("state", "") == "running";
      },
      120s))
      << c.log("n0");
  const auto s = c.status();
  EXPECT_EQ(s["world"], 6);
  EXPECT_FALSE(node_entry(s, "n2").value("up", true));
  EXPECT_EQ(s["recoveries"].back()["node"], "n2") << s["recoveries"].dump();
  int on_spare = 0;
  for (const auto& r : s["ranks"])
    on_spare += r["node"] == "s0" ? 1 : 0;
  EXPECT_EQ(on_spare, 2) << s["ranks"].dump();
  const auto step = step_of(c);
  EXPECT_TRUE(c.wait_for([&](const nlohmann::json& st) { return st.value("step", 0ull) > step + 5; }, 120s));
}

}  // namespace
}  // namespace rekindle
