#include "storage/rocksdb_status.hpp"

#include <rocksdb/io_status.h>

#include <string>

namespace rekindle::storage {

namespace {

errc code_of(const rocksdb::Status& s, const std::string& text, bool data_loss) {
  using rs = rocksdb::Status;
  if (data_loss || s.IsCorruption())
    return errc::data_loss;
  switch (s.code()) {
    case rs::kNotFound:
      return errc::not_found;
    case rs::kIOError:
      if (s.IsNoSpace() || s.subcode() == rs::kSpaceLimit)
        return errc::resource_exhausted;
      if (s.IsPathNotFound() || text.find("No such file or directory") != std::string::npos)
        return errc::not_found;
      if (text.find("Permission denied") != std::string::npos)
        return errc::permission_denied;
      // RocksDB's text when flock() on the LOCK file fails: another process has the database open.
      if (text.find("lock") != std::string::npos &&
          (text.find("Resource temporarily unavailable") != std::string::npos ||
           text.find("lock hold") != std::string::npos))
        return errc::unavailable;
      return errc::io_error;
    case rs::kBusy:
    case rs::kTryAgain:
    case rs::kIncomplete:
    case rs::kShutdownInProgress:
      return errc::unavailable;
    case rs::kTimedOut:
      return errc::timeout;
    case rs::kInvalidArgument:
      return errc::invalid_argument;
    case rs::kNotSupported:
      return errc::unsupported;
    case rs::kAborted:
      if (s.IsMemoryLimit())
        return errc::resource_exhausted;
      return errc::aborted;
    case rs::kColumnFamilyDropped:
    case rs::kExpired:
    case rs::kMergeInProgress:
    case rs::kCompactionTooLarge:
      return errc::failed_precondition;
    default:
      return errc::internal;
  }
}

}  // namespace

status from_rocksdb(const rocksdb::Status& s, std::string_view what) {
  if (s.ok())
    return {};
  // The retryable and data-loss bits are readable only through IOStatus; the copy keeps them.
  const rocksdb::IOStatus io = rocksdb::status_to_io_status(rocksdb::Status{s});
  const std::string text = s.ToString();
  std::string msg{what};
  msg += ": ";
  msg += text;
  if (io.GetRetryable())
    msg += " (retryable)";
  if (io.GetDataLoss())
    msg += " (data loss)";
  return status{code_of(s, text, io.GetDataLoss()), std::move(msg)};
}

rocksdb::Options store_db_options(bool create_if_missing, rocksdb::Env* env) {
  rocksdb::Options o;
  o.OptimizeForSmallDb();
  if (env != nullptr)
    o.env = env;
  o.create_if_missing = create_if_missing;
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  o.keep_log_file_num = 2;
  o.max_log_file_size = 1 << 20;
  // A torn tail of the write-ahead log after a crash is dropped; corruption before it fails open.
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // Replicas read the log (GetUpdatesSince): archived files stay an hour, 64 MiB at most.
  o.WAL_ttl_seconds = 3600;
  o.WAL_size_limit_MB = 64;
  return o;
}

}  // namespace rekindle::storage
