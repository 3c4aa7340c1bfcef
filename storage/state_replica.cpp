#include "storage/state_replica.hpp"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "storage/codec.hpp"
#include "storage/posix_error.hpp"
#include "storage/rocksdb_status.hpp"

namespace rekindle::storage {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view key_position = "replica/position";
// Every key of the store sorts below this one (keys are printable prefixes).
constexpr std::string_view key_after_all = "\xff";

std::string encode_position(const replica_position& p) {
  detail::record_writer w{detail::record_type::replica_position, 1};
  w.str(p.source);
  w.u64(p.next);
  w.u8(p.copying ? 1 : 0);
  w.str(p.copied);
  return w.finish();
}

expected<replica_position> decode_position(std::string_view v) {
  RK_ASSIGN_OR_RETURN(auto r, detail::record_reader::open(v, key_position, detail::record_type::replica_position, 1));
  replica_position p;
  p.source = r.str("source");
  p.next = r.u64("next");
  p.copying = r.u8("copying") != 0;
  p.copied = r.str("copied");
  RK_RETURN_IF_ERROR(r.finish());
  return p;
}

// Reads a varint32 of RocksDB's encoding at `at`; false when it runs past `end` or over 5 bytes.
bool read_varint32(std::string_view rep, std::size_t& at, std::uint32_t& out) {
  out = 0;
  for (int shift = 0; shift <= 28 && at < rep.size(); shift += 7) {
    const auto byte = static_cast<std::uint8_t>(rep[at++]);
    out |= static_cast<std::uint32_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0)
      return true;
  }
  return false;
}

// Checks a batch from the wire against RocksDB's encoding before RocksDB sees it (its own walk
// asserts on some malformed batches): a 12-byte header (sequence, count), then records of what the
// state store writes, in the default column family: put (1), delete (0), single delete (7), range
// delete (15), each with length-prefixed keys and values, and log data (3); the count must match.
status check_batch(std::string_view rep) {
  constexpr std::size_t header = 12;
  if (rep.size() < header)
    return status{errc::invalid_argument, std::to_string(rep.size()) + " bytes, shorter than a write batch's header"};
  std::uint32_t count = 0;
  for (int i = 0; i < 4; ++i)
    count |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(rep[8 + i])) << (8 * i);
  std::uint32_t found = 0;
  std::size_t at = header;
  const auto slice = [&](const char* what) -> status {
    std::uint32_t n = 0;
    if (!read_varint32(rep, at, n) || rep.size() - at < n)
      return status{errc::invalid_argument, std::string{what} + " at byte " + std::to_string(at) + " runs past the batch"};
    at += n;
    return {};
  };
  while (at < rep.size()) {
    const auto tag = static_cast<std::uint8_t>(rep[at]);
    const auto record_at = at++;
    switch (tag) {
      case 0x1:  // put
        RK_RETURN_IF_ERROR(slice("a put's key"));
        RK_RETURN_IF_ERROR(slice("a put's value"));
        ++found;
        break;
      case 0x0:  // delete
      case 0x7:  // single delete
        RK_RETURN_IF_ERROR(slice("a delete's key"));
        ++found;
        break;
      case 0xF:  // range delete
        RK_RETURN_IF_ERROR(slice("a range delete's first key"));
        RK_RETURN_IF_ERROR(slice("a range delete's end key"));
        ++found;
        break;
      case 0x3:  // log data: not a write
        RK_RETURN_IF_ERROR(slice("log data"));
        break;
      default:
        return status{errc::invalid_argument, "record tag " + std::to_string(tag) + " at byte " + std::to_string(record_at) +
                                                  " is not one the state store writes"};
    }
  }
  if (found != count)
    return status{errc::invalid_argument, "the header counts " + std::to_string(count) + " record(s), the batch holds " +
                                              std::to_string(found)};
  return {};
}

}  // namespace

struct state_replica::impl {
  fs::path dir;
  std::unique_ptr<rocksdb::DB> db;
  replica_position position;

  std::string where() const { return "state replica " + dir.string(); }
};

state_replica::state_replica(std::unique_ptr<impl> p) noexcept : impl_(std::move(p)) {}

state_replica::~state_replica() { (void)close(); }

expected<std::unique_ptr<state_replica>> state_replica::open(const fs::path& dir) {
  auto p = std::make_unique<impl>();
  p->dir = dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return detail::from_errno(ec.value(), p->where() + ": cannot create the directory");
  rocksdb::DB* raw = nullptr;
  if (auto s = rocksdb::DB::Open(store_db_options(true), dir.string(), &raw); !s.ok())
    return from_rocksdb(s, p->where() + ": open");
  p->db.reset(raw);
  std::string value;
  const auto s = p->db->Get(rocksdb::ReadOptions{}, key_position, &value);
  if (s.ok()) {
    auto pos = decode_position(value);
    if (!pos)
      return pos.to_status().with_context(p->where());
    p->position = std::move(*pos);
  } else if (!s.IsNotFound()) {
    return from_rocksdb(s, p->where() + ": read of its position");
  }
  return std::unique_ptr<state_replica>{new state_replica{std::move(p)}};
}

const replica_position& state_replica::position() const noexcept { return impl_->position; }

status state_replica::apply(const replication_chunk& chunk) {
  if (!impl_->db)
    return status{errc::failed_precondition, impl_->where() + " is closed"};
  rocksdb::WriteOptions wo;
  wo.sync = true;
  const auto last = chunk.batches.empty() ? 0 : chunk.batches.size() - 1;
  if (chunk.batches.empty() || chunk.reset) {
    // A reset clears the copy in the same write as its first part (or alone).
    rocksdb::WriteBatch b;
    if (chunk.reset)
      RK_RETURN_IF_ERROR(from_rocksdb(b.DeleteRange(rocksdb::Slice{}, key_after_all), impl_->where() + ": reset"));
    if (chunk.batches.empty()) {
      RK_RETURN_IF_ERROR(from_rocksdb(b.Put(key_position, encode_position(chunk.next)), impl_->where()));
      RK_RETURN_IF_ERROR(from_rocksdb(impl_->db->Write(wo, &b), impl_->where() + ": write"));
      impl_->position = chunk.next;
      return {};
    }
    RK_RETURN_IF_ERROR(from_rocksdb(impl_->db->Write(wo, &b), impl_->where() + ": reset"));
    impl_->position = replica_position{};
  }
  for (std::size_t i = 0; i < chunk.batches.size(); ++i) {
    RK_RETURN_IF_ERROR(check_batch(chunk.batches[i])
                           .with_context(impl_->where() + ": batch " + std::to_string(i + 1) + " of " +
                                         std::to_string(chunk.batches.size())));
    rocksdb::WriteBatch b{chunk.batches[i]};
    // Until the last batch of the chunk the position stays where it was: a crash in between
    // asks for the chunk again, and applying a batch twice ends at the same values.
    const auto& pos = i == last ? chunk.next : impl_->position;
    RK_RETURN_IF_ERROR(from_rocksdb(b.Put(key_position, encode_position(pos)), impl_->where()));
    RK_RETURN_IF_ERROR(from_rocksdb(impl_->db->Write(wo, &b), impl_->where() + ": write of batch " +
                                                                  std::to_string(i + 1) + " of " +
                                                                  std::to_string(chunk.batches.size())));
  }
  impl_->position = chunk.next;
  return {};
}

status state_replica::close() {
  if (!impl_ || !impl_->db)
    return {};
  auto s = from_rocksdb(impl_->db->Close(), impl_->where() + ": close");
  impl_->db.reset();
  return s;
}

}  // namespace rekindle::storage
