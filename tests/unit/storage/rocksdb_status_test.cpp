#include "storage/rocksdb_status.hpp"

#include <gtest/gtest.h>
#include <rocksdb/io_status.h>

namespace rekindle::storage {
namespace {

errc code_of(const rocksdb::Status& s) { return from_rocksdb(s, "op").code(); }

TEST(rocksdb_status, ok_stays_ok) { EXPECT_TRUE(from_rocksdb(rocksdb::Status::OK(), "op").ok()); }

TEST(rocksdb_status, each_code_maps_to_its_meaning) {
  using rs = rocksdb::Status;
  EXPECT_EQ(code_of(rs::Corruption("bad block")), errc::data_loss);
  EXPECT_EQ(code_of(rs::NoSpace("disk full")), errc::resource_exhausted);
  EXPECT_EQ(code_of(rs::IOError(rs::kPathNotFound)), errc::not_found);
  EXPECT_EQ(code_of(rs::IOError("While open a file for lock: /x/LOCK", "Permission denied")),
            errc::permission_denied);
  EXPECT_EQ(code_of(rs::IOError("While lock file: /x/LOCK", "Resource temporarily unavailable")), errc::unavailable);
  EXPECT_EQ(code_of(rs::IOError("lock hold by current process, acquire time 1 acquiring thread 2: /x/LOCK",
                                "No locks available")),
            errc::unavailable);
  EXPECT_EQ(code_of(rs::IOError("read failed")), errc::io_error);
  EXPECT_EQ(code_of(rs::Busy()), errc::unavailable);
  EXPECT_EQ(code_of(rs::TryAgain()), errc::unavailable);
  EXPECT_EQ(code_of(rs::Incomplete()), errc::unavailable);
  EXPECT_EQ(code_of(rs::ShutdownInProgress()), errc::unavailable);
  EXPECT_EQ(code_of(rs::TimedOut()), errc::timeout);
  EXPECT_EQ(code_of(rs::NotFound()), errc::not_found);
  EXPECT_EQ(code_of(rs::InvalidArgument("x")), errc::invalid_argument);
  EXPECT_EQ(code_of(rs::NotSupported("x")), errc::unsupported);
  EXPECT_EQ(code_of(rs::Aborted("x")), errc::aborted);
  EXPECT_EQ(code_of(rs::MemoryLimit()), errc::resource_exhausted);
  EXPECT_EQ(code_of(rs::SpaceLimit()), errc::resource_exhausted);
  EXPECT_EQ(code_of(rs::ColumnFamilyDropped()), errc::failed_precondition);
}

TEST(rocksdb_status, the_retryable_and_data_loss_bits_survive) {
  rocksdb::IOStatus retry = rocksdb::IOStatus::IOError("flush failed");
  retry.SetRetryable(true);
  const auto r = from_rocksdb(retry, "write of key 'epoch'");
  EXPECT_EQ(r.code(), errc::io_error);
  EXPECT_EQ(r.message(), "write of key 'epoch': IO error: flush failed (retryable)");

  rocksdb::IOStatus lost = rocksdb::IOStatus::IOError("sst gone");
  lost.SetDataLoss(true);
  const auto l = from_rocksdb(lost, "open");
  EXPECT_EQ(l.code(), errc::data_loss) << "the data-loss bit wins over the I/O error code";
  EXPECT_NE(l.message().find("(data loss)"), std::string::npos) << l;
}

}  // namespace
}  // namespace rekindle::storage
