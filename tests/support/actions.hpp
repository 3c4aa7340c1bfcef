#pragma once

#include <variant>
#include <vector>

namespace rekindle::testing {

/// The elements of `actions` that hold a T, in order: e.g. all_of<spawn_rank>(policy.on_tick()).
template <class T, class... Ts>
std::vector<T> all_of(const std::vector<std::variant<Ts...>>& actions) {
  std::vector<T> out;
  for (const auto& a : actions)
    if (const auto* x = std::get_if<T>(&a))
      out.push_back(*x);
  return out;
}

}  // namespace rekindle::testing
