#include "policy/supervisor_policy.hpp"

#include <algorithm>
#include <unordered_map>

#include "common/check.hpp"
#include "common/text.hpp"
#include "config/spec.hpp"
#include "policy/hang_verdict.hpp"

namespace rekindle::policy {

std::string_view to_string(job_state s) noexcept {
  switch (s) {
    case job_state::waiting_for_nodes: return "waiting_for_nodes";
    case job_state::rendezvous: return "rendezvous";
    case job_state::running: return "running";
    case job_state::paused: return "paused";
    case job_state::completed: return "completed";
    case job_state::failed: return "failed";
    case job_state::stopped: return "stopped";
  }
  return "unknown";
}

namespace {

bool active(job_state s) { return s == job_state::rendezvous || s == job_state::running; }

/// Appends `more` to `out`: taken whole when `out` is empty, as a new epoch's tens of thousands of
/// spawns usually are, not moved one by one.
void append(std::vector<policy_action>& out, std::vector<policy_action>&& more) {
  if (out.empty())
    out = std::move(more);
  else
    out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

policy_config policy_config_of(const config::spec& s) {
  policy_config c;
  for (std::uint32_t n = 0; n < s.nodes.size(); ++n)
    c.nodes.push_back({s.nodes[n].name, s.ranks_on(node_id{n}), s.nodes[n].spare, s.nodes[n].domain});
  if (!s.job.plan_ranks.empty())
    for (const auto& r : s.initial_placement())
      c.initial.push_back({r.rank, r.node, r.local_index});
  c.total_steps = s.job.steps;
  c.snapshot_every = s.checkpoint.snapshot_every;
  c.hang_timeout = s.timeouts.hang;
  c.collective_timeout = s.timeouts.collective;
  c.node_timeout = s.timeouts.node;
  c.rendezvous_timeout = s.timeouts.rendezvous;
  c.max_restarts_per_rank = s.recovery.max_restarts_per_rank;
  c.max_restarts = s.recovery.max_restarts;
  c.backoff = s.recovery.backoff;
  c.backoff_max = s.recovery.backoff_max;
  c.restart_all = s.recovery.restart_all();
  c.reports_progress = !s.job.external();
  c.world_multiple = s.job.pipeline_stages();
  c.preflight = s.checks.preflight;
  c.screen = {s.checks.min_compute, s.checks.min_memory, s.checks.min_disk, s.checks.min_gpu, s.checks.gpu_gflops};
  return c;
}

supervisor_policy::supervisor_policy(policy_config config, const clock& time)
    : plan_multiple_(std::max<std::uint32_t>(config.world_multiple, 1)),
      config_(std::move(config)),
      clock_(time),
      nodes_(config_.nodes.size()),
      copies_(config_.nodes.size()) {}

std::uint32_t supervisor_policy::restarts_of(rank_id r) const {
  const auto* it = ranks_.find(r);
  return it == nullptr ? 0 : it->restarts;
}

bool supervisor_policy::node_up(node_id n) const {
  return n.value() < nodes_.size() && nodes_[n.value()].up;
}

std::optional<clock::duration> supervisor_policy::heartbeat_age(node_id n) const {
  if (!node_up(n))
    return std::nullopt;
  return clock_.now() - nodes_[n.value()].last_heartbeat;
}

std::vector<rank_slot> supervisor_policy::initial_placement() const {
  if (!config_.initial.empty())
    return config_.initial;
  std::vector<rank_slot> out;
  std::uint32_t next = 0;
  for (std::uint32_t n = 0; n < config_.nodes.size(); ++n) {
    if (config_.nodes[n].spare)
      continue;
    for (std::uint32_t i = 0; i < config_.nodes[n].ranks; ++i)
      out.push_back({rank_id{next++}, node_id{n}, i});
  }
  return out;
}

bool supervisor_policy::placeable(std::size_t n) const {
  const auto& node = nodes_[n];
  return node.up && !node.drained && !(node.verdict && !node.verdict->passed) && (!config_.preflight || node.figures);
}

std::optional<node_id> supervisor_policy::free_spare(const std::vector<rank_slot>& placement, std::uint32_t ranks,
                                                     std::optional<node_id> lost) const {
  std::vector<std::uint8_t> used(config_.nodes.size(), 0);
  for (const auto& s : placement)
    if (s.node.value() < used.size())
      used[s.node.value()] = 1;
  const auto& lost_domain = lost && lost->value() < config_.nodes.size() ? config_.nodes[lost->value()].domain : std::string{};
  std::optional<node_id> same_domain;
  // Spares first, then worker nodes back in the pool.
  for (int pass = 0; pass < 2; ++pass)
    for (std::uint32_t n = 0; n < config_.nodes.size(); ++n) {
      const auto& c = config_.nodes[n];
      if (c.spare != (pass == 0) || used[n] || !placeable(n) || (!c.spare && c.ranks < ranks))
        continue;
      if (lost_domain.empty() || c.domain != lost_domain)
        return node_id{n};
      if (!same_domain)
        same_domain = node_id{n};
    }
  return same_domain;
}

std::vector<std::optional<node_id>> supervisor_policy::buddies() const {
  // The usable nodes grouped by failure domain, the domains in the order their first usable node
  // comes; a node without a domain (or every node, with the rule off) is a domain of its own.
  // A node's buddy is the node at its own position (modulo) among the next domain's: rack-mates
  // spread their replicas over the next rack's nodes instead of all on its first. Without
  // domains this is the next usable node in node order, wrapping around.
  std::vector<std::optional<node_id>> out(nodes_.size());
  std::vector<std::vector<std::uint32_t>> domains;
  std::vector<std::pair<std::size_t, std::size_t>> where(nodes_.size());  // (domain, position)
  std::unordered_map<std::string_view, std::size_t> index;
  for (std::uint32_t n = 0; n < nodes_.size(); ++n) {
    if (!placeable(n))
      continue;
    const auto& name = n < config_.nodes.size() && config_.buddy_across_domains ? config_.nodes[n].domain : std::string{};
    std::size_t d = domains.size();
    if (!name.empty()) {
      const auto [it, fresh] = index.try_emplace(std::string_view{name}, domains.size());
      d = it->second;
      if (!fresh) {
        where[n] = {d, domains[d].size()};
        domains[d].push_back(n);
        continue;
      }
    }
    where[n] = {d, 0};
    domains.push_back({n});
  }
  for (std::uint32_t n = 0; n < nodes_.size(); ++n) {
    if (!placeable(n))
      continue;
    const auto [d, i] = where[n];
    if (domains.size() > 1) {
      const auto& next = domains[(d + 1) % domains.size()];
      out[n] = node_id{next[i % next.size()]};
    } else if (domains[d].size() > 1) {
      // One domain holds every usable node: the next of them.
      out[n] = node_id{domains[d][(i + 1) % domains[d].size()]};
    }
  }
  return out;
}

std::chrono::nanoseconds supervisor_policy::backoff_for(std::uint32_t restarts) const {
  if (restarts <= 1)
    return std::chrono::nanoseconds::zero();
  auto d = config_.backoff;
  for (std::uint32_t i = 2; i < restarts && d < config_.backoff_max; ++i)
    d *= 2;
  return std::min(d, config_.backoff_max);
}

supervisor_policy::rank_state& supervisor_policy::rank_table::add(rank_id r) {
  RK_CHECK_LT(r.value(), max_rank_id, "rank id out of range");
  if (r.value() >= present_.size()) {
    states_.resize(r.value() + 1);
    present_.resize(r.value() + 1, 0);
  }
  present_[r.value()] = 1;
  states_[r.value()] = rank_state{};
  return states_[r.value()];
}

void supervisor_policy::fail(std::vector<policy_action>& out, const std::string& why) {
  state_ = job_state::failed;
  reason_ = why;
  out.push_back(note_event{"job_failed", why, {}, {}});
  out.push_back(finish_job{job_state::failed, why});
}

void supervisor_policy::new_epoch(std::vector<policy_action>& out, std::vector<rank_slot> placement,
                                  const std::set<rank_id>& respawn, const std::string& why) {
  if (placement.empty()) {
    fail(out, "no rank can be placed: " + why);
    return;
  }
  // A change of the rank numbering starts a new world: its snapshots are kept apart.
  const bool renumbered = placement.size() != placement_.size() ||
                          !std::equal(placement.begin(), placement.end(), placement_.begin(),
                                      [](const rank_slot& a, const rank_slot& b) { return a.rank == b.rank; });
  epoch_ = epoch_.next();
  copies_.begin_epoch(epoch_, static_cast<std::uint32_t>(placement.size()), renumbered);
  placement_ = std::move(placement);
  const auto now = clock_.now();
  const auto fresh = [&](rank_state& r) {
    r.ready_epoch.reset();
    r.last_progress = now;
  };
  // The records of ranks that stay are kept (their restart counts), the others dropped.
  ranks_.keep_only(placement_, fresh);
  ready_ = 0;
  ready_counted_ = epoch_;
  completed_.clear();
  out.push_back(note_event{"epoch", "epoch " + std::to_string(epoch_.value()) + ": " + why, {}, {}});
  out.push_back(persist_epoch{epoch_});
  out.push_back(abort_ranks{epoch_});
  out.push_back(assign_buddies{epoch_, buddies()});
  spawn_ranks spawns{epoch_, world(), config_.restart_all, {}};
  spawns.ranks.reserve(placement_.size());
  for (const auto& s : placement_)
    spawns.ranks.push_back({s, std::chrono::nanoseconds::zero()});
  // The respawned ranks wait out their back-off (a few among many: looked up, not tested each).
  for (const auto r : respawn) {
    const auto at = r.value() < placement_.size() && placement_[r.value()].rank == r
                        ? placement_.begin() + r.value()
                        : std::find_if(placement_.begin(), placement_.end(), [&](const rank_slot& s) { return s.rank == r; });
    if (at != placement_.end())
      spawns.ranks[static_cast<std::size_t>(at - placement_.begin())].delay = backoff_for(ranks_[r].quick_failures);
  }
  out.push_back(std::move(spawns));
  state_ = job_state::rendezvous;
  rendezvous_since_ = now;
  collective_error_since_.reset();
  collective_waiters_.clear();
}

std::vector<policy_action> supervisor_policy::on_node_up(node_id n) {
  std::vector<policy_action> out;
  if (n.value() >= nodes_.size())
    return out;
  auto& node = nodes_[n.value()];
  const bool was_up = node.up;
  node.up = true;
  copies_.set_up(n, true);
  node.last_heartbeat = clock_.now();
  if (!was_up)
    out.push_back(note_event{"node_up", config_.nodes[n.value()].name + " is up", {}, n});
  if (state_ == job_state::waiting_for_nodes && !placement_.empty() && !first_return_)
    first_return_ = clock_.now();  // after a restart: the others have a node timeout from here
  maybe_leave_waiting(out);
  maybe_return_to_plan(out, n);
  return out;
}

bool supervisor_policy::plan_is_back() const {
  const auto& plan = config_.initial;
  return plan_restored_ && !plan.empty() && placement_.size() < plan.size() &&
         std::all_of(plan.begin(), plan.end(), [&](const rank_slot& s) { return placeable(s.node.value()); });
}

void supervisor_policy::return_to_plan(std::vector<policy_action>& out, const std::string& why, std::optional<node_id> node) {
  const auto& plan = config_.initial;
  plan_restored_();
  config_.world_multiple = plan_multiple_;
  out.push_back(note_event{"replanned",
                           why + ": returned to the plan, from " + std::to_string(placement_.size()) + " to " +
                               std::to_string(plan.size()) + " ranks in " + std::to_string(plan_multiple_) +
                               "-stage pipelines",
                           {}, node});
  new_epoch(out, plan, {}, "back to the plan");
}

std::vector<policy_action> supervisor_policy::adopt_plan(const replanned& plan, const std::string& why) {
  std::vector<policy_action> out;
  if (state_ != job_state::running || plan.placement.empty())
    return out;
  config_.world_multiple = std::max<std::uint32_t>(plan.world_multiple, 1);
  out.push_back(note_event{"replanned", why, {}, {}});
  new_epoch(out, plan.placement, {}, "a better plan");
  return out;
}

void supervisor_policy::maybe_return_to_plan(std::vector<policy_action>& out, node_id back) {
  if (state_ != job_state::running)
    return;
  if (plan_is_back())
    return_to_plan(out, config_.nodes[back.value()].name + " is back", back);
  else
    (void)replan_up(out, config_.nodes[back.value()].name + " is back", back);
}

bool supervisor_policy::replan_up(std::vector<policy_action>& out, const std::string& why, std::optional<node_id> node) {
  const auto& plan = config_.initial;
  if (!upward_ || !plan_restored_ || plan.empty() || placement_.size() >= plan.size())
    return false;
  const auto places = [&](const std::vector<rank_slot>& placement) {
    return std::any_of(placement.begin(), placement.end(), [&](const rank_slot& s) { return s.node == *node; });
  };
  if (node && (!places(plan) || places(placement_)))
    return false;  // not a node of the plan, or one the world runs on already: nothing it could add
  auto up = upward_();
  if (!up || up->placement.empty())
    return false;
  config_.world_multiple = std::max<std::uint32_t>(up->world_multiple, 1);
  out.push_back(note_event{"replanned",
                           why + ": re-planned up from " + std::to_string(placement_.size()) + " to " +
                               std::to_string(up->placement.size()) + " ranks; " + up->note,
                           {}, node});
  new_epoch(out, std::move(up->placement), {}, "re-planned up");
  return true;
}

std::vector<policy_action> supervisor_policy::on_holdings_reported(node_id n) {
  std::vector<policy_action> out;
  if (n.value() >= nodes_.size() || !nodes_[n.value()].up)
    return out;
  nodes_[n.value()].reported = true;
  maybe_leave_waiting(out);
  return out;
}

void supervisor_policy::maybe_leave_waiting(std::vector<policy_action>& out) {
  if (state_ != job_state::waiting_for_nodes)
    return;
  // Start once every node the placement needs is up: the initial one, or after a supervisor
  // restart the reloaded one, whose nodes must also have reported the copies they hold.
  // With preflight, also once each has passed its check (a node that failed it is replaced, below).
  const bool restarted = !placement_.empty();
  auto wanted = restarted ? placement_ : initial_placement();
  const bool ready = !wanted.empty() && std::all_of(wanted.begin(), wanted.end(), [&](const rank_slot& s) {
    const auto& node = nodes_[s.node.value()];
    return node.up && (!restarted || node.reported) && (!config_.preflight || node.figures);
  });
  if (!ready)
    return;
  // Every node checked so far is judged now, against the whole fleet's figures.
  std::set<node_id> failed;
  for (std::size_t n = 0; n < nodes_.size(); ++n)
    if (nodes_[n].figures && !nodes_[n].verdict && judge(out, n, false))
      failed.insert(node_id{static_cast<std::uint32_t>(n)});
  for (const auto n : failed) {
    if (std::none_of(wanted.begin(), wanted.end(), [&](const rank_slot& s) { return s.node == n; }))
      continue;
    auto change = placement_without(n, wanted);
    out.push_back(std::move(change.note));
    wanted = std::move(change.placement);
  }
  new_epoch(out, std::move(wanted), {}, restarted ? "supervisor restarted" : "all nodes up");
}

bool supervisor_policy::judge(std::vector<policy_action>& out, std::size_t n, bool was_quarantined) {
  auto& node = nodes_[n];
  std::vector<node_figures> fleet;
  for (const auto& other : nodes_)
    if (other.figures)
      fleet.push_back(*other.figures);
  node.verdict = judge_node(*node.figures, fleet, config_.screen);
  const auto& name = config_.nodes[n].name;
  const node_id id{static_cast<std::uint32_t>(n)};
  if (!node.verdict->passed) {
    out.push_back(note_event{"node_quarantined", name + " failed its check: " + node.verdict->detail +
                                                     "; it is not placed and not used as a spare",
                             {}, id, node.verdict->fields});
    return true;
  }
  out.push_back(note_event{was_quarantined ? "node_released" : "node_checked",
                           name + " passed its check: " + node.verdict->detail +
                               (was_quarantined ? "; its quarantine ends" : ""),
                           {}, id, node.verdict->fields});
  return false;
}

std::vector<policy_action> supervisor_policy::on_node_checked(node_id n, const node_figures& figures) {
  std::vector<policy_action> out;
  if (n.value() >= nodes_.size())
    return out;
  auto& node = nodes_[n.value()];
  const bool was_quarantined = quarantined(n).has_value();
  node.figures = figures;
  if (was_quarantined && node.verdict->check == "link")
    return out;  // its own figures do not clear its links: the next link check says
  node.verdict.reset();
  if (state_ == job_state::waiting_for_nodes) {
    maybe_leave_waiting(out);  // judges every node once the placement's have all reported
    return out;
  }
  if (judge(out, n.value(), was_quarantined))
    move_off_quarantined(out, n);
  else
    maybe_return_to_plan(out, n);
  return out;
}

void supervisor_policy::move_off_quarantined(std::vector<policy_action>& out, node_id n) {
  const bool holds_ranks = std::any_of(placement_.begin(), placement_.end(), [&](const rank_slot& s) { return s.node == n; });
  if (!holds_ranks || !active(state_))
    return;
  auto [placement, moved, note] = placement_without(n);
  out.push_back(std::move(note));
  // As for a drain: its daemon stays up, its slots remain a source for the restore.
  new_epoch(out, std::move(placement), {}, "quarantine of " + config_.nodes[n.value()].name);
}

std::vector<policy_action> supervisor_policy::quarantine(node_id n, const std::string& check, const std::string& why,
                                                         std::vector<std::pair<std::string, std::string>> fields) {
  std::vector<policy_action> out;
  if (n.value() >= nodes_.size() || quarantined(n))
    return out;
  node_verdict v;
  v.passed = false;
  v.check = check;
  v.detail = why;
  v.fields = std::move(fields);
  v.fields.emplace_back("failed", check);
  nodes_[n.value()].verdict = v;
  out.push_back(note_event{"node_quarantined",
                           config_.nodes[n.value()].name + " quarantined (" + check + "): " + why +
                               "; it is not placed and not used as a spare until a check passes",
                           {}, n, v.fields});
  move_off_quarantined(out, n);
  return out;
}

std::vector<policy_action> supervisor_policy::release(node_id n, const std::string& check, const std::string& why) {
  std::vector<policy_action> out;
  if (!quarantined(n) || nodes_[n.value()].verdict->check != check)
    return out;
  node_verdict v;
  v.detail = why;
  v.fields = {{"passed", check}};
  nodes_[n.value()].verdict = v;
  out.push_back(note_event{"node_released", config_.nodes[n.value()].name + " passed the " + check + " check: " + why +
                                                "; its quarantine ends",
                           {}, n, v.fields});
  maybe_return_to_plan(out, n);
  return out;
}

std::optional<std::string> supervisor_policy::quarantined(node_id n) const {
  if (n.value() >= nodes_.size() || !nodes_[n.value()].verdict || nodes_[n.value()].verdict->passed)
    return std::nullopt;
  return nodes_[n.value()].verdict->detail;
}

std::optional<node_verdict> supervisor_policy::check_of(node_id n) const {
  if (n.value() >= nodes_.size())
    return std::nullopt;
  return nodes_[n.value()].verdict;
}

void supervisor_policy::on_epoch_seen(epoch_t e) {
  if (state_ == job_state::waiting_for_nodes && e > epoch_)
    epoch_ = e;
}

void supervisor_policy::on_heartbeat(node_id n) {
  if (n.value() < nodes_.size() && nodes_[n.value()].up)
    nodes_[n.value()].last_heartbeat = clock_.now();
}

std::vector<policy_action> supervisor_policy::on_node_lost(node_id n, const std::string& why) {
  std::vector<policy_action> out;
  if (n.value() >= nodes_.size() || !nodes_[n.value()].up)
    return out;
  nodes_[n.value()].up = false;
  nodes_[n.value()].reported = false;
  copies_.set_up(n, false);  // its copies of rank states are gone
  out.push_back(note_event{"node_lost", config_.nodes[n.value()].name + " lost: " + why, {}, n});
  const bool holds_ranks = std::any_of(placement_.begin(), placement_.end(), [&](const rank_slot& s) { return s.node == n; });
  if (!holds_ranks || state_ == job_state::waiting_for_nodes || state_ == job_state::completed ||
      state_ == job_state::failed || state_ == job_state::stopped)
    return out;
  auto [placement, moved, note] = placement_without(n);
  out.push_back(std::move(note));
  if (state_ == job_state::paused) {
    placement_ = std::move(placement);
    return out;
  }
  new_epoch(out, std::move(placement), moved, config_.nodes[n.value()].name + " lost");
  return out;
}

supervisor_policy::placement_change supervisor_policy::placement_without(node_id n, const std::vector<rank_slot>& placement) {
  placement_change out;
  const auto moving = static_cast<std::uint32_t>(std::count_if(placement.begin(), placement.end(), [&](const rank_slot& s) { return s.node == n; }));
  if (auto spare = free_spare(placement, moving, n)) {
    // Its ranks move to a free spare with their rank numbers.
    std::uint32_t local = 0;
    for (auto s : placement) {
      if (s.node == n) {
        s.node = *spare;
        s.local_index = local++;
        out.moved.insert(s.rank);
      }
      out.placement.push_back(s);
    }
    out.note = note_event{"ranks_moved",
                          std::to_string(out.moved.size()) + " rank(s) of " + config_.nodes[n.value()].name +
                              " move to spare " + config_.nodes[spare->value()].name,
                          {}, n};
  } else if (auto planned = replanner_ ? std::optional{replanner_(placement, n)} : std::nullopt; planned && *planned) {
    // No spare, and a plan to re-plan: the new plan's world.
    out.placement = std::move((*planned)->placement);
    config_.world_multiple = std::max<std::uint32_t>((*planned)->world_multiple, 1);
    out.note = note_event{"replanned",
                          "no free node: re-planned from " + std::to_string(placement.size()) + " to " +
                              std::to_string(out.placement.size()) + " ranks; " + (*planned)->note,
                          {}, n};
  } else {
    // No spare: the world shrinks, the other ranks numbered from 0 again, to whole pipelines.
    const auto why_not = planned ? "; no re-plan: " + planned->error().message() : std::string{};
    std::uint32_t next = 0;
    for (auto s : placement) {
      if (s.node == n)
        continue;
      s.rank = rank_id{next++};
      out.placement.push_back(s);
    }
    const auto m = std::max<std::uint32_t>(config_.world_multiple, 1);
    const auto whole = out.placement.size() / m * m;
    const auto idle = out.placement.size() - whole;
    out.placement.resize(whole);
    out.note = note_event{"world_shrinks",
                          "no spare: the world shrinks from " + std::to_string(placement.size()) + " to " +
                              std::to_string(out.placement.size()) + " ranks; the global batch stays" +
                              (idle > 0 ? "; " + std::to_string(idle) + " rank(s) idle, short of a whole pipeline of " +
                                              std::to_string(m) + " stages"
                                        : "") +
                              why_not,
                          {}, n};
  }
  return out;
}

std::vector<policy_action> supervisor_policy::on_rank_ready(rank_id r, epoch_t e) {
  std::vector<policy_action> out;
  if (state_ != job_state::rendezvous || e != epoch_)
    return out;
  auto* it = ranks_.find(r);
  if (it == nullptr)
    return out;
  mark_ready(*it, e);
  maybe_start(out);
  return out;
}

bool supervisor_policy::on_snapshot(const snapshot_report& r) { return copies_.on_held(r); }

void supervisor_policy::on_snapshot_dropped(const snapshot_report& r) { copies_.on_dropped(r); }

std::vector<policy_action> supervisor_policy::on_restore_failed(rank_id r, epoch_t e, rank_id old_rank, step_t step,
                                                                node_id holder, copy_kind where,
                                                                const std::string& why) {
  std::vector<policy_action> out;
  if (e != epoch_ || state_ != job_state::running)
    return out;
  if (where == copy_kind::disk)
    copies_.forget_checkpoint(step);
  else
    copies_.forget_restore_copy(old_rank, step, holder, where);
  const auto name = holder.value() < config_.nodes.size() ? config_.nodes[holder.value()].name
                                                          : "node " + std::to_string(holder.value());
  const char* kinds[] = {"its slot", "a buddy replica", "disk"};
  out.push_back(note_event{"restore_failed",
                           "rank " + std::to_string(r.value()) + " could not read rank " +
                               std::to_string(old_rank.value()) + "'s state of step " + std::to_string(step.value()) +
                               " from " + kinds[std::min<std::size_t>(static_cast<std::size_t>(where), 2)] + " on " +
                               name + ": " + why + "; choosing the restore point again",
                           r, holder});
  new_epoch(out, placement_, {}, "a restore source failed");
  return out;
}

void supervisor_policy::mark_ready(rank_state& r, epoch_t e) {
  if (ready_counted_ != e) {
    ready_counted_ = e;
    ready_ = 0;
  }
  if (r.ready_epoch != e)
    ++ready_;
  r.ready_epoch = e;
}

void supervisor_policy::maybe_start(std::vector<policy_action>& out) {
  // Not before as many ranks as the placement holds have registered in this epoch (a count, so
  // that each registration costs no walk over the world); then every one is checked once.
  if (ready_counted_ != epoch_ || ready_ < placement_.size())
    return;
  for (const auto& s : placement_)
    if (ranks_[s.rank].ready_epoch != epoch_)
      return;
  start_epoch start;
  start.epoch = epoch_;
  start.placement = placement_;
  if (auto choice = copies_.choose_restore(!config_.restart_all)) {
    copies_.restoring_from(*choice);
    start.restore_step = choice->step;
    start.restore_world = choice->world;
    start.sources = std::move(choice->sources);
  } else {
    start.restore_step = step_t{0};
    start.restore_world = world();
    if (step_.value() > 0)
      out.push_back(note_event{"no_snapshot",
                               config_.restart_all
                                   ? std::string{"no checkpoint is committed on disk (the restart-all policy restores "
                                                 "only from disk): training restarts from step 0"}
                                   : "no complete snapshot survives (" + copies_.missing_copies() +
                                         "): training restarts from step 0",
                               {}, {}});
  }
  state_ = job_state::running;
  start_step_ = start.restore_step;
  step_ = start.restore_step;
  const auto now = clock_.now();
  ranks_.for_each([&](rank_id, rank_state& r) {
    r.step = start.restore_step;
    r.last_progress = now;
  });
  out.push_back(note_event{"started",
                           "epoch " + std::to_string(epoch_.value()) + ": " + std::to_string(world()) +
                               " ranks train from step " + std::to_string(start.restore_step.value()),
                           {}, {}});
  out.push_back(std::move(start));
  // The ranks trained to the end while no supervisor heard them (a restart, a takeover): the
  // state they restore is the final one.
  if (config_.reports_progress && step_.value() >= config_.total_steps) {
    state_ = job_state::completed;
    out.push_back(note_event{"completed", "all " + std::to_string(world()) + " ranks hold step " +
                                              std::to_string(step_.value()) + ", the last: nothing is left to train",
                             {}, {}});
    out.push_back(finish_job{job_state::completed, ""});
  }
}

std::vector<policy_action> supervisor_policy::on_rank_failed(rank_id r, epoch_t e, const std::string& why) {
  std::vector<policy_action> out;
  if (e != epoch_ || !active(state_))
    return out;
  auto* it = ranks_.find(r);
  if (it == nullptr)
    return out;
  ++it->restarts;
  ++it->quick_failures;
  ++restarts_;
  out.push_back(record_restart{r});
  out.push_back(note_event{"rank_failed", "rank " + std::to_string(r.value()) + ": " + why, r, {}});
  if (it->restarts > config_.max_restarts_per_rank) {
    fail(out, "rank " + std::to_string(r.value()) + " failed " + std::to_string(it->restarts) + " times (limit " +
                  std::to_string(config_.max_restarts_per_rank) + "); last: " + why);
    return out;
  }
  if (restarts_ > config_.max_restarts) {
    fail(out, std::to_string(restarts_) + " restarts in this job (limit " + std::to_string(config_.max_restarts) +
                  "); last: rank " + std::to_string(r.value()) + ": " + why);
    return out;
  }
  new_epoch(out, placement_, {r}, "rank " + std::to_string(r.value()) + " failed: " + why);
  return out;
}

std::vector<policy_action> supervisor_policy::on_collective_error(rank_id r, epoch_t e, const std::string& why) {
  std::vector<policy_action> out;
  if (e != epoch_ || state_ != job_state::running)
    return out;
  collective_waiters_.insert(r);
  if (!collective_error_since_) {
    collective_error_since_ = clock_.now();
    out.push_back(note_event{"collective_error",
                             "rank " + std::to_string(r.value()) + ": " + why + " (waiting for the failed rank to be found)", r,
                             {}});
  }
  return out;
}

std::vector<policy_action> supervisor_policy::on_progress(rank_id r, epoch_t e, step_t s) {
  std::vector<policy_action> out;
  if (e != epoch_ || state_ != job_state::running)
    return out;
  auto* it = ranks_.find(r);
  if (it == nullptr)
    return out;
  it->step = std::max(it->step, s);
  it->last_progress = clock_.now();
  if (s.value() >= start_step_.value() + config_.snapshot_every)
    it->quick_failures = 0;  // it trained past a snapshot: the next failure is a new one
  step_t lowest{~std::uint64_t{0}};
  for (const auto& slot : placement_)
    lowest = std::min(lowest, ranks_[slot.rank].step);
  step_ = lowest;
  if (config_.reports_progress && step_.value() >= config_.total_steps) {
    state_ = job_state::completed;
    out.push_back(note_event{"completed", "all " + std::to_string(world()) + " ranks finished step " +
                                              std::to_string(step_.value()),
                             {}, {}});
    out.push_back(finish_job{job_state::completed, ""});
  }
  return out;
}

void supervisor_policy::on_position(rank_id r, epoch_t e, const collective_position& at) {
  if (e != epoch_)
    return;
  auto* it = ranks_.find(r);
  if (it == nullptr)
    return;
  it->position = at;
  it->position_epoch = e;
}

note_event supervisor_policy::hung_note(const rank_slot& s, const std::string& why, std::optional<hang_survey>& survey) {
  const auto position_of = [&](const rank_state& r) { return r.position_epoch == epoch_ ? r.position : std::nullopt; };
  if (!survey) {
    std::vector<rank_report> reports;
    reports.reserve(placement_.size());
    for (const auto& slot : placement_)
      reports.push_back({slot.rank, position_of(ranks_[slot.rank])});
    survey = hang_survey{survey_hang(reports), {}};
    survey->fields = survey->verdict.fields();
  }
  const auto text = hang_text(survey->verdict, position_of(ranks_[s.rank]), s.rank);
  auto fields = survey->fields;
  for (auto& [k, v] : fields)
    if (k == "verdict")
      v = text;
  return note_event{"rank_hung", why + ": killing it. " + text, s.rank, s.node, std::move(fields)};
}

std::vector<policy_action> supervisor_policy::on_rank_completed(rank_id r, epoch_t e) {
  std::vector<policy_action> out;
  if (e != epoch_ || state_ != job_state::running || !ranks_.contains(r))
    return out;
  completed_.insert(r);
  if (std::all_of(placement_.begin(), placement_.end(), [&](const rank_slot& s) { return completed_.contains(s.rank); })) {
    state_ = job_state::completed;
    out.push_back(note_event{"completed", "all " + std::to_string(world()) + " ranks' programs exited with status 0",
                             {}, {}});
    out.push_back(finish_job{job_state::completed, ""});
  }
  return out;
}

std::vector<policy_action> supervisor_policy::on_tick() {
  std::vector<policy_action> out;
  const auto now = clock_.now();
  if (state_ == job_state::waiting_for_nodes && !placement_.empty()) {
    // After a restart: nodes of the placement that have not come back a node timeout after the
    // first one did are lost, as if their heartbeats had stopped.
    // Once every node that came back has said what it holds.
    const bool reported = std::all_of(nodes_.begin(), nodes_.end(), [](const node_state& n) { return !n.up || n.reported; });
    if (first_return_ && now - *first_return_ > config_.node_timeout && reported) {
      std::set<node_id> missing;
      for (const auto& s : placement_)
        if (!nodes_[s.node.value()].up)
          missing.insert(s.node);
      auto placement = placement_;
      std::set<rank_id> moved;
      for (const auto n : missing) {
        out.push_back(note_event{"node_lost",
                                 config_.nodes[n.value()].name + " did not come back within " +
                                     format_duration(config_.node_timeout) + " of the supervisor's restart",
                                 {}, n});
        auto change = placement_without(n, placement);
        out.push_back(std::move(change.note));
        placement = std::move(change.placement);
        moved.insert(change.moved.begin(), change.moved.end());
      }
      // The new placement against the reloaded one: a shrink renumbers the world, whose copies
      // the next epoch then reshards from.
      if (!missing.empty())
        new_epoch(out, std::move(placement), moved, "supervisor restarted");
    }
  }
  for (std::uint32_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].up && now - nodes_[n].last_heartbeat > config_.node_timeout) {
      append(out, on_node_lost(node_id{n}, "no heartbeat for " + format_duration(now - nodes_[n].last_heartbeat)));
    }
  }
  if (state_ == job_state::running && config_.reports_progress) {
    // A rank's peers report a failed collective once theirs times out; one that stays silent and
    // makes no progress for longer than that (plus a margin for a step's compute) is not waiting
    // in a collective: it is the stuck one. No rank counts as hung before its peers could report.
    const auto margin = config_.hang_timeout / 4;
    const bool blame = config_.collective_timeout > std::chrono::nanoseconds::zero();
    const auto hung_after = blame ? std::max(config_.hang_timeout, config_.collective_timeout + margin) : config_.hang_timeout;
    std::optional<hang_survey> reports;
    for (const auto& s : placement_) {
      auto& r = ranks_[s.rank];
      if (blame && collective_waiters_.contains(s.rank))
        continue;
      const auto silent = now - r.last_progress;
      if (blame && !collective_waiters_.empty() && silent > config_.collective_timeout + margin) {
        out.push_back(hung_note(s, "rank " + std::to_string(s.rank.value()) + " made no progress for " +
                                       format_duration(silent) + " and reported nothing while " +
                                       std::to_string(collective_waiters_.size()) +
                                       " rank(s) timed out waiting for it in a collective",
                                reports));
        out.push_back(kill_rank{s.rank, s.node, 9});
        r.last_progress = now;  // its exit drives the recovery; do not kill it twice
      } else if (silent > hung_after) {
        out.push_back(hung_note(s, "rank " + std::to_string(s.rank.value()) + " made no progress for " +
                                       format_duration(silent),
                                reports));
        out.push_back(kill_rank{s.rank, s.node, 9});
        r.last_progress = now;  // its exit drives the recovery; do not kill it twice
      }
    }
    if (collective_error_since_ && now - *collective_error_since_ > config_.hang_timeout) {
      // A collective failed but no rank was found dead or stuck: start over with everyone.
      new_epoch(out, placement_, {}, "a collective failed and no failed rank was found");
    }
  } else if (state_ == job_state::rendezvous && now - rendezvous_since_ > config_.rendezvous_timeout) {
    std::set<rank_id> missing;
    for (const auto& s : placement_)
      if (ranks_[s.rank].ready_epoch != epoch_)
        missing.insert(s.rank);
    std::string list;
    for (auto r : missing)
      list += (list.empty() ? "" : ", ") + std::to_string(r.value());
    out.push_back(note_event{"rendezvous_timeout", "ranks " + list + " did not register within " +
                                                       format_duration(config_.rendezvous_timeout),
                             {}, {}});
    for (auto r : missing) {
      auto& rs = ranks_[r];
      ++rs.restarts;
      ++rs.quick_failures;
      ++restarts_;
      out.push_back(record_restart{r});
      if (rs.restarts > config_.max_restarts_per_rank) {
        fail(out, "rank " + std::to_string(r.value()) + " never registered after " + std::to_string(rs.restarts) +
                      " attempts");
        return out;
      }
      const auto it = std::find_if(placement_.begin(), placement_.end(), [&](const rank_slot& s) { return s.rank == r; });
      out.push_back(kill_rank{r, it->node, 9});
    }
    new_epoch(out, placement_, missing, "rendezvous timed out");
  }
  return out;
}

std::vector<policy_action> supervisor_policy::on_nodes_up(std::span<const node_id> nodes) {
  // Only the start waits on nodes: while waiting, take them all in and check once; otherwise one
  // call each is already cheap.
  std::vector<policy_action> out;
  if (state_ != job_state::waiting_for_nodes) {
    for (auto n : nodes) {
      append(out, on_node_up(n));
    }
    return out;
  }
  const auto now = clock_.now();
  for (auto n : nodes) {
    if (n.value() >= nodes_.size())
      continue;
    auto& node = nodes_[n.value()];
    if (!node.up)
      out.push_back(note_event{"node_up", config_.nodes[n.value()].name + " is up", {}, n});
    node.up = true;
    copies_.set_up(n, true);
    node.last_heartbeat = now;
  }
  maybe_leave_waiting(out);
  return out;
}

std::vector<policy_action> supervisor_policy::on_ranks_ready(std::span<const rank_id> ranks, epoch_t e) {
  std::vector<policy_action> out;
  if (state_ != job_state::rendezvous || e != epoch_)
    return out;
  for (auto r : ranks)
    if (auto* it = ranks_.find(r))
      mark_ready(*it, e);
  maybe_start(out);
  return out;
}

std::vector<policy_action> supervisor_policy::on_progress_all(epoch_t e, step_t s) {
  std::vector<policy_action> out;
  if (e != epoch_ || state_ != job_state::running)
    return out;
  const auto now = clock_.now();
  step_t lowest{~std::uint64_t{0}};
  for (const auto& slot : placement_) {
    auto* it = ranks_.find(slot.rank);
    if (it == nullptr) {
      // on_progress ignores a rank it does not know, and its scan creates the entry.
      lowest = std::min(lowest, ranks_[slot.rank].step);
      continue;
    }
    it->step = std::max(it->step, s);
    it->last_progress = now;
    if (s.value() >= start_step_.value() + config_.snapshot_every)
      it->quick_failures = 0;
    lowest = std::min(lowest, it->step);
  }
  step_ = lowest;
  if (config_.reports_progress && step_.value() >= config_.total_steps) {
    state_ = job_state::completed;
    out.push_back(note_event{"completed", "all " + std::to_string(world()) + " ranks finished step " +
                                              std::to_string(step_.value()),
                             {}, {}});
    out.push_back(finish_job{job_state::completed, ""});
  }
  return out;
}

bool supervisor_policy::on_copies_changed_all(const copy_changes& c) { return copies_.on_changed_all(c, placement_); }

std::vector<policy_action> supervisor_policy::pause() {
  std::vector<policy_action> out;
  if (!active(state_))
    return out;
  epoch_ = epoch_.next();
  copies_.begin_epoch(epoch_, world(), false);
  out.push_back(note_event{"paused", "paused at step " + std::to_string(step_.value()), {}, {}});
  out.push_back(persist_epoch{epoch_});
  out.push_back(abort_ranks{epoch_});
  state_ = job_state::paused;
  return out;
}

std::vector<policy_action> supervisor_policy::resume() {
  std::vector<policy_action> out;
  if (state_ != job_state::paused)
    return out;
  if (plan_is_back())
    return_to_plan(out, "resumed with every node of the plan up", std::nullopt);
  else if (!replan_up(out, "resumed", std::nullopt))
    new_epoch(out, placement_, {}, "resumed");
  return out;
}

std::vector<policy_action> supervisor_policy::stop(const std::string& why) {
  std::vector<policy_action> out;
  if (state_ == job_state::completed || state_ == job_state::failed || state_ == job_state::stopped)
    return out;
  state_ = job_state::stopped;
  reason_ = why;
  out.push_back(note_event{"stopped", why, {}, {}});
  out.push_back(finish_job{job_state::stopped, why});
  return out;
}

std::vector<policy_action> supervisor_policy::fail_job(const std::string& why) {
  std::vector<policy_action> out;
  if (state_ == job_state::completed || state_ == job_state::failed || state_ == job_state::stopped)
    return out;
  fail(out, why);
  return out;
}

std::vector<policy_action> supervisor_policy::drain(node_id n) {
  std::vector<policy_action> out;
  if (n.value() >= nodes_.size())
    return out;
  nodes_[n.value()].drained = true;
  out.push_back(note_event{"node_drained", config_.nodes[n.value()].name + " drained", {}, n});
  const bool holds_ranks = std::any_of(placement_.begin(), placement_.end(), [&](const rank_slot& s) { return s.node == n; });
  if (!holds_ranks || !active(state_))
    return out;
  auto [placement, moved, note] = placement_without(n);
  out.push_back(std::move(note));
  // The drained node's daemon stays up: its slots remain a source for the restore.
  new_epoch(out, std::move(placement), {}, "drain of " + config_.nodes[n.value()].name);
  return out;
}

std::vector<policy_action> supervisor_policy::scale(std::uint32_t new_world) {
  std::vector<policy_action> out;
  if (!active(state_) || new_world == world())
    return out;
  if (config_.world_multiple > 1 && new_world % config_.world_multiple != 0) {
    out.push_back(note_event{"scale_refused",
                             "cannot scale to " + std::to_string(new_world) + " ranks: pipelines of " +
                                 std::to_string(config_.world_multiple) + " stages need a multiple of " +
                                 std::to_string(config_.world_multiple),
                             {}, {}});
    return out;
  }
  std::uint32_t widest = 1;
  for (const auto& n : config_.nodes)
    widest = std::max(widest, n.ranks);
  std::vector<rank_slot> placement;
  for (int pass = 0; pass < 2 && placement.size() < new_world; ++pass) {
    for (std::uint32_t n = 0; n < config_.nodes.size() && placement.size() < new_world; ++n) {
      const bool spare = config_.nodes[n].spare;
      if ((pass == 0) == spare || !placeable(n))
        continue;
      const std::uint32_t capacity = spare ? widest : config_.nodes[n].ranks;
      for (std::uint32_t i = 0; i < capacity && placement.size() < new_world; ++i)
        placement.push_back({rank_id{static_cast<std::uint32_t>(placement.size())}, node_id{n}, i});
    }
  }
  if (placement.size() < new_world) {
    out.push_back(note_event{"scale_refused",
                             "cannot scale to " + std::to_string(new_world) + " ranks: the nodes up hold at most " +
                                 std::to_string(placement.size()),
                             {}, {}});
    return out;
  }
  new_epoch(out, std::move(placement), {}, "scale from " + std::to_string(world()) + " to " + std::to_string(new_world) + " ranks");
  return out;
}

std::vector<policy_action> supervisor_policy::restart_epoch(const std::string& why) {
  std::vector<policy_action> out;
  if (state_ != job_state::running)
    return out;
  new_epoch(out, placement_, {}, why);
  return out;
}

std::vector<policy_action> supervisor_policy::recover_after_restart(epoch_t last_epoch, std::vector<rank_slot> placement,
                                                                   step_t step,
                                                                   const std::map<rank_id, std::uint32_t>& restarts,
                                                                   std::uint32_t total_restarts,
                                                                   std::optional<epoch_t> world_since) {
  restarts_ = total_restarts;
  for (const auto& [r, n] : restarts)
    if (r.value() < rank_table::max_rank_id)
      ranks_[r].restarts = n;
  epoch_ = last_epoch;
  placement_ = std::move(placement);
  step_ = step;
  state_ = job_state::waiting_for_nodes;
  first_return_.reset();
  // Copies of rank states the nodes report again belong to the reloaded world: those written in
  // any of its epochs (a rank's slot and its buddy's replica keep steps of earlier epochs of the
  // same world, the committed one among them).
  const auto first = world_since && *world_since <= last_epoch ? *world_since : last_epoch;
  copies_.begin_world(first, last_epoch, static_cast<std::uint32_t>(placement_.size()));
  for (const auto& s : placement_)
    ranks_[s.rank];
  return {note_event{"supervisor_restarted",
                     "reloaded epoch " + std::to_string(last_epoch.value()) + ", " + std::to_string(placement_.size()) +
                         " ranks at step " + std::to_string(step.value()) + "; waiting for the nodes",
                     {}, {}}};
}

}  // namespace rekindle::policy
