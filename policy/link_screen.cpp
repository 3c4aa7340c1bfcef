#include "policy/link_screen.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

namespace rekindle::policy {

const char* to_string(link_verdict::kind k) noexcept {
  switch (k) {
    case link_verdict::kind::node:
      return "node";
    case link_verdict::kind::link:
      return "link";
    case link_verdict::kind::pair:
      return "pair";
  }
  return "pair";
}

link_screen::link_screen(std::vector<std::uint32_t> nodes, double min_link, std::uint64_t rotation)
    : nodes_{std::move(nodes)}, min_link_{min_link} {
  // The circle method: position m-1 stays, the others turn by one each rotation. Positions are
  // labelled so that rotation 0 pairs neighbours: k is node index 2k, m-1-k is 2k+1. With an odd
  // count, index m-1 is nobody and its partner is the odd node out.
  const std::size_t m = nodes_.size() + nodes_.size() % 2;
  if (m >= 2) {
    const auto turns = m - 1;
    const auto r = static_cast<std::size_t>(rotation % turns);
    std::vector<std::size_t> label(m);
    for (std::size_t k = 0; k < m / 2; ++k) {
      label[k] = 2 * k;
      label[m - 1 - k] = 2 * k + 1;
    }
    std::vector<std::pair<std::size_t, std::size_t>> positions{{m - 1, r}};
    for (std::size_t i = 1; i < m / 2; ++i)
      positions.emplace_back((r + i) % turns, (r + turns - i) % turns);
    for (const auto& [x, y] : positions) {
      const auto a = std::min(label[x], label[y]);
      const auto b = std::max(label[x], label[y]);
      if (b < nodes_.size())
        round_.push_back({nodes_[a], nodes_[b]});
      else
        odd_ = nodes_[a];
    }
    std::sort(round_.begin(), round_.end(), [](const link_pair& x, const link_pair& y) { return x.from < y.from; });
  }
  done_ = round_.empty();
}

bool link_screen::record(const link_pair& p, std::optional<double> mbps, std::string error) {
  if (done_ || std::find(round_.begin(), round_.end(), p) == round_.end())
    return false;
  if (std::any_of(results_.begin(), results_.end(), [&](const link_result& r) { return r.round == round_number_ && r.pair == p; }))
    return false;
  if (mbps && !(*mbps > 0)) {
    error = error.empty() ? "no bytes measured" : error;
    mbps.reset();
  }
  if (!mbps && error.empty())
    error = "failed";
  results_.push_back({p, round_number_, mbps, std::move(error)});
  return true;
}

bool link_screen::round_complete() const noexcept {
  return std::all_of(round_.begin(), round_.end(), [&](const link_pair& p) {
    return std::any_of(results_.begin(), results_.end(), [&](const link_result& r) { return r.round == round_number_ && r.pair == p; });
  });
}

bool link_screen::advance() {
  if (done_)
    return false;
  for (const auto& p : round_)
    if (std::none_of(results_.begin(), results_.end(), [&](const link_result& r) { return r.round == round_number_ && r.pair == p; }))
      results_.push_back({p, round_number_, std::nullopt, "no answer"});
  if (round_number_ == 1) {
    plan_repairs();
  } else if (odd_) {
    // The odd node slow with one fast partner may be the node or that link: a second fast partner
    // tells which.
    std::vector<const link_result*> odd;
    for (const auto& r : results_)
      if (r.round >= 2 && r.pair.from == *odd_)
        odd.push_back(&r);
    if (odd.size() == 1 && odd[0]->round == round_number_ && slow(*odd[0])) {
      for (const auto& r : results_)
        if (r.round == 1 && !slow(r))
          for (const auto g : {r.pair.from, r.pair.to})
            if (g != odd[0]->pair.to && std::none_of(wanted_.begin(), wanted_.end(), [&](const link_pair& w) { return w.from == *odd_; })) {
              wanted_.push_back({*odd_, g});
            }
    }
  }
  ++round_number_;
  take_round();
  return !done_;
}

double link_screen::reference() const noexcept {
  double best = 0;
  for (const auto& r : results_)
    if (r.mbps)
      best = std::max(best, *r.mbps);
  return best;
}

bool link_screen::slow(const link_result& r) const { return !r.mbps || *r.mbps < min_link_ * reference(); }

const link_result* link_screen::result_of(std::uint32_t round, std::uint32_t node) const {
  for (const auto& r : results_)
    if (r.round >= round && r.pair.from == node)
      return &r;
  return nullptr;
}

void link_screen::plan_repairs() {
  std::vector<std::uint32_t> good;
  std::vector<link_pair> slow_pairs;
  for (const auto& r : results_) {
    if (r.round != 1)
      continue;
    if (slow(r)) {
      slow_pairs.push_back(r.pair);
    } else {
      good.push_back(r.pair.from);
      good.push_back(r.pair.to);
    }
  }
  std::size_t next = 0;
  const auto partner = [&]() { return good[next++ % good.size()]; };
  if (!good.empty())
    for (const auto& p : slow_pairs) {
      wanted_.push_back({p.from, partner()});
      wanted_.push_back({p.to, partner()});
    }
  if (odd_) {
    // With no fast pair to lean on, the odd node is still measured, against the first node.
    wanted_.push_back({*odd_, good.empty() ? nodes_.front() : partner()});
  }
}

void link_screen::take_round() {
  round_.clear();
  std::set<std::uint32_t> busy;
  for (auto it = wanted_.begin(); it != wanted_.end();) {
    if (busy.contains(it->from) || busy.contains(it->to)) {
      ++it;
      continue;
    }
    busy.insert(it->from);
    busy.insert(it->to);
    round_.push_back(*it);
    it = wanted_.erase(it);
  }
  done_ = round_.empty();
}

namespace {

std::string figure(const link_result& r, double reference) {
  if (!r.mbps)
    return r.error;
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.1f MB/s, %.2fx the best pair's %.1f MB/s", *r.mbps,
                reference > 0 ? *r.mbps / reference : 0.0, reference);
  return buf;
}

}  // namespace

std::vector<link_verdict> link_screen::verdicts() const {
  std::vector<link_verdict> out;
  const double ref = reference();
  const auto verdict = [&](link_verdict::kind k, std::uint32_t a, std::uint32_t b, const link_result& r) {
    out.push_back({k, a, b, r.mbps, ref, figure(r, ref)});
  };
  std::set<std::uint32_t> good;
  for (const auto& r : results_)
    if (r.round == 1 && !slow(r)) {
      good.insert(r.pair.from);
      good.insert(r.pair.to);
    }
  for (const auto& r : results_) {
    if (r.round != 1 || !slow(r))
      continue;
    const auto a = r.pair.from;
    const auto b = r.pair.to;
    const auto* ra = result_of(2, a);
    const auto* rb = result_of(2, b);
    const bool a_bad = ra && slow(*ra);
    const bool b_bad = rb && slow(*rb);
    if (a_bad)
      verdict(link_verdict::kind::node, a, ra->pair.to, *ra);
    if (b_bad)
      verdict(link_verdict::kind::node, b, rb->pair.to, *rb);
    if (!a_bad && !b_bad)
      verdict(ra && rb ? link_verdict::kind::link : link_verdict::kind::pair, a, b, r);
  }
  if (odd_) {
    std::vector<const link_result*> odd;
    for (const auto& r : results_)
      if (r.round >= 2 && r.pair.from == *odd_)
        odd.push_back(&r);
    if (!odd.empty() && slow(*odd[0])) {
      const auto* first = odd[0];
      if (!good.contains(first->pair.to) || odd.size() == 1)
        verdict(link_verdict::kind::pair, *odd_, first->pair.to, *first);
      else if (slow(*odd[1]))
        verdict(link_verdict::kind::node, *odd_, odd[1]->pair.to, *odd[1]);
      else
        verdict(link_verdict::kind::link, *odd_, first->pair.to, *first);
    }
  }
  return out;
}

std::vector<std::uint32_t> link_screen::cleared() const {
  std::set<std::uint32_t> fast;
  std::set<std::uint32_t> named;
  for (const auto& v : verdicts()) {
    if (v.what != link_verdict::kind::link)
      named.insert(v.a);
    if (v.what == link_verdict::kind::pair)
      named.insert(v.b);
  }
  for (const auto& r : results_)
    if (!slow(r)) {
      fast.insert(r.pair.from);
      fast.insert(r.pair.to);
    }
  std::vector<std::uint32_t> out;
  for (const auto n : fast)
    if (!named.contains(n))
      out.push_back(n);
  return out;
}

}  // namespace rekindle::policy
