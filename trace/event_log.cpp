#include "trace/event_log.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "common/text.hpp"

namespace rekindle::trace {

namespace {

std::string field(const logged_event& e, const std::string& key) {
  const auto it = e.fields.find(key);
  return it == e.fields.end() ? std::string{} : it->second;
}

int as_int(const std::string& text, int fallback) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  return text.empty() || end == nullptr || *end != '\0' ? fallback : static_cast<int>(v);
}

double as_double(const std::string& text, double fallback) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  return text.empty() || end == nullptr || *end != '\0' ? fallback : v;
}

}  // namespace

expected<fault_trace> trace_from_event_log(const std::vector<logged_event>& events, trace_header header) {
  const auto start = std::find_if(events.begin(), events.end(), [](const logged_event& e) { return e.kind == "started"; });
  if (start == events.end())
    return status{errc::not_found, "the event log has no 'started' event: the job never trained"};
  const double origin = start->unix_s;
  fault_trace t;
  t.header = std::move(header);
  // Ranks and nodes whose next exit or loss is the consequence of a fault already written.
  std::set<std::uint32_t> rank_pending;
  std::set<std::string> node_pending;
  // Open slow drills: rank → index of its event.
  std::map<std::uint32_t, std::size_t> slowed;
  double last = 0;
  for (auto it = start; it != events.end(); ++it) {
    const auto& e = *it;
    // Seconds from the start, to the millisecond, never backwards (a wall clock may step back).
    const double at = std::max(last, std::round((e.unix_s - origin) * 1000.0) / 1000.0);
    fault_event f;
    f.at = at;
    bool add = false;
    if (e.kind == "fault_injected") {
      const auto fault = field(e, "fault");
      if (fault == "kill" && e.rank) {
        f.kind = fault_kind::kill;
        f.target = fault_target::of_rank(*e.rank);
        f.signal = as_int(field(e, "signal"), 9);
        rank_pending.insert(*e.rank);
        add = true;
      } else if (fault == "hang" && e.rank) {
        f.kind = fault_kind::hang;
        f.target = fault_target::of_rank(*e.rank);
        rank_pending.insert(*e.rank);
        add = true;
      } else if (fault == "slow" && e.rank) {
        const double factor = as_double(field(e, "factor"), 1.0);
        if (const auto open = slowed.find(*e.rank); open != slowed.end()) {
          // A new factor ends the spell before it.
          auto& before = t.events[open->second];
          before.duration = at - *before.at;
          slowed.erase(open);
        }
        if (factor > 1.0) {
          f.kind = fault_kind::slow;
          f.target = fault_target::of_rank(*e.rank);
          f.factor = factor;
          slowed[*e.rank] = t.events.size();
          add = true;
        }
      } else if (fault == "node_down" && e.node) {
        f.kind = fault_kind::node_down;
        f.target = fault_target::of_node(*e.node);
        node_pending.insert(*e.node);
        add = true;
      } else if (fault == "partition") {
        const auto link = field(e, "link");
        const auto ends = split(link, ',');
        if (ends.size() == 2) {
          f.kind = fault_kind::partition;
          f.target = fault_target::of_link(std::string{ends[0]}, std::string{ends[1]});
          f.duration = as_double(field(e, "duration_s"), 10.0);
          node_pending.insert(std::string{ends[0]});
          node_pending.insert(std::string{ends[1]});
          add = true;
        }
      }
    } else if ((e.kind == "rank_hung" || e.kind == "rank_unresponsive") && e.rank) {
      // Found stuck (or stopped) and killed by the supervisor: a hang, unless one was injected.
      if (rank_pending.insert(*e.rank).second) {
        f.kind = fault_kind::hang;
        f.target = fault_target::of_rank(*e.rank);
        add = true;
      }
    } else if (e.kind == "rank_exited" && e.rank) {
      if (rank_pending.erase(*e.rank) == 0) {
        const int sig = as_int(field(e, "signal"), 0);
        f.target = fault_target::of_rank(*e.rank);
        if (sig != 0) {
          f.kind = fault_kind::kill;
          f.signal = sig;
        } else {
          f.kind = fault_kind::crash;
          f.exit_code = as_int(field(e, "exit_code"), 1);
        }
        add = true;
      }
    } else if (e.kind == "node_lost" && e.node) {
      if (node_pending.erase(*e.node) == 0) {
        f.kind = fault_kind::node_down;
        f.target = fault_target::of_node(*e.node);
        add = true;
      }
    }
    if (add) {
      t.events.push_back(std::move(f));
      last = at;
    }
  }
  if (!t.header.duration) {
    const double end = std::max(last, std::round((events.back().unix_s - origin) * 1000.0) / 1000.0);
    if (end > 0)
      t.header.duration = end;
  }
  return t;
}

}  // namespace rekindle::trace
