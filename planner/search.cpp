#include "planner/search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <new>
#include <numeric>
#include <set>
#include <tuple>

#include "planner/finder.hpp"

namespace rekindle::planner {

std::string_view to_string(search_mode m) noexcept {
  switch (m) {
    case search_mode::automatic: return "automatic";
    case search_mode::fast: return "fast";
    case search_mode::exhaustive: return "exhaustive";
  }
  return "automatic";
}

namespace {

using detail::candidate;
using detail::finder;
using detail::layout;
using pattern = std::vector<std::uint32_t>;
using pattern_set = std::vector<pattern>;

// Layer counts: every way of cutting `layers` into `p` positive parts, in lexicographic order of
// the cut positions. `f` returns false to stop.
void for_each_split(std::uint32_t layers, std::uint32_t p, const std::function<bool(const std::vector<std::uint32_t>&)>& f) {
  std::vector<std::uint32_t> cut(p + 1);
  for (std::uint32_t i = 0; i < p; ++i)
    cut[i] = i;
  cut[p] = layers;
  std::vector<std::uint32_t> split(p);
  for (;;) {
    for (std::uint32_t i = 0; i < p; ++i)
      split[i] = cut[i + 1] - cut[i];
    if (!f(split))
      return;
    std::uint32_t i = p - 1;
    while (i >= 1 && cut[i] == layers - (p - i))
      --i;
    if (i < 1)
      return;
    ++cut[i];
    for (std::uint32_t j = i + 1; j < p; ++j)
      cut[j] = cut[j - 1] + 1;
  }
}

std::uint64_t binomial(std::uint64_t n, std::uint64_t k) {
  if (k > n)
    return 0;
  k = std::min(k, n - k);
  std::uint64_t r = 1;
  for (std::uint64_t i = 1; i <= k; ++i) {
    r = r * (n - k + i) / i;
    if (r > (1ull << 50))
      return 1ull << 50;
  }
  return r;
}

// The device types that have devices, and their widest node.
struct type_info {
  std::vector<std::uint32_t> present;
  std::vector<std::uint32_t> devices;
  std::vector<std::uint32_t> widest;
};

type_info describe(const cluster& c) {
  type_info out;
  out.devices.assign(c.types.size(), 0);
  out.widest.assign(c.types.size(), 0);
  for (const auto& n : c.nodes) {
    out.devices[n.type] += static_cast<std::uint32_t>(n.devices.size());
    out.widest[n.type] = std::max(out.widest[n.type], static_cast<std::uint32_t>(n.devices.size()));
  }
  for (std::uint32_t t = 0; t < c.types.size(); ++t)
    if (out.devices[t] > 0)
      out.present.push_back(t);
  return out;
}

// Evaluations beyond which an explicitly requested exhaustive search refuses to start.
constexpr std::uint64_t exhaustive_refusal = 50'000'000;

// Patterns (a device type per stage) the exhaustive walk lists for one tensor vector at most.
constexpr double max_patterns = 1 << 20;

// Walks the exhaustive space: pipeline degree, tensor degree per stage, multisets of replica
// patterns that fit the device counts. `visit` gets (tensor, patterns); returns false to stop.
// Returns false when the walk stopped early (by `visit`, or because one pipeline degree has more
// than max_patterns patterns).
bool for_each_exhaustive_layout(const problem& prob, const std::vector<std::uint32_t>& degrees,
                                const std::function<bool(const std::vector<std::uint32_t>&, const pattern_set&)>& visit) {
  const auto& m = prob.workload;
  const auto info = describe(prob.hardware);
  const std::uint32_t max_replicas = m.global_batch / m.micro_batch_sizes.front();
  const std::uint32_t total_devices = prob.hardware.device_count();
  bool go = true;
  for (std::uint32_t p = 1; p <= std::min(m.layers, total_devices) && go; ++p) {
    if (std::pow(static_cast<double>(info.present.size()), p) > max_patterns)
      return false;
    std::vector<std::size_t> tix(p, 0);
    for (bool more_t = true; more_t && go;) {
      std::vector<std::uint32_t> tensor(p);
      for (std::uint32_t s = 0; s < p; ++s)
        tensor[s] = degrees[tix[s]];
      // Every pattern (device type per stage) whose groups fit in some node of the type.
      std::vector<pattern> patterns;
      std::vector<std::size_t> yix(p, 0);
      for (bool more_y = true; more_y;) {
        pattern pat(p);
        bool ok = true;
        for (std::uint32_t s = 0; s < p && ok; ++s) {
          pat[s] = info.present[yix[s]];
          ok = info.widest[pat[s]] >= tensor[s];
        }
        if (ok)
          patterns.push_back(pat);
        std::size_t i = 0;
        for (; i < p; ++i) {
          if (++yix[i] < info.present.size())
            break;
          yix[i] = 0;
        }
        more_y = i < p;
      }
      // Device needs per type of each pattern.
      std::vector<std::vector<std::uint32_t>> need(patterns.size(), std::vector<std::uint32_t>(info.devices.size(), 0));
      for (std::size_t i = 0; i < patterns.size(); ++i)
        for (std::uint32_t s = 0; s < p; ++s)
          need[i][patterns[i][s]] += tensor[s];
      auto left = info.devices;
      pattern_set chosen;
      std::function<void(std::size_t)> recurse = [&](std::size_t from) {
        if (!go)
          return;
        if (!chosen.empty() && !visit(tensor, chosen)) {
          go = false;
          return;
        }
        if (chosen.size() >= max_replicas)
          return;
        for (std::size_t i = from; i < patterns.size() && go; ++i) {
          bool fits = true;
          for (std::size_t t = 0; t < left.size(); ++t)
            fits = fits && need[i][t] <= left[t];
          if (!fits)
            continue;
          for (std::size_t t = 0; t < left.size(); ++t)
            left[t] -= need[i][t];
          chosen.push_back(patterns[i]);
          recurse(i);
          chosen.pop_back();
          for (std::size_t t = 0; t < left.size(); ++t)
            left[t] += need[i][t];
        }
      };
      recurse(0);
      std::uint32_t s = 0;
      for (; s < p; ++s) {
        if (++tix[s] < degrees.size())
          break;
        tix[s] = 0;
      }
      more_t = s < p;
    }
  }
  return go;
}

void run_exhaustive(finder& f) {
  const auto& prob = f.target();
  const auto& m = prob.workload;
  (void)for_each_exhaustive_layout(prob, f.tensor_degrees(), [&](const std::vector<std::uint32_t>& tensor, const pattern_set& patterns) {
    if (f.stopped())
      return false;
    auto placed = detail::place(prob.hardware, tensor, patterns);
    if (!placed)
      return true;
    ++f.stats().layouts;
    auto l = std::make_shared<const layout>(std::move(*placed));
    const auto p = l->pipeline();
    for (bool rc : f.recompute_choices())
      for (auto b : f.micro_batch_sizes()) {
        if (m.global_batch / b < l->data())
          continue;
        for_each_split(m.layers, p, [&](const std::vector<std::uint32_t>& split) {
          (void)f.evaluate(l, split, b, rc);
          return true;
        });
      }
    return true;
  });
}

// ---- fast search ----

// Types ordered for building replicas: most usable memory first (the first stage keeps the most
// activations in flight), then the fastest.
std::vector<std::uint32_t> memory_order(const cluster& c, const std::vector<std::uint32_t>& types) {
  auto out = types;
  std::stable_sort(out.begin(), out.end(), [&](std::uint32_t a, std::uint32_t b) {
    const auto& x = c.types[a];
    const auto& y = c.types[b];
    if (x.usable_memory() != y.usable_memory())
      return x.usable_memory() > y.usable_memory();
    return x.rate() > y.rate();
  });
  return out;
}

// Candidate replica sets for tensor degree t and p stages, from `groups[type]` groups of t devices.
// With `all_orders`, replicas that mix types come in every order of their types (up to
// max_orders), not only in blocks.
constexpr std::size_t max_orders = 64;
std::vector<pattern_set> fast_pattern_sets(const cluster& c, const std::vector<std::uint32_t>& groups, std::uint32_t p,
                                           std::uint32_t max_replicas, bool all_orders) {
  std::vector<std::uint32_t> present;
  for (std::uint32_t t = 0; t < groups.size(); ++t)
    if (groups[t] > 0)
      present.push_back(t);
  present = memory_order(c, present);
  const auto n = present.size();
  std::vector<std::vector<std::uint32_t>> subsets;
  if (n <= 6) {
    for (std::uint32_t mask = 1; mask < (1u << n); ++mask) {
      std::vector<std::uint32_t> s;
      for (std::uint32_t i = 0; i < n; ++i)
        if (mask & (1u << i))
          s.push_back(present[i]);
      subsets.push_back(std::move(s));
    }
  } else {
    // Many types: each type alone, and the fastest k types for every k.
    auto by_rate = present;
    std::stable_sort(by_rate.begin(), by_rate.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return c.types[a].rate() > c.types[b].rate(); });
    for (auto t : present)
      subsets.push_back({t});
    for (std::size_t k = 2; k <= n; ++k)
      subsets.push_back(memory_order(c, {by_rate.begin(), by_rate.begin() + static_cast<std::ptrdiff_t>(k)}));
  }
  std::vector<pattern_set> out;
  const auto add = [&](pattern_set set) {
    if (set.empty())
      return;
    if (set.size() > max_replicas) {
      // More replicas than micro-batches: keep the fastest.
      const auto speed = [&](const pattern& x) {
        double slowest = 1e300;
        for (auto t : x)
          slowest = std::min(slowest, c.types[t].rate());
        return slowest;
      };
      std::stable_sort(set.begin(), set.end(), [&](const pattern& a, const pattern& b) { return speed(a) > speed(b); });
      set.resize(max_replicas);
    }
    out.push_back(std::move(set));
  };
  for (const auto& s : subsets) {
    // Replicas of one type each, then the leftover groups dealt into mixed replicas.
    pattern_set pure;
    pattern leftovers;
    for (auto t : s) {
      for (std::uint32_t i = 0; i < groups[t] / p; ++i)
        pure.emplace_back(p, t);
      leftovers.insert(leftovers.end(), groups[t] % p, t);
    }
    auto with_mixed = pure;
    for (std::size_t i = 0; i + p <= leftovers.size(); i += p)
      with_mixed.emplace_back(leftovers.begin() + static_cast<std::ptrdiff_t>(i),
                              leftovers.begin() + static_cast<std::ptrdiff_t>(i + p));
    if (with_mixed.size() != pure.size())
      add(with_mixed);
    add(std::move(pure));
    // Identical replicas that mix the types, as many as the scarcest type allows.
    if (s.size() < 2 || p < s.size())
      continue;
    std::map<std::vector<std::uint32_t>, std::uint32_t> compositions;  // stages per type -> replicas
    for (std::uint32_t d = 1;; ++d) {
      std::vector<std::uint32_t> k(s.size());
      std::uint32_t sum = 0;
      bool ok = true;
      for (std::size_t i = 0; i < s.size(); ++i) {
        k[i] = groups[s[i]] / d;
        ok = ok && k[i] >= 1;
        sum += k[i];
      }
      if (!ok || sum < p)
        break;
      // Stages per type in proportion to the groups available, at least one each.
      std::vector<std::uint32_t> cnt(s.size(), 1);
      std::uint32_t given = static_cast<std::uint32_t>(s.size());
      std::vector<std::pair<double, std::size_t>> rest;
      for (std::size_t i = 0; i < s.size(); ++i) {
        const double want = static_cast<double>(p) * k[i] / sum;
        const auto whole = std::min<std::uint32_t>(k[i], std::max<std::uint32_t>(1, static_cast<std::uint32_t>(want)));
        given += whole - 1;
        cnt[i] = whole;
        rest.emplace_back(want - whole, i);
      }
      std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      while (given > p) {
        // Too many (the "at least one" floor): take back from the largest.
        auto it = std::max_element(cnt.begin(), cnt.end());
        *it -= 1;
        --given;
      }
      for (std::size_t r = 0; given < p; r = (r + 1) % rest.size()) {
        const auto i = rest[r].second;
        if (cnt[i] < k[i]) {
          cnt[i] += 1;
          ++given;
        }
      }
      compositions[cnt] = d;
    }
    for (const auto& [cnt, d] : compositions) {
      pattern pat;
      for (std::size_t i = 0; i < s.size(); ++i)
        pat.insert(pat.end(), cnt[i], s[i]);
      // Every order of the types along the pipeline where there are few (a small cluster whose
      // memory is tight may fit only with a roomy type between two others), else both orders of
      // the blocks.
      std::vector<pattern> orders;
      if (all_orders) {
        auto q = pat;
        std::sort(q.begin(), q.end());
        do
          orders.push_back(q);
        while (orders.size() <= max_orders && std::next_permutation(q.begin(), q.end()));
        if (orders.size() > max_orders)
          orders.clear();
      }
      if (orders.empty()) {
        orders.push_back(pat);
        orders.emplace_back(pat.rbegin(), pat.rend());
      }
      for (const auto& o : orders)
        add(pattern_set(d, o));
    }
  }
  return out;
}

// The replicas' device types of a layout, in replica order.
pattern_set patterns_of(const layout& l) {
  pattern_set out;
  for (std::uint32_t r = 0; r < l.data(); ++r)
    out.push_back(l.classes[l.class_of[r]].types);
  return out;
}

// Layouts one step away from (tensor, patterns): one stage's tensor degree halved or doubled; a
// stage's device type changed in one replica or in all replicas of a class, or exchanged between
// two replicas; two neighbouring stages' types, or whole stages, swapped; a replica added or
// removed; a stage split in two (halves of half the width on the same devices, or one half on
// other devices) or merged with the next.
std::vector<std::pair<std::vector<std::uint32_t>, pattern_set>> neighbours(const finder& f,
                                                                            const std::vector<std::uint32_t>& tensor,
                                                                            const pattern_set& patterns,
                                                                            const std::vector<std::uint32_t>& types) {
  std::vector<std::pair<std::vector<std::uint32_t>, pattern_set>> out;
  const auto p = static_cast<std::uint32_t>(tensor.size());
  const auto& degrees = f.tensor_degrees();
  const auto& m = f.target().workload;
  for (std::uint32_t s = 0; s < p; ++s)
    for (auto t : {tensor[s] / 2, tensor[s] * 2})
      if (std::find(degrees.begin(), degrees.end(), t) != degrees.end()) {
        auto next = tensor;
        next[s] = t;
        out.emplace_back(next, patterns);
        // A wider stage may leave room for fewer replicas only: also try with one to three less.
        if (t > tensor[s])
          for (std::size_t drop = 1; drop <= 3 && drop < patterns.size(); ++drop)
            out.emplace_back(next, pattern_set(patterns.begin(), patterns.end() - static_cast<std::ptrdiff_t>(drop)));
      }
  // Distinct patterns with the replicas that have them.
  std::map<pattern, std::vector<std::size_t>> classes;
  for (std::size_t r = 0; r < patterns.size(); ++r)
    classes[patterns[r]].push_back(r);
  for (const auto& [pat, members] : classes) {
    for (std::uint32_t s = 0; s < p; ++s)
      for (auto y : types) {
        if (y == pat[s])
          continue;
        auto all = patterns;
        for (auto r : members)
          all[r][s] = y;
        out.emplace_back(tensor, std::move(all));
        if (members.size() > 1) {
          auto one = patterns;
          one[members.front()][s] = y;
          out.emplace_back(tensor, std::move(one));
        }
      }
    for (std::uint32_t s = 0; s + 1 < p; ++s)
      if (pat[s] != pat[s + 1]) {
        auto swapped = patterns;
        for (auto r : members)
          std::swap(swapped[r][s], swapped[r][s + 1]);
        out.emplace_back(tensor, std::move(swapped));
      }
    if (patterns.size() < m.global_batch / m.micro_batch_sizes.front()) {
      auto more = patterns;
      more.push_back(pat);
      out.emplace_back(tensor, std::move(more));
    }
    if (patterns.size() > 1) {
      auto fewer = patterns;
      fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(members.back()));
      out.emplace_back(tensor, std::move(fewer));
    }
  }
  // Two replicas of different patterns exchange one stage's device types: the device counts stay
  // the same, so a layout whose every type is in use can still mix types within its replicas.
  for (auto a = classes.begin(); a != classes.end(); ++a)
    for (auto b = std::next(a); b != classes.end(); ++b)
      for (std::uint32_t s = 0; s < p; ++s)
        if (a->first[s] != b->first[s]) {
          auto exchanged = patterns;
          std::swap(exchanged[a->second.front()][s], exchanged[b->second.front()][s]);
          out.emplace_back(tensor, std::move(exchanged));
        }
  for (std::uint32_t s = 0; s + 1 < p; ++s)
    if (tensor[s] != tensor[s + 1]) {
      auto t2 = tensor;
      std::swap(t2[s], t2[s + 1]);
      auto pats = patterns;
      for (auto& x : pats)
        std::swap(x[s], x[s + 1]);
      out.emplace_back(std::move(t2), std::move(pats));
    }
  // A replica of one device type on idle devices.
  if (patterns.size() < m.global_batch / m.micro_batch_sizes.front())
    for (auto y : types) {
      auto more = patterns;
      more.emplace_back(p, y);
      out.emplace_back(tensor, std::move(more));
    }
  const auto allowed = [&](std::uint32_t t) { return std::find(degrees.begin(), degrees.end(), t) != degrees.end(); };
  for (std::uint32_t s = 0; s < p; ++s) {
    // Split a stage in two; the new half may be narrower, or twice as wide, and of another
    // device type (a half that needs a wider group to hold its layers is reached in one move).
    std::vector<std::uint32_t> widths;
    for (std::uint32_t w = tensor[s]; w >= 1; w /= 2)
      widths.push_back(w);
    if (allowed(2 * tensor[s]))
      widths.push_back(2 * tensor[s]);
    if (p < m.layers)
      for (auto width : widths)
        for (std::uint32_t side = 0; side < 2; ++side)
          for (auto y : types) {
            if (width == tensor[s] && side == 1 && y == patterns.front()[s])
              continue;
            auto t2 = tensor;
            t2.insert(t2.begin() + s, tensor[s]);
            t2[s + side] = width;
            auto pats = patterns;
            for (auto& x : pats) {
              x.insert(x.begin() + s, x[s]);
              x[s + side] = y;
            }
            out.emplace_back(std::move(t2), std::move(pats));
          }
    // Split a stage into two of half its width on the same devices.
    if (p < m.layers && tensor[s] > 1) {
      auto t2 = tensor;
      t2[s] /= 2;
      t2.insert(t2.begin() + s, t2[s]);
      auto pats = patterns;
      for (auto& x : pats)
        x.insert(x.begin() + s, x[s]);
      out.emplace_back(std::move(t2), std::move(pats));
    }
    // Merge a stage with the next, as wide as either or twice the wider.
    if (s + 1 < p) {
      const auto wide = std::max(tensor[s], tensor[s + 1]);
      const auto narrow = std::min(tensor[s], tensor[s + 1]);
      for (auto t : {narrow, wide, 2 * wide}) {
        if (!allowed(t) || (t == wide && narrow == wide && t != tensor[s]))
          continue;
        for (int keep = 0; keep < (patterns.front()[s] == patterns.front()[s + 1] ? 1 : 2); ++keep) {
          auto t2 = tensor;
          t2.erase(t2.begin() + s + 1);
          t2[s] = t;
          auto pats = patterns;
          for (auto& x : pats) {
            if (keep == 1)
              x[s] = x[s + 1];
            x.erase(x.begin() + s + 1);
          }
          out.emplace_back(std::move(t2), std::move(pats));
        }
      }
    }
  }
  return out;
}

std::string spec_key(const std::vector<std::uint32_t>& tensor, pattern_set patterns) {
  std::sort(patterns.begin(), patterns.end());
  std::string key;
  for (auto t : tensor)
    key += std::to_string(t) + ",";
  for (const auto& x : patterns) {
    key += "|";
    for (auto t : x)
      key += std::to_string(t) + ",";
  }
  return key;
}

// Searches layouts from `start`: moves to the best neighbour not yet on this walk each step (a
// worse one too, a few times in a row, to leave shallow local optima) and keeps the best layout
// seen. A neighbour another walk evaluated is taken from `explored`, not evaluated again.
}  // namespace

void detail::improve_layout(finder& f, candidate start, explored_layouts& explored) {
  const auto& hw = f.target().hardware;
  const auto& m = f.target().workload;
  const auto info = describe(hw);
  auto current = f.polish(std::move(start));
  auto best_seen = current;
  // Small layouts try every micro-batch size and recompute choice per neighbour and may take
  // three worse steps; large ones keep the current choices (revisited at the end) and take one.
  const bool small = current.where->used_devices <= 16;
  const int worse_steps = small ? 6 : 1;
  // A large layout's neighbours are evaluated with the current choices only, so those are part
  // of what was explored.
  const auto key_of = [&](const std::vector<std::uint32_t>& tensor, const pattern_set& patterns) {
    auto key = spec_key(tensor, patterns);
    if (!small)
      key += "#" + std::to_string(current.micro_batch) + (current.recompute ? "r" : "");
    return key;
  };
  std::set<std::string> walk{key_of(current.where->tensor, patterns_of(*current.where))};
  explored.try_emplace(*walk.begin(), current);
  int worse = 0;
  for (int step = 0; step < 64; ++step) {
    std::optional<candidate> best;
    for (auto& [tensor, patterns] : neighbours(f, current.where->tensor, patterns_of(*current.where), info.present)) {
      if (f.stopped())
        return;
      auto key = key_of(tensor, patterns);
      if (!walk.insert(key).second)
        continue;
      auto [known, fresh] = explored.try_emplace(std::move(key));
      if (fresh) {
        auto placed = detail::place(hw, tensor, patterns);
        if (!placed)
          continue;
        ++f.stats().layouts;
        auto l = std::make_shared<const layout>(std::move(*placed));
        for (bool rc : f.recompute_choices()) {
          if (!small && rc != current.recompute)
            continue;
          for (auto b : f.micro_batch_sizes()) {
            if ((!small && b != current.micro_batch) || m.global_batch / b < l->data())
              continue;
            auto split = f.quick_split(*l, b, rc);
            const bool fits = split.has_value();
            // Without a split that fits, the one closest to fitting still says how close it is.
            if (!fits && current.result.feasible())
              continue;
            if (!fits)
              split = f.memory_split(*l, b, rc);
            auto e = f.evaluate(l, *split, b, rc);
            candidate c{l, std::move(*split), b, rc, std::move(e)};
            if (c.result.valid && (!known->second || c.score() < known->second->score()))
              known->second = std::move(c);
          }
        }
      }
      const auto& c = known->second;
      if (c && (!current.result.feasible() || c->result.feasible()) && (!best || c->score() < best->score()))
        best = c;
    }
    if (!best)
      break;
    current = f.polish(std::move(*best));
    if (current.score() < best_seen.score() * (1 - 1e-9)) {
      best_seen = current;
      worse = 0;
    } else if (++worse > worse_steps) {
      break;
    }
  }
  current = best_seen;
  // Revisit the micro-batch size and recompute choice on the final layout.
  for (bool rc : f.recompute_choices())
    for (auto b : f.micro_batch_sizes()) {
      if (m.global_batch / b < current.where->data())
        continue;
      if (auto split = f.quick_split(*current.where, b, rc)) {
        auto e = f.evaluate(current.where, *split, b, rc);
        if (e.feasible())
          (void)f.polish(candidate{current.where, std::move(*split), b, rc, std::move(e)});
      }
    }
}

void detail::run_fast(finder& f) {
  const auto& prob = f.target();
  const auto& hw = prob.hardware;
  const auto& m = prob.workload;
  constexpr std::uint32_t patience = 6;
  const std::uint32_t max_replicas = m.global_batch / m.micro_batch_sizes.front();
  const bool small_cluster = hw.device_count() <= 16;
  const std::size_t pool_size = small_cluster ? 64 : 24;
  std::vector<candidate> pool;
  std::vector<candidate> closest;  // the layouts nearest to fitting, while none fits
  const auto closest_offer = [&](candidate c) {
    auto at = std::upper_bound(closest.begin(), closest.end(), c.score(),
                               [](double s, const candidate& x) { return s < x.score(); });
    closest.insert(at, std::move(c));
    if (closest.size() > 4)
      closest.pop_back();
  };
  // The best candidate of every pipeline degree: different shapes lead the local search to
  // different optima.
  std::map<std::uint32_t, candidate> best_by_depth;
  const auto pool_offer = [&](candidate c) {
    const auto depth = c.where->pipeline();
    if (auto it = best_by_depth.find(depth); it == best_by_depth.end() || c.result.step_time < it->second.result.step_time)
      best_by_depth.insert_or_assign(depth, c);
    const auto key = c.key();
    auto same = std::find_if(pool.begin(), pool.end(), [&](const candidate& x) { return x.key() == key; });
    if (same != pool.end()) {
      if (same->result.step_time <= c.result.step_time)
        return;
      pool.erase(same);
    }
    auto at = std::upper_bound(pool.begin(), pool.end(), c.result.step_time,
                               [](double t, const candidate& x) { return t < x.result.step_time; });
    pool.insert(at, std::move(c));
    if (pool.size() > pool_size)
      pool.pop_back();
  };
  const auto try_layout = [&](std::shared_ptr<const layout> l) {
    double best = 1e300;
    for (bool rc : f.recompute_choices()) {
      if (f.lower_bound(*l, rc) >= f.best_time())
        continue;
      for (auto b : f.micro_batch_sizes()) {
        if (m.global_batch / b < l->data())
          continue;
        auto split = f.quick_split(*l, b, rc);
        if (!split) {
          if (f.ranking().empty()) {
            // Remember how close the layout came: the reason for "no plan", and a seed.
            auto near = f.memory_split(*l, b, rc);
            auto e = f.evaluate(l, near, b, rc);
            if (e.valid)
              closest_offer(candidate{l, std::move(near), b, rc, std::move(e)});
          }
          continue;
        }
        auto e = f.evaluate(l, *split, b, rc);
        if (e.feasible()) {
          best = std::min(best, e.step_time);
          pool_offer(candidate{l, std::move(*split), b, rc, std::move(e)});
        }
      }
    }
    return best;
  };

  // Phase 1: uniform tensor degree, candidate replica sets, a quick split each.
  for (auto t : f.tensor_degrees()) {
    std::vector<std::uint32_t> groups(hw.types.size(), 0);
    std::uint32_t total = 0;
    for (const auto& n : hw.nodes) {
      groups[n.type] += static_cast<std::uint32_t>(n.devices.size()) / t;
      total += static_cast<std::uint32_t>(n.devices.size()) / t;
    }
    double best_t = 1e300;
    std::uint32_t misses = 0;
    for (std::uint32_t p = 1; p <= std::min(m.layers, total); ++p) {
      if (f.stopped())
        return;
      const std::vector<std::uint32_t> tensor(p, t);
      double best_p = 1e300;
      std::set<std::string> seen;
      for (auto& set : fast_pattern_sets(hw, groups, p, max_replicas, small_cluster)) {
        auto placed = detail::place(hw, tensor, set);
        if (!placed || !seen.insert(placed->signature).second)
          continue;
        ++f.stats().layouts;
        best_p = std::min(best_p, try_layout(std::make_shared<const layout>(std::move(*placed))));
      }
      if (best_p < best_t) {
        best_t = best_p;
        misses = 0;
      } else if (best_t < 1e300 && ++misses >= patience) {
        break;
      }
    }
  }
  // Phase 2: polish the most promising splits.
  for (auto c : pool) {
    if (f.stopped())
      return;
    f.polish(std::move(c));
  }
  // Phase 3: local search over layouts, from the best plan of each pipeline degree (different
  // shapes lead to different local optima) and the best plans overall; on small clusters from
  // every distinct layout of the pool as well.
  std::vector<candidate> seeds;
  for (const auto& [depth, c] : best_by_depth)
    seeds.push_back(c);
  std::stable_sort(seeds.begin(), seeds.end(),
                   [](const candidate& a, const candidate& b) { return a.result.step_time < b.result.step_time; });
  if (seeds.size() > 6)
    seeds.resize(6);
  for (const auto& c : f.ranking())
    seeds.push_back(c);
  if (small_cluster)
    seeds.insert(seeds.end(), pool.begin(), pool.end());
  // Without any plan that fits, start from the layouts that came closest.
  if (seeds.empty())
    seeds = closest;
  // The seeds share what was explored: each evaluates only new ground.
  explored_layouts explored;
  std::set<std::string> started;
  const std::size_t seed_count = small_cluster ? 64 : 8;
  std::size_t used = 0;
  for (const auto& c : seeds) {
    if (used >= seed_count || f.stopped())
      break;
    if (!started.insert(c.where->signature).second)
      continue;
    ++used;
    improve_layout(f, c, explored);
  }
  // Small clusters: iterated local search. Kick the best layout by a few random moves and search
  // again from there; the generator is seeded by the problem, so results repeat.
  if (!small_cluster || f.ranking().empty())
    return;
  std::uint64_t state = 0x5eed0000ull + hw.device_count() * 131 + m.layers;
  const auto next_random = [&state](std::uint64_t n) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<std::size_t>((z ^ (z >> 31)) % n);
  };
  const auto info = describe(hw);
  for (int kick = 0; kick < 24 && !f.stopped(); ++kick) {
    const auto& best = f.ranking().front();
    auto tensor = best.where->tensor;
    auto patterns = patterns_of(*best.where);
    const std::size_t moves = 2 + next_random(2);
    bool moved = true;
    for (std::size_t i = 0; i < moves && moved; ++i) {
      auto options = neighbours(f, tensor, patterns, info.present);
      moved = !options.empty();
      if (moved)
        std::tie(tensor, patterns) = options[next_random(options.size())];
    }
    auto placed = detail::place(hw, tensor, patterns);
    if (!placed)
      continue;
    ++f.stats().layouts;
    auto l = std::make_shared<const layout>(std::move(*placed));
    std::optional<candidate> start;
    for (bool rc : f.recompute_choices())
      for (auto b : f.micro_batch_sizes()) {
        if (m.global_batch / b < l->data())
          continue;
        auto split = f.quick_split(*l, b, rc);
        if (!split)
          continue;
        auto e = f.evaluate(l, *split, b, rc);
        if (e.feasible() && (!start || e.step_time < start->result.step_time))
          start = candidate{l, std::move(*split), b, rc, std::move(e)};
      }
    if (start)
      improve_layout(f, std::move(*start), explored);
  }
}

std::uint64_t exhaustive_size(const problem& p, std::uint64_t limit) {
  if (!validate(p).ok())
    return limit + 1;
  const auto& m = p.workload;
  finder f{p, 1, {}};
  std::uint64_t count = 0;
  const bool complete = for_each_exhaustive_layout(
      p, f.tensor_degrees(), [&](const std::vector<std::uint32_t>& tensor, const pattern_set& patterns) {
        std::uint64_t sizes = 0;
        for (auto b : m.micro_batch_sizes)
          sizes += m.global_batch / b >= patterns.size() ? 1 : 0;
        count += sizes * f.recompute_choices().size() * binomial(m.layers - 1, tensor.size() - 1);
        return count <= limit;
      });
  return complete ? std::min(count, limit + 1) : limit + 1;
}

namespace {

std::string budget_text(std::chrono::milliseconds b) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(b.count()) / 1000.0);
  return text;
}

expected<search_result> search_impl(const problem& p, const search_options& options) {
  if (auto why = detail::memory_shortfall(p); !why.empty())
    return status{errc::resource_exhausted, std::move(why)};
  const auto start = std::chrono::steady_clock::now();
  finder f{p, options.top, options.stop};
  if (options.budget.count() > 0)
    f.set_deadline(start + options.budget);
  auto mode = options.mode;
  if (mode == search_mode::automatic)
    mode = exhaustive_size(p, options.exhaustive_limit) <= options.exhaustive_limit ? search_mode::exhaustive
                                                                                     : search_mode::fast;
  f.stats().mode = mode;
  if (options.mode == search_mode::exhaustive && exhaustive_size(p, exhaustive_refusal) > exhaustive_refusal)
    return status{errc::invalid_argument, "an exhaustive search of this cluster and model would need more than " +
                                              std::to_string(exhaustive_refusal) +
                                              " evaluations; use the fast search (search_mode::fast, --search fast)"};
  if (mode == search_mode::exhaustive)
    run_exhaustive(f);
  else
    run_fast(f);
  search_result r;
  r.stats = f.stats();
  r.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (f.ranking().empty()) {
    if (r.stats.stopped)
      return status{errc::aborted,
                    options.stop.stop_requested() || options.budget.count() == 0
                        ? std::string{"the search was stopped before it found a plan"}
                        : "the search found no plan within its budget of " + budget_text(options.budget) + " (" +
                              std::to_string(p.workload.layers) + " layers on " +
                              std::to_string(p.hardware.device_count()) + " devices); allow more with --budget"};
    return status{errc::resource_exhausted, f.no_plan_reason()};
  }
  r.plans = f.plans();
  return r;
}

}  // namespace

expected<search_result> search(const problem& p, const search_options& options) {
  RK_RETURN_IF_ERROR(validate(p));
  try {
    return search_impl(p, options);
  } catch (const std::bad_alloc&) {
    // Every size the files allow is bounded, but the candidates of a search are not counted
    // ahead: running out of memory is an answer, not an abort.
    return status{errc::resource_exhausted,
                  "the search ran out of memory on a cluster of " + std::to_string(p.hardware.device_count()) +
                      " devices and a model of " + std::to_string(p.workload.layers) +
                      " layers; search a smaller cluster or fewer micro-batch sizes"};
  }
}

}  // namespace rekindle::planner
