#pragma once

// Which ranks a hang holds up, and which one holds them: built from the collective positions the
// ranks report in their heartbeats when the supervisor declares a rank hung.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/collective_position.hpp"
#include "common/ids.hpp"

namespace rekindle::policy {

/// One rank of the placement with the latest position it reported in the current epoch.
struct rank_report {
  rank_id rank;
  std::optional<collective_position> at;
};

struct hang_verdict {
  /// The collective the ranks wait (or failed) in; 0 when no rank waits in one.
  std::uint64_t seq = 0;
  collective_kind kind = collective_kind::none;
  /// Ranks inside collective `seq`, or whose collective `seq` failed: they wait for the others.
  std::vector<rank_id> waiting;
  /// Ranks that never entered collective `seq`: the ones the others wait for.
  std::vector<rank_id> missing;
  /// Ranks that reported no position this epoch.
  std::vector<rank_id> unknown;
  /// Ranks inside (or failed in) a point-to-point call, with the rank it waits for: a pipeline
  /// stage waiting for its neighbour's activations or gradients.
  struct p2p_wait {
    rank_id rank;
    rank_id peer;
    collective_kind kind = collective_kind::recv;
    collective_phase phase = collective_phase::inside;
    std::chrono::nanoseconds for_how_long{0};
  };
  std::vector<p2p_wait> p2p_waiting;
  /// One sentence for the event log, naming the stuck rank's own position.
  std::string text;

  /// The verdict as event fields: collective, collective_kind, waiting, missing, unknown (rank lists
  /// "0,1,3", runs of three or more as "5-9", at most 24 items and then "and N more"), p2p_waiting
  /// ("0<1,3<2": rank < the rank it waits for, at most 24), verdict (the text).
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> fields() const;
};

/// The verdict for `stuck`, the rank declared hung, among `ranks`.
hang_verdict judge_hang(const std::vector<rank_report>& ranks, rank_id stuck);
/// What every verdict among `ranks` shares: the collective, who waits, who never entered, who
/// said nothing (`text` is the sentence's common tail). One pass, for a whole world judged at once.
hang_verdict survey_hang(const std::vector<rank_report>& ranks);
/// The verdict for `stuck`, whose own position is `own`, from a survey of every rank.
hang_verdict judge_hang(const hang_verdict& survey, const std::optional<collective_position>& own, rank_id stuck);
/// judge_hang(survey, own, stuck).text alone: no copy of the survey's rank lists, for a world
/// whose every rank is judged against one survey.
std::string hang_text(const hang_verdict& survey, const std::optional<collective_position>& own, rank_id stuck);

}  // namespace rekindle::policy
