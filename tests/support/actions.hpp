#pragma once

#include <concepts>
#include <type_traits>
#include <variant>
#include <vector>

namespace rekindle::testing {

/// The elements of `actions` that hold a T, in order, and the T's of those whose each() lists T's
/// (a bulk action): e.g. all_of<spawn_rank>(policy.on_tick()).
template <class T, class... Ts>
std::vector<T> all_of(const std::vector<std::variant<Ts...>>& actions) {
  std::vector<T> out;
  for (const auto& a : actions)
    std::visit(
        [&](const auto& x) {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, T>) {
            out.push_back(x);
          } else if constexpr (requires { { x.each() } -> std::same_as<std::vector<T>>; }) {
            for (auto& one : x.each())
              out.push_back(std::move(one));
          }
        },
        a);
  return out;
}

}  // namespace rekindle::testing
