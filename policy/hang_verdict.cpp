#include "policy/hang_verdict.hpp"

#include <algorithm>

#include "common/text.hpp"

namespace rekindle::policy {

namespace {

// The ranks as "0,2,5-9" (runs of three or more as a range), at most `max_items` items and then
// how many more: a verdict over 16,384 ranks stays a line, not 100 KB a rank.
std::string compact(const std::vector<rank_id>& ranks, std::string_view sep) {
  constexpr std::size_t max_items = 24;
  std::string out;
  std::size_t items = 0, i = 0;
  while (i < ranks.size()) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1].value() == ranks[j].value() + 1)
      ++j;
    if (items == max_items) {
      out += std::string{sep} + "and " + std::to_string(ranks.size() - i) + " more";
      break;
    }
    if (!out.empty())
      out += sep;
    if (j - i >= 2) {
      out += std::to_string(ranks[i].value()) + "-" + std::to_string(ranks[j].value());
      i = j + 1;
    } else {
      out += std::to_string(ranks[i].value());
      ++i;
    }
    ++items;
  }
  return out;
}

std::string list_of(const std::vector<rank_id>& ranks) { return compact(ranks, ","); }

std::string ranks_phrase(const std::vector<rank_id>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + compact(ranks, ", ");
}

std::string collective_name(std::uint64_t seq, collective_kind k) {
  return "collective #" + std::to_string(seq) + " (" + std::string{to_string(k)} + ")";
}

bool waits_in(const collective_position& p) {
  return p.phase == collective_phase::inside || p.phase == collective_phase::failed;
}

bool waits_p2p(const collective_position& p) {
  return p.p2p.kind != collective_kind::none && p.p2p.peer >= 0 &&
         (p.p2p.phase == collective_phase::inside || p.p2p.phase == collective_phase::failed);
}

// "recv from rank 1 for 12 s" / "failed in send to rank 3".
std::string p2p_phrase(collective_kind k, collective_phase phase, std::int32_t peer, std::chrono::nanoseconds d) {
  return std::string{phase == collective_phase::failed ? "failed in " : "inside "} + std::string{to_string(k)} +
         (k == collective_kind::send ? " to rank " : " from rank ") + std::to_string(peer) + " for " + format_duration(d);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> hang_verdict::fields() const {
  return {{"collective", std::to_string(seq)},
          {"collective_kind", std::string{to_string(kind)}},
          {"waiting", list_of(waiting)},
          {"missing", list_of(missing)},
          {"unknown", list_of(unknown)},
          {"p2p_waiting", [&] {
             std::string out;
             for (std::size_t i = 0; i < p2p_waiting.size() && i < 24; ++i)
               out += (i ? "," : "") + std::to_string(p2p_waiting[i].rank.value()) + "<" +
                      std::to_string(p2p_waiting[i].peer.value());
             if (p2p_waiting.size() > 24)
               out += ",and " + std::to_string(p2p_waiting.size() - 24) + " more";
             return out;
           }()},
          {"verdict", text}};
}

hang_verdict survey_hang(const std::vector<rank_report>& ranks) {
  hang_verdict v;
  for (const auto& r : ranks)
    if (r.at && waits_in(*r.at) && r.at->seq > v.seq) {
      v.seq = r.at->seq;
      v.kind = r.at->kind;
    }
  for (const auto& r : ranks) {
    if (!r.at)
      v.unknown.push_back(r.rank);
    else if (v.seq > 0 && r.at->seq == v.seq && waits_in(*r.at))
      v.waiting.push_back(r.rank);
    else if (v.seq > 0 && r.at->seq < v.seq)
      v.missing.push_back(r.rank);
  }
  if (v.seq > 0) {
    v.text += "; " + (v.waiting.empty() ? std::string{"no rank"} : ranks_phrase(v.waiting)) + " waited in " +
              collective_name(v.seq, v.kind);
    if (!v.missing.empty())
      v.text += ", " + ranks_phrase(v.missing) + " never entered it";
  }
  for (const auto& r : ranks)
    if (r.at && waits_p2p(*r.at))
      v.p2p_waiting.push_back({r.rank, rank_id{static_cast<std::uint32_t>(r.at->p2p.peer)}, r.at->p2p.kind,
                               r.at->p2p.phase, r.at->p2p.for_how_long});
  // The pipeline's waits: who waits for whom, a few named.
  constexpr std::size_t named = 8;
  for (std::size_t i = 0; i < v.p2p_waiting.size() && i < named; ++i) {
    const auto& w = v.p2p_waiting[i];
    v.text += (i == 0 ? "; point to point, rank " : ", rank ") + std::to_string(w.rank.value()) + " is " +
              p2p_phrase(w.kind, w.phase, static_cast<std::int32_t>(w.peer.value()), w.for_how_long);
  }
  if (v.p2p_waiting.size() > named)
    v.text += " and " + std::to_string(v.p2p_waiting.size() - named) + " more";
  if (!v.unknown.empty())
    v.text += "; no position from " + ranks_phrase(v.unknown);
  return v;
}

std::string hang_text(const hang_verdict& survey, const std::optional<collective_position>& own, rank_id stuck) {
  const auto& v = survey;
  std::string text;
  const auto who = "rank " + std::to_string(stuck.value());
  if (!own) {
    text = who + " reported no collective position";
  } else if (v.seq == 0) {
    text = own->phase == collective_phase::idle
                 ? who + " entered no collective this epoch"
                 : who + " left " + collective_name(own->seq, own->kind) + " " + format_duration(own->for_how_long) +
                       " before and no rank waits in a collective";
  } else if (own->seq < v.seq) {
    text = who + " never entered " + collective_name(v.seq, v.kind) + ": its last was #" +
             std::to_string(own->seq) + " (" + std::string{to_string(own->phase)} + " for " +
             format_duration(own->for_how_long) + ")";
  } else if (own->seq == v.seq && waits_in(*own)) {
    text = who + " is " + (own->phase == collective_phase::inside ? "inside " : "failed in ") +
             collective_name(v.seq, v.kind) + " for " + format_duration(own->for_how_long);
  } else {
    text = who + " is at collective #" + std::to_string(own->seq) + " (" + std::string{to_string(own->phase)} + ")";
  }
  // A pipeline stage: how many wait for it point to point.
  std::size_t waited_on = 0;
  for (const auto& w : v.p2p_waiting)
    waited_on += w.peer == stuck ? 1 : 0;
  if (waited_on > 0)
    text += "; " + std::to_string(waited_on) + (waited_on == 1 ? " rank waits" : " ranks wait") +
            " point to point for it";
  text += survey.text;
  return text;
}

hang_verdict judge_hang(const hang_verdict& survey, const std::optional<collective_position>& own, rank_id stuck) {
  hang_verdict v = survey;
  v.text = hang_text(survey, own, stuck);
  return v;
}

hang_verdict judge_hang(const std::vector<rank_report>& ranks, rank_id stuck) {
  std::optional<collective_position> own;
  for (const auto& r : ranks)
    if (r.rank == stuck)
      own = r.at;
  return judge_hang(survey_hang(ranks), own, stuck);
}

}  // namespace rekindle::policy
