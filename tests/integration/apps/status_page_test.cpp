// The supervisor's status page in a real browser (headless Chromium): loaded with the read-only
// token, its live data checked in the DOM, screenshots kept as test artifacts, in steady state and
// during a recovery.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "tests/support/cluster.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string admin_token = "admin-secret-0123456789abcdef";
const std::string ro_token = "look-only-0123456789abcdef";

std::string http_address(const testing::local_cluster& c, const std::string& node) {
  for (int i = 0; i < 300; ++i) {
    std::ifstream f(c.data_dir() / node / "http.addr");
    std::string line;
    if (f && std::getline(f, line) && !line.empty())
      return line;
    std::this_thread::sleep_for(100ms);
  }
  return "";
}

// Where screenshots go: $REKINDLE_TEST_ARTIFACTS, else test-artifacts/ in the build folder.
fs::path artifacts() {
  const char* env = std::getenv("REKINDLE_TEST_ARTIFACTS");
  fs::path dir = env != nullptr && *env != '\0' ? fs::path{env} : fs::current_path() / "test-artifacts";
  fs::create_directories(dir);
  return dir;
}

// Headless Chromium: loads `url`, lets its scripts run for a few seconds, then prints the DOM
// (and, with `screenshot`, saves the page there).
testing::process_result browse(const std::string& url, const fs::path& profile, const fs::path& screenshot = {}) {
  std::vector<std::string> argv{"chromium",           "--headless",         "--no-sandbox",
                                "--disable-gpu",      "--disable-quic",     "--no-first-run",
                                "--disable-background-networking",          "--disable-component-update",
                                "--disable-sync",     "--disable-dev-shm-usage",
                                "--user-data-dir=" + profile.string(),      "--window-size=1400,1100",
                                "--virtual-time-budget=5000"};
  argv.push_back(screenshot.empty() ? "--dump-dom" : "--screenshot=" + screenshot.string());
  argv.push_back(url);
  return testing::run_process(argv, 120s);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

// The <tbody> of table `id`.
std::string tbody(const std::string& dom, const std::string& id) {
  const auto at = dom.find("id=\"" + id + "\"");
  if (at == std::string::npos)
    return {};
  const auto begin = dom.find("<tbody>", at);
  const auto end = dom.find("</tbody>", begin);
  return begin == std::string::npos || end == std::string::npos ? std::string{} : dom.substr(begin, end - begin);
}

TEST(status_page, shows_the_live_job_in_a_browser_in_steady_state_and_during_a_recovery) {
  if (auto why = testing::missing_tool("chromium", "chromium")) GTEST_SKIP() << *why;
  // The recovery below is held open by a stopped rank until its agent misses its heartbeats
  // (timeouts.node): long enough for two browsers to start on a loaded machine.
  testing::local_cluster c{{.steps = 20000,
                            .extra = testing::token_files_toml,
                            .node_timeout = "30s"}};
  testing::write_token_files(c, admin_token, ro_token);
  c.start_all();
  ASSERT_TRUE(c.wait_step(5, 120s)) << c.log("n0");
  const auto where = http_address(c, "n0");
  ASSERT_FALSE(where.empty()) << c.log("n0");
  const std::string url = "http://" + where + "/?token=" + ro_token;
  testing::temp_dir profile{"rekindle-chromium"};

  // Without the token the page is refused; the admin token does not open it either.
  auto refused = browse("http://" + where + "/?token=" + admin_token, profile.path() / "a");
  EXPECT_EQ(refused.out.find("id=\"ranks\""), std::string::npos) << refused.out;

  // Steady state: the job, its four ranks, both nodes, a loss curve and events.
  auto steady = browse(url, profile.path() / "b");
  ASSERT_EQ(steady.exit_code, 0) << steady.err;
  const auto& dom = steady.out;
  EXPECT_NE(dom.find("data-state=\"running\""), std::string::npos) << dom;
  EXPECT_EQ(count(tbody(dom, "ranks"), "<tr>"), 4) << tbody(dom, "ranks");
  EXPECT_EQ(count(tbody(dom, "nodes"), "<tr>"), 2);
  EXPECT_NE(tbody(dom, "nodes").find(">up<"), std::string::npos);
  EXPECT_GE(count(tbody(dom, "events"), "<tr>"), 1);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom, m, std::regex{"id=\"loss-path\"[^>]*data-points=\"([0-9]+)\""})) << dom;
  EXPECT_GE(std::stoi(m[1]), 3);
  EXPECT_NE(dom.find("<div id=\"error\"></div>"), std::string::npos) << "the page read its data without an error";
  EXPECT_EQ(dom.find(admin_token), std::string::npos);
  auto shot = browse(url, profile.path() / "c", artifacts() / "status-page-steady.png");
  EXPECT_EQ(shot.exit_code, 0) << shot.err;
  EXPECT_GT(fs::file_size(artifacts() / "status-page-steady.png"), 10000u);

  // A recovery held open: rank 1 killed while rank 2 is stopped, so the rendezvous waits.
  const int stopped = c.rank_pid(2);
  const int killed = c.rank_pid(1);
  ASSERT_GT(stopped, 0);
  ASSERT_GT(killed, 0);
  ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
  ASSERT_EQ(::kill(killed, SIGKILL), 0);
  ASSERT_TRUE(c.wait_for([](const nlohmann::json& s) { return !s["recoveries"].empty(); }, 60s)) << c.log("n0");
  auto during_dom = browse(url, profile.path() / "e");
  auto during = browse(url, profile.path() / "d", artifacts() / "status-page-recovering.png");
  ::kill(stopped, SIGCONT);
  EXPECT_EQ(during.exit_code, 0) << during.err;
  EXPECT_NE(during_dom.out.find("data-recoveries=\"1\""), std::string::npos) << during_dom.out;
  EXPECT_NE(tbody(during_dom.out, "recoveries").find("recovering…"), std::string::npos)
      << tbody(during_dom.out, "recoveries");

  // Recovered: the row shows its phases.
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& s) { return !s["recoveries"].empty() && s["recoveries"][0]["done"].get<bool>(); }, 180s))
      << c.log("n0");
  auto after = browse(url, profile.path() / "f");
  const auto rows = tbody(after.out, "recoveries");
  EXPECT_NE(rows.find("data-done=\"true\""), std::string::npos) << rows;
  EXPECT_NE(rows.find("rank 1"), std::string::npos) << rows;
  EXPECT_NE(rows.find("p-respawn"), std::string::npos) << rows;
  EXPECT_NE(after.out.find("data-state=\"running\""), std::string::npos);
  (void)browse(url, profile.path() / "g", artifacts() / "status-page-recovered.png");
}

}  // namespace
}  // namespace rekindle
