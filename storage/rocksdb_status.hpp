#pragma once

#include <rocksdb/options.h>
#include <rocksdb/status.h>

#include <string_view>

#include "common/status.hpp"

/// The edge between RocksDB and the project's errors. Only storage/ sources and tests include this
/// header; the rest of the project sees `rekindle::status` alone.

namespace rekindle::storage {

/// Converts a RocksDB status into ours, keeping what a caller decides on:
///
/// | RocksDB | errc |
/// |---|---|
/// | ok | ok |
/// | Corruption, or any status with the data-loss bit | data_loss |
/// | IOError / NoSpace, IOError / SpaceLimit, Aborted / MemoryLimit | resource_exhausted |
/// | IOError / PathNotFound, NotFound | not_found |
/// | IOError "Permission denied" | permission_denied |
/// | IOError while locking the database (another process holds it) | unavailable |
/// | IOError (other) | io_error |
/// | Busy, TryAgain, Incomplete, ShutdownInProgress | unavailable |
/// | TimedOut | timeout |
/// | InvalidArgument | invalid_argument |
/// | NotSupported | unsupported |
/// | Aborted | aborted |
/// | ColumnFamilyDropped, Expired, MergeInProgress, CompactionTooLarge | failed_precondition |
///
/// The message is "`what`: RocksDB's text", followed by " (retryable)" when RocksDB marked the
/// error retryable and " (data loss)" when it marked it as losing data. Every errc above except
/// data_loss, invalid_argument, unsupported and failed_precondition is one our callers retry.
[[nodiscard]] status from_rocksdb(const rocksdb::Status& s, std::string_view what);

/// The options every database of the state store opens with, a replica's too: small, a torn log
/// tail dropped after a crash, and the write-ahead log kept an hour (64 MiB at most) for replicas
/// to read (`state_store::changes_since`). `env`: another environment than RocksDB's (tests).
[[nodiscard]] rocksdb::Options store_db_options(bool create_if_missing, rocksdb::Env* env = nullptr);

}  // namespace rekindle::storage
