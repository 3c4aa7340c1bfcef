#pragma once

#include <filesystem>
#include <memory>

#include "common/expected.hpp"
#include "storage/state_store.hpp"

namespace rekindle::storage {

/// A standby's copy of another daemon's state store, kept by applying what the leader's
/// `state_store::changes_since` returns. The directory is an ordinary state store database: once
/// the replica is closed, `state_store::open` on it resumes the job where the copy stands. Its
/// position lives in the same database (key "replica/position"), written in the same synced batch
/// as the changes it counts, so a crash never leaves the two apart. docs/STORAGE.md, "Replication".
///
/// Thread-safety: one thread at a time.
class state_replica {
 public:
  /// Opens (or creates) the replica database in `dir` and reads its position. Errors: as
  /// `state_store::open`, and data_loss for a position that fails its checks.
  [[nodiscard]] static expected<std::unique_ptr<state_replica>> open(const std::filesystem::path& dir);

  state_replica(const state_replica&) = delete;
  state_replica& operator=(const state_replica&) = delete;
  ~state_replica();

  /// Where the copy stands; ask the leader for the changes from here.
  [[nodiscard]] const replica_position& position() const noexcept;
  /// Applies `chunk` in order, each batch with the position after it in one synced write: a reset
  /// first removes every key. Errors: invalid_argument (a batch that is not RocksDB's encoding), the
  /// write's; what was applied before the error stays, and the position says how far it got.
  [[nodiscard]] status apply(const replication_chunk& chunk);
  /// Closes the database; later calls fail with failed_precondition. Idempotent.
  [[nodiscard]] status close();

 private:
  struct impl;
  explicit state_replica(std::unique_ptr<impl> p) noexcept;
  std::unique_ptr<impl> impl_;
};

}  // namespace rekindle::storage
