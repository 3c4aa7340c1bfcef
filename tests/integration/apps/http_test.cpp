// The daemons' HTTP side on a real cluster: /metrics scraped by a real Prometheus and checked by
// promtool, and the status page's data, with and without tokens.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/cluster.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// host and port of `node`'s HTTP server, from <data_dir>/<node>/http.addr.
std::pair<std::string, int> http_address(const testing::local_cluster& c, const std::string& node) {
  for (int i = 0; i < 300; ++i) {
    std::ifstream f(c.data_dir() / node / "http.addr");
    std::string line;
    if (f && std::getline(f, line) && line.find(':') != std::string::npos)
      return {line.substr(0, line.rfind(':')), std::stoi(line.substr(line.rfind(':') + 1))};
    std::this_thread::sleep_for(100ms);
  }
  return {"", 0};
}

httplib::Result get(const std::pair<std::string, int>& at, const std::string& path, const std::string& token = {}) {
  httplib::Client client{at.first, at.second};
  client.set_read_timeout(10, 0);
  httplib::Headers h;
  if (!token.empty())
    h.emplace("Authorization", "Bearer " + token);
  return client.Get(path, h);
}

// A port free now (Prometheus is given a fixed one).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// The value of a Prometheus instant query's first sample, or nullopt.
std::optional<double> query(int port, const std::string& promql) {
  httplib::Client client{"127.0.0.1", port};
  client.set_read_timeout(10, 0);
  auto r = client.Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
  if (!r || r->status != 200)
    return std::nullopt;
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || j["data"]["result"].empty())
    return std::nullopt;
  return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
}

// Polls a query until its value is at least `min`.
bool wait_query(int port, const std::string& promql, double min, std::chrono::seconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (auto v = query(port, promql); v && *v >= min)
      return true;
    std::this_thread::sleep_for(500ms);
  }
  return false;
}

// promtool's verdict on an exposition: "" when clean, else what it said.
std::string promtool_check(const std::string& text) {
  auto r = testing::run_process({"promtool", "check", "metrics"}, 60s, text);
  return r.exit_code == 0 ? std::string{} : "exit " + std::to_string(r.exit_code) + ": " + r.out + r.err;
}

TEST(http, metrics_pass_promtool_and_prometheus_scrapes_every_daemon_and_a_recovery_with_its_phases) {
  if (auto why = testing::missing_tool("prometheus", "prometheus")) GTEST_SKIP() << *why;
  if (auto why = testing::missing_tool("promtool", "prometheus")) GTEST_SKIP() << *why;
  testing::local_cluster c{{.steps = 5000}};
  c.start_all();
  ASSERT_TRUE(c.wait_step(5, 120s)) << c.log("n0");
  const auto n0 = http_address(c, "n0");
  const auto n1 = http_address(c, "n1");
  ASSERT_GT(n0.second, 0) << c.log("n0");
  ASSERT_GT(n1.second, 0) << c.log("n1");

  // The supervisor's daemon exposes the job; the other only itself. Both pass promtool.
  auto m0 = get(n0, "/metrics");
  ASSERT_TRUE(m0);
  ASSERT_EQ(m0->status, 200);
  EXPECT_EQ(m0->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(m0->body.find("rekindle_daemon_info{node=\"n0\",role=\"supervisor\""), std::string::npos) << m0->body;
  EXPECT_NE(m0->body.find("rekindle_job_state{training_job=\"test\",state=\"running\"} 1"), std::string::npos) << m0->body;
  EXPECT_NE(m0->body.find("rekindle_rank_step{training_job=\"test\",rank=\"3\",node=\"n1\"}"), std::string::npos);
  EXPECT_NE(m0->body.find("rekindle_node_heartbeat_age_seconds{training_job=\"test\",node=\"n1\"}"), std::string::npos);
  EXPECT_EQ(promtool_check(m0->body), "");
  auto m1 = get(n1, "/metrics");
  ASSERT_TRUE(m1);
  EXPECT_NE(m1->body.find("rekindle_daemon_info{node=\"n1\",role=\"node\""), std::string::npos) << m1->body;
  EXPECT_EQ(m1->body.find("rekindle_job_state"), std::string::npos);
  EXPECT_EQ(promtool_check(m1->body), "");
  // The page's data lives with the supervisor; n1 says where that is.
  auto s1 = get(n1, "/api/status");
  ASSERT_TRUE(s1);
  EXPECT_EQ(s1->status, 404);
  EXPECT_NE(s1->body.find("does not run the job's supervisor"), std::string::npos) << s1->body;

  // A real Prometheus scrapes both daemons every second.
  testing::temp_dir prom{"rekindle-prometheus"};
  const int port = free_port();
  std::ofstream(prom.path() / "prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
      << "scrape_configs:\n  - job_name: rekindle\n    static_configs:\n      - targets: ['" << n0.first << ":"
      << n0.second << "', '" << n1.first << ":" << n1.second << "']\n";
  testing::child_process server{{"prometheus", "--config.file=" + (prom.path() / "prometheus.yml").string(),
                                 "--storage.tsdb.path=" + (prom.path() / "data").string(),
                                 "--web.listen-address=127.0.0.1:" + std::to_string(port)},
                                prom.path() / "prometheus.log"};
  auto prom_log = [&] {
    std::ifstream f(prom.path() / "prometheus.log");
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  ASSERT_TRUE(wait_query(port, "sum(up{job=\"rekindle\"})", 2, 90s)) << prom_log();
  ASSERT_TRUE(wait_query(port, "rekindle_job_step", 5, 60s));

  // A rank killed: the recovery is counted by kind, with its phases as histograms.
  const int pid = c.rank_pid(1);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& s) { return !s["recoveries"].empty() && s["recoveries"][0]["done"].get<bool>(); }, 120s))
      << c.log("n0");
  EXPECT_TRUE(wait_query(port, "rekindle_recoveries_total{kind=\"rank_exit\"}", 1, 60s));
  EXPECT_TRUE(wait_query(port, "rekindle_recovery_duration_seconds_count{kind=\"rank_exit\"}", 1, 60s));
  EXPECT_TRUE(wait_query(port, "rekindle_recovery_respawn_seconds_count{kind=\"rank_exit\"}", 1, 60s));
  EXPECT_TRUE(wait_query(port, "rekindle_recovery_restore_seconds_count{kind=\"rank_exit\"}", 1, 60s));
  EXPECT_TRUE(wait_query(port, "rekindle_rank_restarts_total{rank=\"1\"}", 1, 60s));
  EXPECT_TRUE(wait_query(port, "rekindle_job_epoch", 2, 60s));
  // No series came from a failed scrape.
  EXPECT_TRUE(wait_query(port, "sum(up{job=\"rekindle\"})", 2, 30s));
  auto after = get(n0, "/metrics");
  ASSERT_TRUE(after);
  EXPECT_EQ(promtool_check(after->body), "");
}

TEST(http, with_authentication_only_the_read_only_token_opens_metrics_and_the_page) {
  const std::string admin_token = "admin-secret-0123456789abcdef";
  const std::string ro_token = "look-only-0123456789abcdef";
  testing::local_cluster c{{.steps = 5000,
                            .extra = testing::token_files_toml}};
  testing::write_token_files(c, admin_token, ro_token);
  c.start_all();
  ASSERT_TRUE(c.wait_step(3, 120s)) << c.log("n0");
  const auto n0 = http_address(c, "n0");
  ASSERT_GT(n0.second, 0);
  for (const auto* path : {"/metrics", "/", "/api/status", "/api/events"}) {
    auto none = get(n0, path);
    ASSERT_TRUE(none);
    EXPECT_EQ(none->status, 401) << path;
    auto admin = get(n0, path, admin_token);
    ASSERT_TRUE(admin);
    EXPECT_EQ(admin->status, 401) << path << ": the admin token is never taken over HTTP";
    auto ro = get(n0, path, ro_token);
    ASSERT_TRUE(ro);
    EXPECT_EQ(ro->status, 200) << path;
    EXPECT_EQ(ro->body.find(admin_token), std::string::npos) << path;
    EXPECT_EQ(ro->body.find(ro_token), std::string::npos) << path;
  }
  auto status = get(n0, "/api/status", ro_token);
  ASSERT_TRUE(status);
  auto s = nlohmann::json::parse(status->body);
  EXPECT_EQ(s["state"], "running");
  EXPECT_GE(s["loss_curve"].size(), 3u);
  EXPECT_FALSE(s.contains("losses"));
  auto events = get(n0, "/api/events", ro_token);
  ASSERT_TRUE(events);
  auto e = nlohmann::json::parse(events->body);
  ASSERT_TRUE(e.is_array());
  EXPECT_FALSE(e.empty());
  for (const auto& n : c.node_names()) {
    const auto log = c.log(n);
    EXPECT_EQ(log.find(admin_token), std::string::npos) << n;
    EXPECT_EQ(log.find(ro_token), std::string::npos) << n;
  }
}

}  // namespace
}  // namespace rekindle
