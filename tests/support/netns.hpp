#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rekindle::testing {

/// Hosts for multi-host tests on one machine: each a Linux network namespace with its own address
/// on a bridge, joined by a veth pair (iproute2's `ip`). The machine itself has an address on the
/// bridge too, so a test reaches every host. Names and the subnet are unique per test process.
/// The destructor kills every process left in the namespaces and removes them, the links and the
/// bridge, even when the test fails.
///
/// Faults done to the network itself: a host's link down and up, packet loss on a host's link
/// (nftables' random drop, both directions), a host's link slowed to a rate (tc's token bucket
/// filter) or given latency (tc netem, where the kernel has it), and every process of a host
/// killed at once.
class netns_hosts {
 public:
  /// Why hosts cannot be made here (not root, no `ip`, namespaces refused), or nullopt.
  static std::optional<std::string> unavailable();

  explicit netns_hosts(int count);
  ~netns_hosts();
  netns_hosts(const netns_hosts&) = delete;
  netns_hosts& operator=(const netns_hosts&) = delete;

  [[nodiscard]] int size() const noexcept { return count_; }
  /// Host i's namespace, address, and the command prefix that runs a program there.
  [[nodiscard]] std::string ns(int i) const;
  [[nodiscard]] std::string address(int i) const;
  [[nodiscard]] std::vector<std::string> exec(int i) const;
  /// The device name inside every host ("eth0").
  [[nodiscard]] static std::string device() { return "eth0"; }

  /// Host i's link to the bridge goes down (its cable pulled) or comes back.
  void link_down(int i);
  void link_up(int i);
  /// `percent` of host i's packets are dropped at random, in and out (0: none).
  void loss(int i, int percent);
  /// Why loss cannot be set here (no nft, or nf_tables refused), or nullopt.
  [[nodiscard]] std::optional<std::string> loss_unavailable() const;
  /// Host i's outgoing traffic leaves at no more than `mbit` megabits per second (tc tbf on its
  /// device; 0: full speed again).
  void rate(int i, int mbit);
  /// Why rate() cannot work here (no tc, or the kernel has no tbf), or nullopt.
  [[nodiscard]] std::optional<std::string> rate_unavailable() const;
  /// Every packet host i sends waits `ms` milliseconds first (tc netem; 0: none).
  void delay(int i, int ms);
  /// Why delay() cannot work here (no tc, or the kernel has no netem), or nullopt.
  [[nodiscard]] std::optional<std::string> delay_unavailable() const;
  /// Bytes that crossed host i's link, both ways, so far.
  [[nodiscard]] std::uint64_t link_bytes(int i) const;
  /// Bytes host i has sent over its link so far.
  [[nodiscard]] std::uint64_t sent_bytes(int i) const;
  /// SIGKILL to every process in host i's namespace; how many there were.
  int kill_all(int i);

 private:
  int count_;
  std::string tag_;
  std::string subnet_;  // "10.A.B."
  bool made_bridge_ = false;
  std::vector<bool> made_;
};

}  // namespace rekindle::testing
