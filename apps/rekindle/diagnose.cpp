// rekindle diagnose hang|stragglers: what the supervisor's detectors found, from the event log.

#include <iostream>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/rekindle/admin_call.hpp"
#include "apps/rekindle/commands.hpp"

namespace rekindle::apps {

namespace {

std::string field(const nlohmann::json& e, const char* name) {
  const auto f = e.value("fields", nlohmann::json::object());
  return f.contains(name) && f[name].is_string() ? f[name].get<std::string>() : std::string{};
}

std::string or_none(const std::string& s) { return s.empty() ? "none" : s; }

// One hang: the rank_hung event and the rank_stack event of the same rank that followed it.
struct hang {
  nlohmann::json verdict;
  std::optional<nlohmann::json> stack;
};

std::vector<hang> hangs_in(const std::vector<nlohmann::json>& events) {
  std::vector<hang> out;
  for (const auto& e : events) {
    const auto kind = e.value("kind", "");
    if (kind == "rank_hung") {
      out.push_back({e, std::nullopt});
    } else if (kind == "rank_stack" && e.contains("rank")) {
      for (auto it = out.rbegin(); it != out.rend(); ++it)
        if (!it->stack && it->verdict.contains("rank") && it->verdict["rank"] == e["rank"]) {
          it->stack = e;
          break;
        }
    }
  }
  return out;
}

void print_hang(const hang& h, bool with_stack) {
  const auto& v = h.verdict;
  std::cout << "hang of rank " << (v.contains("rank") ? std::to_string(v["rank"].get<std::uint32_t>()) : "?");
  if (v.contains("node"))
    std::cout << " on " << v["node"].get<std::string>();
  std::cout << ", declared " << v.value("time", "") << " in epoch " << v.value("epoch", 0) << " (event "
            << v.value("seq", 0) << ")\n";
  std::cout << "  " << v.value("detail", "") << "\n";
  const auto seq = field(v, "collective");
  if (!seq.empty() && seq != "0")
    std::cout << "  collective #" << seq << " (" << field(v, "collective_kind") << "): waiting in it: "
              << or_none(field(v, "waiting")) << "; never entered it: " << or_none(field(v, "missing")) << "\n";
  if (!field(v, "p2p_waiting").empty())
    std::cout << "  point to point, rank < the rank it waits for: " << field(v, "p2p_waiting") << "\n";
  if (!field(v, "unknown").empty())
    std::cout << "  no position reported by: " << field(v, "unknown") << "\n";
  if (!h.stack) {
    std::cout << "  stack: none recorded (the agent sends it after the kill; an older daemon takes none)\n";
    return;
  }
  const auto stack = field(*h.stack, "stack");
  if (stack.empty()) {
    std::cout << "  stack: " << h.stack->value("detail", "") << "\n";
    return;
  }
  if (!with_stack) {
    std::cout << "  stack: taken before the kill (rekindle diagnose hang --stack prints it)\n";
    return;
  }
  std::cout << "  stack, taken before the kill:\n";
  std::size_t begin = 0;
  while (begin < stack.size()) {
    const auto end = std::min(stack.find('\n', begin), stack.size());
    std::cout << "    " << stack.substr(begin, end - begin) << "\n";
    begin = end + 1;
  }
}

int diagnose_hang(const connection_options& o, bool all, bool with_stack) {
  int code = 0;
  const auto events = read_event_log(o, nullptr, code);
  if (!events)
    return code;
  const auto hangs = hangs_in(*events);
  if (o.json) {
    auto out = nlohmann::json::array();
    for (std::size_t i = all ? 0 : (hangs.empty() ? 0 : hangs.size() - 1); i < hangs.size(); ++i)
      out.push_back({{"hung", hangs[i].verdict}, {"stack", hangs[i].stack ? *hangs[i].stack : nlohmann::json{}}});
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (hangs.empty()) {
    std::cout << "no rank was declared hung in this job (" << events->size() << " events)\n";
    return 0;
  }
  if (!all) {
    if (hangs.size() > 1)
      std::cout << "the latest of " << hangs.size() << " hangs (--all shows every one)\n";
    print_hang(hangs.back(), with_stack);
    return 0;
  }
  for (const auto& h : hangs)
    print_hang(h, with_stack);
  return 0;
}

// diagnose stragglers: every straggler verdict of the job, and the ranks flagged now.
int diagnose_stragglers(const connection_options& o) {
  int code = 0;
  const auto events = read_event_log(o, nullptr, code);
  if (!events)
    return code;
  std::vector<nlohmann::json> found;
  std::map<std::uint32_t, bool> flagged;
  for (const auto& e : *events) {
    const auto kind = e.value("kind", "");
    if ((kind == "straggler" || kind == "straggler_cleared") && e.contains("rank")) {
      found.push_back(e);
      flagged[e["rank"].get<std::uint32_t>()] = kind == "straggler";
    }
  }
  std::string now;
  for (const auto& [r, f] : flagged)
    if (f)
      now += (now.empty() ? "" : ", ") + std::to_string(r);
  if (o.json) {
    auto ranks = nlohmann::json::array();
    for (const auto& [r, f] : flagged)
      if (f)
        ranks.push_back(r);
    std::cout << nlohmann::json{{"events", found}, {"flagged", ranks}}.dump(2) << "\n";
    return 0;
  }
  if (found.empty()) {
    std::cout << "no straggler in this job (" << events->size() << " events)\n";
    return 0;
  }
  std::cout << "stragglers now: " << (now.empty() ? "none" : "rank " + now) << "\n";
  for (const auto& e : found)
    std::cout << "  " << e.value("time", "") << "  " << (e.value("kind", "") == "straggler" ? "flagged " : "cleared ")
              << e.value("detail", "") << "\n";
  return 0;
}

}  // namespace

void add_diagnose_commands(CLI::App& app, int& exit_code) {
  auto* diagnose = app.add_subcommand("diagnose", "Why the job failed where it did: the verdicts of the supervisor's "
                                                  "detectors, from the event log");
  diagnose->require_subcommand(1);
  auto o = std::make_shared<connection_options>();
  auto all = std::make_shared<bool>(false);
  auto stack = std::make_shared<bool>(false);
  auto* cmd = diagnose->add_subcommand(
      "hang", "The latest rank declared hung: the collective its peers waited in, which ranks never entered it, and "
              "the stack taken before the kill");
  add_connection_options(cmd, *o);
  cmd->add_flag("--all", *all, "Every hang of the job, oldest first");
  cmd->add_flag("--stack", *stack, "Print the stack too (every thread of the hung process)");
  cmd->callback([o, all, stack, &exit_code] { exit_code = diagnose_hang(*o, *all, *stack); });
  auto so = std::make_shared<connection_options>();
  auto* stragglers = diagnose->add_subcommand(
      "stragglers", "Ranks that computed slower than the others (each rank's median time a micro-batch over its last "
                    "20 steps against the median of all ranks, flagged at 1.25x), when flagged and cleared");
  add_connection_options(stragglers, *so);
  stragglers->callback([so, &exit_code] { exit_code = diagnose_stragglers(*so); });
}

}  // namespace rekindle::apps
