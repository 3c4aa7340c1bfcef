#pragma once

// The link check's plan and verdict: nodes probe each other in pairs, and a slow pair is told
// apart from a slow node by a second round that pairs each of its ends with a node whose own pair
// was fast. Pure: the probes are sent and timed elsewhere (the daemons' checkpoint actors), the
// verdicts go to the supervisor, which quarantines a slow node and reports a slow link.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rekindle::policy {

/// One probe: node `from` sends to node `to` and times the answer.
struct link_pair {
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  friend bool operator==(const link_pair&, const link_pair&) = default;
};

/// What a probe found: MB/s, or why it failed.
struct link_result {
  link_pair pair;
  /// The round it ran in (1 is the first pairing; later rounds re-pair the ends of slow pairs).
  std::uint32_t round = 1;
  std::optional<double> mbps;
  std::string error;
};

struct link_verdict {
  enum class kind : std::uint8_t {
    /// A node whose links are slow with every partner: `a` is the node.
    node,
    /// The link between `a` and `b`: both ends are fast with other partners.
    link,
    /// A slow pair with no fast node to re-pair its ends with: `a`, `b` or the link between them.
    pair,
  };
  kind what = kind::pair;
  std::uint32_t a = 0;
  std::uint32_t b = 0;
  /// The figure that failed (absent when the probe failed), and the reference it was held to.
  std::optional<double> mbps;
  double reference = 0;
  /// Why, for people: "0.9 MB/s, 0.01x the best pair's 96.0 MB/s" or the probe's error.
  std::string detail;
};

/// Plans the rounds of one link check over `nodes` and judges them. A probe is slow when it failed
/// or reached less than `min_link` times the best probe of the check (the reference: noise on a
/// busy machine only ever slows a probe down).
///
/// Round 1 pairs the nodes by the `rotation`-th round of a round-robin schedule (rotation 0 pairs
/// them in order, (0,1), (2,3), ...): checks that count their rotation up probe every link once in
/// every n-1 checks (n rounded up to even). An odd node out waits for round 2. Then
/// each end of a slow pair, and the odd node, is paired with an end of a fast pair, as many rounds
/// as it takes to keep every round's pairs disjoint (a node probes one partner at a time). A node
/// slow again with a fast partner is the slow one; a pair whose two ends are both fast elsewhere
/// is a slow link.
class link_screen {
 public:
  link_screen(std::vector<std::uint32_t> nodes, double min_link, std::uint64_t rotation = 0);

  /// The probes of the current round (empty once done()).
  [[nodiscard]] const std::vector<link_pair>& round() const noexcept { return round_; }
  [[nodiscard]] std::uint32_t round_number() const noexcept { return round_number_; }
  /// A probe of the current round came back; false (and ignored) for one that is not asked.
  bool record(const link_pair& p, std::optional<double> mbps, std::string error = {});
  /// Whether every probe of the current round came back.
  [[nodiscard]] bool round_complete() const noexcept;
  /// Moves to the next round, planned from what came back; false when there is none (done()).
  /// Probes of the current round that never came back count as failed ("no answer").
  bool advance();
  [[nodiscard]] bool done() const noexcept { return done_; }

  /// Every slow node, slow link and undecided pair; complete once done().
  [[nodiscard]] std::vector<link_verdict> verdicts() const;
  /// The best probe's MB/s (0 before any).
  [[nodiscard]] double reference() const noexcept;
  [[nodiscard]] const std::vector<link_result>& results() const noexcept { return results_; }
  /// Nodes that were fast with some partner and slow with none: cleared by this check.
  [[nodiscard]] std::vector<std::uint32_t> cleared() const;

 private:
  [[nodiscard]] bool slow(const link_result& r) const;
  [[nodiscard]] const link_result* result_of(std::uint32_t round, std::uint32_t node) const;
  void plan_repairs();
  void take_round();

  std::vector<std::uint32_t> nodes_;
  double min_link_;
  std::vector<link_pair> round_;
  std::uint32_t round_number_ = 1;
  std::vector<link_result> results_;
  /// Probes wanted after round 1, taken into rounds of disjoint pairs.
  std::vector<link_pair> wanted_;
  std::optional<std::uint32_t> odd_;
  bool done_ = false;
};

/// "node", "link", "pair".
[[nodiscard]] const char* to_string(link_verdict::kind k) noexcept;

}  // namespace rekindle::policy
