#include "tests/support/netns.hpp"

#include <signal.h>
#include <cerrno>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tests/support/process.hpp"

namespace rekindle::testing {

namespace {

using namespace std::chrono_literals;

process_result ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, 30s);
}

// Runs a command that must succeed, failing the test (not aborting it) when it does not.
void must(const std::vector<std::string>& argv) {
  auto r = run_process(argv, 30s);
  if (r.exit_code != 0) {
    std::string line;
    for (const auto& w : argv)
      line += w + " ";
    ADD_FAILURE() << "'" << line << "' failed: " << r.out << r.err;
  }
}

}  // namespace

std::optional<std::string> netns_hosts::unavailable() {
  if (::geteuid() != 0)
    return "multi-host tests make network namespaces, which needs root";
  if (auto why = missing_tool("ip", "iproute2"))
    return why;
  const std::string probe = "rkprobe" + std::to_string(::getpid());
  auto r = ip({"netns", "add", probe});
  if (r.exit_code != 0)
    return "network namespaces cannot be made here ('ip netns add' said: " + r.err + ")";
  (void)ip({"netns", "del", probe});
  return std::nullopt;
}

// Hosts a test process killed with SIGKILL left behind (its destructor never ran): namespaces
// "rk<pid>h<i>" and bridges "rk<pid>br" of a process that is gone.
static void remove_orphans() {
  auto gone = [](const std::string& name, const std::string& suffix_start) {
    if (name.rfind("rk", 0) != 0)
      return false;
    const auto end = name.find(suffix_start, 2);
    if (end == std::string::npos || end == 2)
      return false;
    const auto digits = name.substr(2, end - 2);
    if (digits.find_first_not_of("0123456789") != std::string::npos)
      return false;
    return ::kill(std::stoi(digits), 0) != 0 && errno == ESRCH;
  };
  std::istringstream spaces(ip({"netns", "list"}).out);
  for (std::string line; std::getline(spaces, line);) {
    const auto name = line.substr(0, line.find(' '));
    if (!gone(name, "h"))
      continue;
    std::istringstream pids(ip({"netns", "pids", name}).out);
    for (pid_t p; pids >> p;)
      (void)::kill(p, SIGKILL);
    (void)ip({"netns", "del", name});
  }
  std::istringstream links(ip({"-o", "link", "show", "type", "bridge"}).out);
  for (std::string line; std::getline(links, line);) {
    // "12: rk123br: <...>"
    const auto a = line.find(": ");
    const auto b = line.find(':', a + 2);
    if (a == std::string::npos || b == std::string::npos)
      continue;
    const auto name = line.substr(a + 2, b - a - 2);
    if (name.size() > 4 && name.ends_with("br") && gone(name, "br"))
      (void)ip({"link", "del", name});
  }
}

netns_hosts::netns_hosts(int count) : count_(count), made_(static_cast<std::size_t>(count), false) {
  remove_orphans();
  const int pid = static_cast<int>(::getpid());
  tag_ = "rk" + std::to_string(pid % 100000);
  subnet_ = "10." + std::to_string(100 + (pid / 250) % 150) + "." + std::to_string(pid % 250) + ".";
  must({"ip", "link", "add", tag_ + "br", "type", "bridge"});
  made_bridge_ = true;
  must({"ip", "addr", "add", subnet_ + "254/24", "dev", tag_ + "br"});
  must({"ip", "link", "set", tag_ + "br", "up"});
  for (int i = 0; i < count_; ++i) {
    const auto link = tag_ + "v" + std::to_string(i);
    must({"ip", "netns", "add", ns(i)});
    made_[static_cast<std::size_t>(i)] = true;
    must({"ip", "link", "add", link, "type", "veth", "peer", "name", device(), "netns", ns(i)});
    must({"ip", "link", "set", link, "master", tag_ + "br", "up"});
    must({"ip", "netns", "exec", ns(i), "ip", "addr", "add", address(i) + "/24", "dev", device()});
    must({"ip", "netns", "exec", ns(i), "ip", "link", "set", device(), "up"});
    must({"ip", "netns", "exec", ns(i), "ip", "link", "set", "lo", "up"});
  }
}

netns_hosts::~netns_hosts() {
  for (int i = 0; i < count_; ++i) {
    if (!made_[static_cast<std::size_t>(i)])
      continue;
    (void)kill_all(i);
    (void)ip({"netns", "del", ns(i)});  // its end of the veth pair goes with it, and so the pair
  }
  if (made_bridge_)
    (void)ip({"link", "del", tag_ + "br"});
}

std::string netns_hosts::ns(int i) const { return tag_ + "h" + std::to_string(i); }

std::string netns_hosts::address(int i) const { return subnet_ + std::to_string(i + 1); }

std::vector<std::string> netns_hosts::exec(int i) const { return {"ip", "netns", "exec", ns(i)}; }

void netns_hosts::link_down(int i) { must({"ip", "link", "set", tag_ + "v" + std::to_string(i), "down"}); }

void netns_hosts::link_up(int i) { must({"ip", "link", "set", tag_ + "v" + std::to_string(i), "up"}); }

std::optional<std::string> netns_hosts::loss_unavailable() const {
  if (auto why = missing_tool("nft", "nftables"))
    return why;
  auto r = run_process({"ip", "netns", "exec", ns(0), "nft", "list", "ruleset"}, 30s);
  if (r.exit_code != 0)
    return "nftables is refused here: " + r.err;
  return std::nullopt;
}

void netns_hosts::loss(int i, int percent) {
  auto x = exec(i);
  auto nft = [&](std::vector<std::string> args) {
    auto argv = x;
    argv.push_back("nft");
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  };
  (void)run_process(nft({"delete", "table", "inet", "rkloss"}), 30s);
  if (percent <= 0)
    return;
  must(nft({"add", "table", "inet", "rkloss"}));
  for (const auto* hook : {"input", "output"}) {
    must(nft({"add", "chain", "inet", "rkloss", hook, std::string{"{ type filter hook "} + hook + " priority 0; }"}));
    must(nft({"add", "rule", "inet", "rkloss", hook, "oifname", "!=", "lo", "iifname", "!=", "lo", "numgen", "random",
              "mod", "100", "<", std::to_string(percent), "drop"}));
  }
}

namespace {

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

// Why the root qdisc `args` cannot be put on a scratch namespace's loopback, or nullopt: a probe
// for what the kernel has.
std::optional<std::string> qdisc_unavailable(const std::vector<std::string>& args) {
  if (auto why = missing_tool("tc", "iproute2"))
    return why;
  const std::string probe = "rkq" + std::to_string(::getpid());
  if (ip({"netns", "add", probe}).exit_code != 0)
    return std::string{"no scratch namespace for the qdisc probe"};
  std::vector<std::string> argv{"ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root"};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = run_process(argv, 30s);
  (void)ip({"netns", "del", probe});
  if (r.exit_code != 0)
    return "this kernel refuses the '" + args.front() + "' qdisc (tc said: " + trimmed(r.err) + ")";
  return std::nullopt;
}

// Replaces host `ns`'s root qdisc on `dev` by `args`, or removes it when `args` is empty.
void set_root_qdisc(const std::vector<std::string>& exec, const std::string& dev, const std::vector<std::string>& args) {
  auto tc = exec;
  tc.insert(tc.end(), {"tc", "qdisc", "del", "dev", dev, "root"});
  (void)run_process(tc, 30s);  // none there yet is fine
  if (args.empty())
    return;
  tc = exec;
  tc.insert(tc.end(), {"tc", "qdisc", "add", "dev", dev, "root"});
  tc.insert(tc.end(), args.begin(), args.end());
  must(tc);
}

}  // namespace

std::optional<std::string> netns_hosts::rate_unavailable() const {
  return qdisc_unavailable({"tbf", "rate", "10mbit", "burst", "32kbit", "latency", "50ms"});
}

void netns_hosts::rate(int i, int mbit) {
  if (mbit <= 0)
    return set_root_qdisc(exec(i), device(), {});
  // A burst of a few milliseconds' worth and a queue of a quarter second's: TCP sees a slow link,
  // not one that drops everything above the rate.
  const auto burst = std::to_string(std::max(4, mbit * 4)) + "kbit";
  set_root_qdisc(exec(i), device(), {"tbf", "rate", std::to_string(mbit) + "mbit", "burst", burst, "latency", "250ms"});
}

std::optional<std::string> netns_hosts::delay_unavailable() const { return qdisc_unavailable({"netem", "delay", "1ms"}); }

void netns_hosts::delay(int i, int ms) {
  if (ms <= 0)
    return set_root_qdisc(exec(i), device(), {});
  set_root_qdisc(exec(i), device(), {"netem", "delay", std::to_string(ms) + "ms"});
}

namespace {

// A counter of the bridge's end of host i's veth pair (what the host sends, it receives).
std::uint64_t veth_counter(const std::string& link, const char* name) {
  std::ifstream f("/sys/class/net/" + link + "/statistics/" + name);
  std::uint64_t n = 0;
  return f >> n ? n : 0;
}

}  // namespace

std::uint64_t netns_hosts::link_bytes(int i) const {
  const auto link = tag_ + "v" + std::to_string(i);
  return veth_counter(link, "rx_bytes") + veth_counter(link, "tx_bytes");
}

std::uint64_t netns_hosts::sent_bytes(int i) const { return veth_counter(tag_ + "v" + std::to_string(i), "rx_bytes"); }

int netns_hosts::kill_all(int i) {
  auto r = ip({"netns", "pids", ns(i)});
  int n = 0;
  std::istringstream in(r.out);
  for (pid_t pid; in >> pid;)
    if (::kill(pid, SIGKILL) == 0)
      ++n;
  return n;
}

}  // namespace rekindle::testing
