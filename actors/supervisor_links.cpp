// The supervisor's link check: the daemons probe each other in pairs, round after round as
// policy::link_screen plans, and a slow node is quarantined, a slow link reported.

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <sstream>

#include "actors/supervisor_actor.hpp"
#include "common/text.hpp"

namespace rekindle::actors {

namespace {

using json = nlohmann::json;

// A round whose probes have not all come back by then is judged with what came (the probes
// themselves give up after 20 s).
constexpr auto link_round_deadline = std::chrono::seconds{30};
constexpr std::uint32_t link_probe_repeats = 3;

std::string mbps_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

bool supervisor_actor::start_link_check(std::vector<std::uint32_t> nodes) {
  if (nodes.size() < 2 || link_check_)
    return false;
  link_check_ = link_check_run{++next_check_id_, policy::link_screen{std::move(nodes), ctx_->spec.checks.min_link, link_rotation_++},
                               ctx_->time->now() + link_round_deadline};
  send_link_round();
  return true;
}

void supervisor_actor::send_link_round() {
  auto& run = *link_check_;
  run.deadline = ctx_->time->now() + link_round_deadline;
  const auto id = run.id * 64 + run.screen.round_number();
  std::string pairs;
  for (const auto& p : run.screen.round()) {
    to_agent(node_id{p.from}, link_probe_request{id, node_id{p.to}, node_addresses_[p.to], ctx_->spec.checks.link_bytes,
                                                 link_probe_repeats});
    pairs += (pairs.empty() ? "" : ", ") + ctx_->spec.nodes[p.from].name + "->" + ctx_->spec.nodes[p.to].name;
  }
  spdlog::info("link check {} round {}: {}", run.id, run.screen.round_number(), pairs);
}

void supervisor_actor::on_link_report(const link_report& r) {
  if (!link_check_ || r.id != link_check_->id * 64 + link_check_->screen.round_number())
    return;
  const policy::link_pair pair{r.node.value(), r.peer.value()};
  link_check_->screen.record(pair, r.error.empty() ? std::optional{r.mbps} : std::nullopt, r.error);
  if (link_check_->screen.round_complete())
    end_link_round(false);
}

void supervisor_actor::end_link_round(bool timed_out) {
  if (!link_check_)
    return;
  if (timed_out)
    spdlog::warn("link check {} round {}: not every probe came back within {} s", link_check_->id,
                 link_check_->screen.round_number(), link_round_deadline.count());
  if (link_check_->screen.advance())
    return send_link_round();
  finish_link_check();
}

void supervisor_actor::finish_link_check() {
  const auto run = std::move(*link_check_);
  link_check_.reset();
  const auto& s = run.screen;
  const auto name = [&](std::uint32_t n) { return ctx_->spec.nodes[n].name; };
  const auto ref = s.reference();
  std::ostringstream text;
  text << "\nlinks (" << format_bytes(ctx_->spec.checks.link_bytes) << " probes, the fastest of " << link_probe_repeats
       << "; slow under " << ctx_->spec.checks.min_link << "x the best pair's " << mbps_text(ref) << " MB/s)\n";
  json probes = json::array();
  for (const auto& r : s.results()) {
    const bool slow = !r.mbps || *r.mbps < ctx_->spec.checks.min_link * ref;
    text << "  round " << r.round << "  " << name(r.pair.from) << " -> " << name(r.pair.to) << "  "
         << (r.mbps ? mbps_text(*r.mbps) + " MB/s" : r.error) << (slow ? "  SLOW" : "") << "\n";
    probes.push_back({{"round", r.round},
                      {"from", name(r.pair.from)},
                      {"to", name(r.pair.to)},
                      {"mbps", r.mbps.value_or(0.0)},
                      {"error", r.error},
                      {"slow", slow}});
  }
  json verdicts = json::array();
  std::size_t quarantined = 0;
  for (const auto& v : s.verdicts()) {
    std::vector<std::pair<std::string, std::string>> fields{{"check", "link"},
                                                            {"verdict", policy::to_string(v.what)},
                                                            {"node", name(v.a)},
                                                            {"peer", name(v.b)},
                                                            {"reference_mbps", mbps_text(v.reference)}};
    if (v.mbps)
      fields.emplace_back("mbps", mbps_text(*v.mbps));
    std::string said;
    switch (v.what) {
      case policy::link_verdict::kind::node:
        said = name(v.a) + " is slow on every link (with " + name(v.b) + ", a fast node: " + v.detail + ")";
        ++quarantined;
        execute(policy_.quarantine(node_id{v.a}, "link", said, fields));
        break;
      case policy::link_verdict::kind::link:
        said = "the link " + name(v.a) + "-" + name(v.b) + " is slow (" + v.detail + "); both ends are fast with other nodes";
        event("link_slow", said, {}, node_id{v.a}, fields);
        break;
      case policy::link_verdict::kind::pair:
        said = "the pair " + name(v.a) + "-" + name(v.b) + " is slow (" + v.detail +
               "); no fast node to tell the node from the link";
        event("link_slow", said, {}, node_id{v.a}, fields);
        break;
    }
    text << "  " << said << "\n";
    verdicts.push_back({{"verdict", policy::to_string(v.what)},
                        {"node", name(v.a)},
                        {"peer", name(v.b)},
                        {"mbps", v.mbps.value_or(0.0)},
                        {"reference_mbps", v.reference},
                        {"detail", said}});
  }
  for (const auto n : s.cleared())
    execute(policy_.release(node_id{n}, "link", "its links are fast again (best " + mbps_text(ref) + " MB/s)"));
  if (verdicts.empty())
    text << "  every link probed is fast\n";
  spdlog::info("link check {}: {} probes, best {} MB/s, {} verdict(s)", run.id, s.results().size(), mbps_text(ref),
               verdicts.size());
  link_text_ = text.str();
  link_json_ = json{{"probes", probes}, {"verdicts", verdicts}, {"reference_mbps", ref}, {"quarantined", quarantined}}.dump();
  if (pending_check_ && pending_check_->nodes_done)
    answer_check();
}

}  // namespace rekindle::actors
