#include "policy/hang_verdict.hpp"

#include <algorithm>

#include "common/text.hpp"

namespace rekindle::policy {

namespace {

std::string list_of(const std::vector<rank_id>& ranks) {
  std::string out;
  for (const auto r : ranks)
    out += (out.empty() ? "" : ",") + std::to_string(r.value());
  return out;
}

std::string ranks_phrase(const std::vector<rank_id>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i)
    out += (i == 0 ? "" : ", ") + std::to_string(ranks[i].value());
  return out;
}

std::string collective_name(std::uint64_t seq, collective_kind k) {
  return "collective #" + std::to_string(seq) + " (" + std::string{to_string(k)} + ")";
}

bool waits_in(const collective_position& p) {
  return p.phase == collective_phase::inside || p.phase == collective_phase::failed;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> hang_verdict::fields() const {
  return {{"collective", std::to_string(seq)},
          {"collective_kind", std::string{to_string(kind)}},
          {"waiting", list_of(waiting)},
          {"missing", list_of(missing)},
          {"unknown", list_of(unknown)},
          {"verdict", text}};
}

hang_verdict judge_hang(const std::vector<rank_report>& ranks, rank_id stuck) {
  hang_verdict v;
  for (const auto& r : ranks)
    if (r.at && waits_in(*r.at) && r.at->seq > v.seq) {
      v.seq = r.at->seq;
      v.kind = r.at->kind;
    }
  std::optional<collective_position> own;
  for (const auto& r : ranks) {
    if (r.rank == stuck)
      own = r.at;
    if (!r.at)
      v.unknown.push_back(r.rank);
    else if (v.seq > 0 && r.at->seq == v.seq && waits_in(*r.at))
      v.waiting.push_back(r.rank);
    else if (v.seq > 0 && r.at->seq < v.seq)
      v.missing.push_back(r.rank);
  }
  const auto who = "rank " + std::to_string(stuck.value());
  if (!own) {
    v.text = who + " reported no collective position";
  } else if (v.seq == 0) {
    v.text = own->phase == collective_phase::idle
                 ? who + " entered no collective this epoch"
                 : who + " left " + collective_name(own->seq, own->kind) + " " + format_duration(own->for_how_long) +
                       " before and no rank waits in a collective";
  } else if (own->seq < v.seq) {
    v.text = who + " never entered " + collective_name(v.seq, v.kind) + ": its last was #" +
             std::to_string(own->seq) + " (" + std::string{to_string(own->phase)} + " for " +
             format_duration(own->for_how_long) + ")";
  } else if (own->seq == v.seq && waits_in(*own)) {
    v.text = who + " is " + (own->phase == collective_phase::inside ? "inside " : "failed in ") +
             collective_name(v.seq, v.kind) + " for " + format_duration(own->for_how_long);
  } else {
    v.text = who + " is at collective #" + std::to_string(own->seq) + " (" + std::string{to_string(own->phase)} + ")";
  }
  if (v.seq > 0) {
    v.text += "; " + (v.waiting.empty() ? std::string{"no rank"} : ranks_phrase(v.waiting)) + " waited in " +
              collective_name(v.seq, v.kind);
    if (!v.missing.empty())
      v.text += ", " + ranks_phrase(v.missing) + " never entered it";
  }
  if (!v.unknown.empty())
    v.text += "; no position from " + ranks_phrase(v.unknown);
  return v;
}

}  // namespace rekindle::policy
