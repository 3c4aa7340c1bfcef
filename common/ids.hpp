#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string_view>

namespace rekindle {

/// An integer identifier that does not mix with other identifiers or bare integers.
///
/// `rank_id{3} == node_id{3}` does not compile, and neither does passing a step where an epoch is
/// expected. Thread-safety: a plain value.
template <class Tag, class Rep>
class strong_id {
 public:
  using rep_type = Rep;

  constexpr strong_id() noexcept = default;
  constexpr explicit strong_id(Rep value) noexcept : value_(value) {}

  [[nodiscard]] constexpr Rep value() const noexcept { return value_; }
  /// The identifier that follows this one (the next epoch, the next step).
  [[nodiscard]] constexpr strong_id next() const noexcept { return strong_id{static_cast<Rep>(value_ + 1)}; }

  friend constexpr auto operator<=>(strong_id, strong_id) noexcept = default;

  /// Lets serialization frameworks (CAF's inspectors) read and write the value.
  template <class Inspector>
  friend auto inspect(Inspector& f, strong_id& x) {
    return f(x.value_);
  }
  friend std::ostream& operator<<(std::ostream& os, strong_id id) { return os << +id.value_; }

 private:
  Rep value_{};
};

/// A node's index in the cluster configuration's node list.
using node_id = strong_id<struct node_id_tag, std::uint32_t>;
/// A global rank in the data-parallel world.
using rank_id = strong_id<struct rank_id_tag, std::uint32_t>;
/// The job epoch: bumped and persisted on every membership change; fences stale messages.
using epoch_t = strong_id<struct epoch_tag, std::uint64_t>;
/// A training step: the number of optimizer updates applied so far.
using step_t = strong_id<struct step_tag, std::uint64_t>;

/// Where a copy of a rank's state lies: the slot of the node that wrote it, a buddy node's
/// replica, or a checkpoint on disk.
enum class copy_kind : std::uint8_t { local_slot, buddy_replica, disk };
/// The number of copy kinds (a value read off the wire is checked against it).
inline constexpr std::uint8_t copy_kinds = 3;

/// For people: "local memory", "buddy memory", "disk".
[[nodiscard]] constexpr std::string_view to_string(copy_kind k) noexcept {
  switch (k) {
    case copy_kind::local_slot: return "local memory";
    case copy_kind::buddy_replica: return "buddy memory";
    case copy_kind::disk: return "disk";
  }
  return "unknown copy";
}

}  // namespace rekindle

template <class Tag, class Rep>
struct std::hash<rekindle::strong_id<Tag, Rep>> {
  std::size_t operator()(rekindle::strong_id<Tag, Rep> id) const noexcept {
    return std::hash<Rep>{}(id.value());
  }
};
