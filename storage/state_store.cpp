#include "storage/state_store.hpp"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/transaction_log.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <system_error>

#include "common/check.hpp"
#include "storage/codec.hpp"
#include "storage/event_writer.hpp"
#include "storage/posix_error.hpp"
#include "storage/rocksdb_status.hpp"

namespace rekindle::storage {

namespace fs = std::filesystem;
using detail::record_reader;
using detail::record_type;
using detail::record_writer;

std::string_view to_string(job_state s) noexcept {
  switch (s) {
    case job_state::created: return "created";
    case job_state::running: return "running";
    case job_state::recovering: return "recovering";
    case job_state::stopped: return "stopped";
    case job_state::failed: return "failed";
  }
  return "unknown";
}

std::optional<std::string_view> event::field(std::string_view key) const {
  for (const auto& [k, v] : fields)
    if (k == key)
      return std::string_view{v};
  return std::nullopt;
}

namespace {

// ---- keys (docs/STORAGE.md, "Keys") ----

// The format of the whole store; bumped when keys or records change incompatibly.
constexpr std::uint32_t store_format = 1;

constexpr std::string_view key_format = "meta/format";
constexpr std::string_view key_job = "job";
constexpr std::string_view key_epoch = "epoch";
constexpr std::string_view key_restarts = "restarts";
constexpr std::string_view prefix_member = "member/";
constexpr std::string_view prefix_rank = "rank/";
constexpr std::string_view prefix_ckpt = "ckpt/";
constexpr std::string_view prefix_event = "event/";
// A replica's own position (state_replica); never copied to another replica.
constexpr std::string_view prefix_replica = "replica/";

// Largest encoded event append_event accepts.
constexpr std::size_t max_event_bytes = 1 << 20;

std::string key_u64(std::string_view prefix, std::uint64_t v) {
  std::string k{prefix};
  detail::put_be64(k, v);
  return k;
}

std::string key_u32(std::string_view prefix, std::uint32_t v) {
  std::string k{prefix};
  detail::put_be32(k, v);
  return k;
}

// The smallest key greater than every key starting with `prefix`.
std::string prefix_end(std::string_view prefix) {
  std::string k{prefix};
  k.back() = static_cast<char>(k.back() + 1);
  return k;
}

// A key as people read it: "member/17", "event/42".
std::string describe_key(std::string_view key) {
  auto starts = [&](std::string_view p) { return key.substr(0, p.size()) == p; };
  for (auto p : {prefix_member, prefix_ckpt, prefix_event})
    if (starts(p) && key.size() == p.size() + 8)
      return std::string{p} + std::to_string(detail::get_be64(key.substr(p.size())));
  if (starts(prefix_rank) && key.size() == prefix_rank.size() + 4)
    return std::string{prefix_rank} + std::to_string(detail::get_be32(key.substr(prefix_rank.size())));
  std::string out;
  for (char c : key) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(c);
    } else {
      static constexpr char digits[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(digits[(static_cast<unsigned char>(c) >> 4) & 0xf]);
      out.push_back(digits[static_cast<unsigned char>(c) & 0xf]);
    }
  }
  return out;
}

std::int64_t ns(clock::wall_time t) noexcept { return t.time_since_epoch().count(); }
std::int64_t ns(clock::time_point t) noexcept { return t.time_since_epoch().count(); }
clock::wall_time wall_from(std::int64_t v) { return clock::wall_time{clock::duration{v}}; }
clock::time_point steady_from(std::int64_t v) { return clock::time_point{clock::duration{v}}; }

// ---- records (docs/STORAGE.md, "Values") ----

std::string encode_format(std::uint32_t format, clock::wall_time created) {
  record_writer w{record_type::store_format, 1};
  w.u32(format);
  w.i64(ns(created));
  return w.finish();
}

std::string encode_u64(record_type type, std::uint64_t v) {
  record_writer w{type, 1};
  w.u64(v);
  return w.finish();
}

expected<std::uint64_t> decode_u64(std::string_view value, std::string_view key, record_type type,
                                   std::string_view field) {
  RK_ASSIGN_OR_RETURN(auto r, record_reader::open(value, key, type, 1));
  const auto v = r.u64(field);
  RK_RETURN_IF_ERROR(r.finish());
  return v;
}

std::string encode_job(const job_record& j) {
  record_writer w{record_type::job, 1};
  w.str(j.name);
  w.str(j.config_source);
  w.u64(j.config_hash);
  w.u8(static_cast<std::uint8_t>(j.state));
  w.str(j.reason);
  w.i64(ns(j.since));
  return w.finish();
}

expected<job_record> decode_job(std::string_view value, std::string_view key) {
  RK_ASSIGN_OR_RETURN(auto r, record_reader::open(value, key, record_type::job, 1));
  job_record j;
  j.name = r.str("name");
  j.config_source = r.str("config_source");
  j.config_hash = r.u64("config_hash");
  const auto s = r.u8("state");
  if (r.ok() && (s < static_cast<std::uint8_t>(job_state::created) || s > static_cast<std::uint8_t>(job_state::failed)))
    r.fail("state", "value " + std::to_string(s) + " is not a job state (1..5)");
  j.state = static_cast<job_state>(s);
  j.reason = r.str("reason");
  j.since = wall_from(r.i64("since"));
  RK_RETURN_IF_ERROR(r.finish());
  return j;
}

std::string encode_membership(const membership& m) {
  record_writer w{record_type::membership, 2};
  w.u64(m.epoch.value());
  w.u32(static_cast<std::uint32_t>(m.ranks.size()));
  for (const auto& r : m.ranks) {
    w.u32(r.rank.value());
    w.u32(r.node.value());
    w.u32(r.local_index);
    w.str(r.device);
    w.bytes(r.address);
  }
  w.u32(static_cast<std::uint32_t>(m.spares_in_use.size()));
  for (auto n : m.spares_in_use)
    w.u32(n.value());
  w.u32(static_cast<std::uint32_t>(m.stages.size()));
  for (auto blocks : m.stages)
    w.u32(blocks);
  return w.finish();
}

expected<membership> decode_membership(std::string_view value, std::string_view key) {
  RK_ASSIGN_OR_RETURN(auto r, record_reader::open(value, key, record_type::membership, 2));
  membership m;
  m.epoch = epoch_t{r.u64("epoch")};
  const auto n = r.count("ranks", 4 * 5);
  m.ranks.reserve(n);
  for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
    const std::string f = "ranks[" + std::to_string(i) + "]";
    rank_member x;
    x.rank = rank_id{r.u32(f + ".rank")};
    x.node = node_id{r.u32(f + ".node")};
    x.local_index = r.u32(f + ".local_index");
    x.device = r.str(f + ".device");
    x.address = r.bytes(f + ".address");
    m.ranks.push_back(std::move(x));
  }
  const auto s = r.count("spares_in_use", 4);
  for (std::uint32_t i = 0; i < s && r.ok(); ++i)
    m.spares_in_use.emplace_back(r.u32("spares_in_use[" + std::to_string(i) + "]"));
  if (r.version() >= 2) {
    const auto p = r.count("stages", 4);
    for (std::uint32_t i = 0; i < p && r.ok(); ++i)
      m.stages.push_back(r.u32("stages[" + std::to_string(i) + "]"));
  }
  RK_RETURN_IF_ERROR(r.finish());
  return m;
}

std::string encode_rank(const rank_record& x) {
  record_writer w{record_type::rank, 1};
  w.u32(x.rank.value());
  w.u32(x.restarts);
  w.u8(x.snapshot_step ? 1 : 0);
  w.u64(x.snapshot_step ? x.snapshot_step->value() : 0);
  return w.finish();
}

expected<rank_record> decode_rank(std::string_view value, std::string_view key) {
  RK_ASSIGN_OR_RETURN(auto r, record_reader::open(value, key, record_type::rank, 1));
  rank_record x;
  x.rank = rank_id{r.u32("rank")};
  x.restarts = r.u32("restarts");
  const auto has = r.u8("has_snapshot_step");
  if (r.ok() && has > 1)
    r.fail("has_snapshot_step", "value " + std::to_string(has) + " is not 0 or 1");
  const auto step = r.u64("snapshot_step");
  if (has == 1)
    x.snapshot_step = step_t{step};
  RK_RETURN_IF_ERROR(r.finish());
  return x;
}

std::string encode_checkpoint(const checkpoint_manifest& m) {
  record_writer w{record_type::checkpoint, 1};
  w.u64(m.step.value());
  w.u32(m.world_size);
  w.u32(m.layout_version);
  w.u8(m.committed ? 1 : 0);
  w.i64(ns(m.commit_time));
  w.u32(static_cast<std::uint32_t>(m.shards.size()));
  for (const auto& s : m.shards) {
    w.u32(s.rank.value());
    w.str(s.file);
    w.u64(s.size);
    w.u64(s.checksum);
  }
  return w.finish();
}

expected<checkpoint_manifest> decode_checkpoint(std::string_view value, std::string_view key) {
  RK_ASSIGN_OR_RETURN(auto r, record_reader::open(value, key, record_type::checkpoint, 1));
  checkpoint_manifest m;
  m.step = step_t{r.u64("step")};
  m.world_size = r.u32("world_size");
  m.layout_version = r.u32("layout_version");
  const auto c = r.u8("committed");
  if (r.ok() && c > 1)
    r.fail("committed", "value " + std::to_string(c) + " is not 0 or 1");
  m.committed = c == 1;
  m.commit_time = wall_from(r.i64("commit_time"));
  const auto n = r.count("shards", 4 + 4 + 8 + 8);
  m.shards.reserve(n);
  for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
    const std::string f = "shards[" + std::to_string(i) + "]";
    shard_entry s;
    s.rank = rank_id{r.u32(f + ".rank")};
    s.file = r.str(f + ".file");
    s.size = r.u64(f + ".size");
    s.checksum = r.u64(f + ".checksum");
    m.shards.push_back(std::move(s));
  }
  RK_RETURN_IF_ERROR(r.finish());
  return m;
}

std::string encode_event(const event& e) {
  record_writer w{record_type::event, 1};
  w.u64(e.seq);
  w.i64(ns(e.wall));
  w.i64(ns(e.steady));
  w.str(e.kind);
  w.u64(e.epoch.value());
  w.u8(e.rank ? 1 : 0);
  w.u32(e.rank ? e.rank->value() : 0);
  w.u8(e.node ? 1 : 0);
  w.u32(e.node ? e.node->value() : 0);
  w.u32(static_cast<std::uint32_t>(e.fields.size()));
  for (const auto& [k, v] : e.fields) {
    w.str(k);
    w.str(v);
  }
  return w.finish();
}

expected<event> decode_event(std::string_view value, std::string_view key, std::uint64_t key_seq) {
  RK_ASSIGN_OR_RETURN(auto r, record_reader::open(value, key, record_type::event, 1));
  event e;
  e.seq = r.u64("seq");
  if (r.ok() && e.seq != key_seq)
    r.fail("seq", "value " + std::to_string(e.seq) + " differs from the key's " + std::to_string(key_seq));
  e.wall = wall_from(r.i64("wall"));
  e.steady = steady_from(r.i64("steady"));
  e.kind = r.str("kind");
  e.epoch = epoch_t{r.u64("epoch")};
  const auto has_rank = r.u8("has_rank");
  const auto rank = r.u32("rank");
  const auto has_node = r.u8("has_node");
  const auto node = r.u32("node");
  if (r.ok() && (has_rank > 1 || has_node > 1))
    r.fail(has_rank > 1 ? "has_rank" : "has_node", "value is not 0 or 1");
  if (has_rank == 1)
    e.rank = rank_id{rank};
  if (has_node == 1)
    e.node = node_id{node};
  const auto n = r.count("fields", 8);
  e.fields.reserve(n);
  for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
    const std::string f = "fields[" + std::to_string(i) + "]";
    auto k = r.str(f + ".key");
    auto v = r.str(f + ".value");
    e.fields.emplace_back(std::move(k), std::move(v));
  }
  RK_RETURN_IF_ERROR(r.finish());
  return e;
}

// A shard's file name is a plain name inside the checkpoint directory.
bool plain_file_name(std::string_view f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string_view::npos &&
         f.find('\0') == std::string_view::npos;
}

}  // namespace

// ---- impl ----

struct state_store::impl {
  fs::path dir;
  state_store_options options;
  real_clock own_clock;
  const clock* clk = nullptr;
  std::unique_ptr<rocksdb::DB> db;
  std::atomic<std::uint64_t> epoch{0};
  std::unique_ptr<detail::event_writer> events;

  status closed() const { return status{errc::failed_precondition, "state store " + dir.string() + " is closed"}; }

  // Reads `key`; nullopt when absent.
  expected<std::optional<std::string>> get(std::string_view key) const {
    if (!db)
      return closed();
    std::string value;
    const auto s = db->Get(rocksdb::ReadOptions{}, rocksdb::Slice{key.data(), key.size()}, &value);
    if (s.IsNotFound())
      return std::optional<std::string>{};
    if (!s.ok())
      return from_rocksdb(s, "state store " + dir.string() + ": read of key '" + describe_key(key) + "'");
    return std::optional<std::string>{std::move(value)};
  }

  status write(rocksdb::WriteBatch& batch, bool sync, std::string_view what) {
    if (!db)
      return closed();
    if (options.refuse_write)
      RK_RETURN_IF_ERROR(options.refuse_write(what));
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    return from_rocksdb(db->Write(wo, &batch), "state store " + dir.string() + ": " + std::string{what});
  }

  // Makes every write before it durable, without holding up writes made meanwhile.
  status sync_log(std::string_view what) {
    if (!db)
      return closed();
    return from_rocksdb(db->SyncWAL(), "state store " + dir.string() + ": " + std::string{what} + " (log sync)");
  }

  status put(std::string_view key, const std::string& value, bool sync) {
    rocksdb::WriteBatch b;
    b.Put(rocksdb::Slice{key.data(), key.size()}, value);
    return write(b, sync, "write of key '" + describe_key(key) + "'");
  }

  // Calls fn(key, value) for keys in [from, prefix_end(prefix)) in order until it returns false
  // or fails.
  template <class Fn>
  status scan(std::string_view prefix, std::string_view from, Fn&& fn) const {
    if (!db)
      return closed();
    const std::string end = prefix_end(prefix);
    const rocksdb::Slice upper{end};
    rocksdb::ReadOptions ro;
    ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it{db->NewIterator(ro)};
    for (it->Seek(rocksdb::Slice{from.data(), from.size()}); it->Valid(); it->Next()) {
      const auto k = it->key();
      const auto v = it->value();
      expected<bool> more = fn(std::string_view{k.data(), k.size()}, std::string_view{v.data(), v.size()});
      if (!more)
        return std::move(more).error();
      if (!*more)
        return {};
    }
    return from_rocksdb(it->status(), "state store " + dir.string() + ": scan of '" + std::string{prefix} + "'");
  }

  // Calls fn(key, value) for the keys with `prefix`, newest first, until it returns false or fails.
  template <class Fn>
  status scan_backward(std::string_view prefix, Fn&& fn) const {
    if (!db)
      return closed();
    const std::string lower_key{prefix};
    const rocksdb::Slice lower{lower_key};
    rocksdb::ReadOptions ro;
    ro.iterate_lower_bound = &lower;
    std::unique_ptr<rocksdb::Iterator> it{db->NewIterator(ro)};
    for (it->SeekForPrev(prefix_end(prefix)); it->Valid(); it->Prev()) {
      const auto k = it->key();
      if (!k.starts_with(rocksdb::Slice{prefix.data(), prefix.size()}))
        continue;  // the bound itself
      const auto v = it->value();
      expected<bool> more = fn(std::string_view{k.data(), k.size()}, std::string_view{v.data(), v.size()});
      if (!more)
        return std::move(more).error();
      if (!*more)
        return {};
    }
    return from_rocksdb(it->status(), "state store " + dir.string() + ": backward scan of '" + std::string{prefix} + "'");
  }

  // The newest key with `prefix`, or nullopt.
  expected<std::optional<std::pair<std::string, std::string>>> last_with_prefix(std::string_view prefix) const {
    if (!db)
      return closed();
    const std::string lower_key{prefix};
    const rocksdb::Slice lower{lower_key};
    rocksdb::ReadOptions ro;
    ro.iterate_lower_bound = &lower;
    std::unique_ptr<rocksdb::Iterator> it{db->NewIterator(ro)};
    it->SeekForPrev(prefix_end(prefix));
    // SeekForPrev lands on the last key <= the bound; the bound itself never has the prefix.
    if (it->Valid() && it->key().starts_with(rocksdb::Slice{prefix.data(), prefix.size()}))
      return std::optional<std::pair<std::string, std::string>>{
          std::pair{it->key().ToString(), it->value().ToString()}};
    RK_RETURN_IF_ERROR(from_rocksdb(it->status(), "state store " + dir.string() + ": seek in '" +
                                                      std::string{prefix} + "'"));
    return std::optional<std::pair<std::string, std::string>>{};
  }

  expected<std::vector<checkpoint_manifest>> manifests(bool committed_only) const {
    std::vector<checkpoint_manifest> out;
    RK_RETURN_IF_ERROR(scan(prefix_ckpt, prefix_ckpt, [&](std::string_view k, std::string_view v) -> expected<bool> {
      RK_ASSIGN_OR_RETURN(auto m, decode_checkpoint(v, describe_key(k)));
      if (!committed_only || m.committed)
        out.push_back(std::move(m));
      return true;
    }));
    std::reverse(out.begin(), out.end());
    return out;
  }

  expected<event> read_event(std::uint64_t seq) const {
    const std::string k = key_u64(prefix_event, seq);
    RK_ASSIGN_OR_RETURN(auto v, get(k));
    if (!v)
      return status{errc::data_loss, "state store " + dir.string() + ": key '" + describe_key(k) +
                                         "' is missing though its time index names it"};
    return decode_event(*v, describe_key(k), seq);
  }
};

state_store::state_store(std::unique_ptr<impl> p) noexcept : impl_(std::move(p)) {}

state_store::~state_store() { (void)close(); }

expected<std::unique_ptr<state_store>> state_store::open(const fs::path& dir, state_store_options options) {
  auto p = std::make_unique<impl>();
  p->dir = dir;
  p->options = options;
  p->clk = options.clk != nullptr ? options.clk : &p->own_clock;
  const std::string where = "state store " + dir.string();

  std::error_code ec;
  const bool dir_exists = fs::is_directory(dir, ec);
  if (!options.create_if_missing) {
    if (!dir_exists)
      return status{errc::not_found, where + ": no such directory"};
    if (!fs::exists(dir / "CURRENT", ec))
      return status{errc::not_found, where + ": the directory holds no database (no CURRENT file)"};
  } else if (!dir_exists) {
    fs::create_directories(dir, ec);
    if (ec)
      return detail::from_errno(ec.value(), where + ": cannot create the directory");
  }

  const rocksdb::Options o = store_db_options(options.create_if_missing, options.env);
  rocksdb::DB* raw = nullptr;
  if (auto s = rocksdb::DB::Open(o, dir.string(), &raw); !s.ok())
    return from_rocksdb(s, where + ": open");
  p->db.reset(raw);

  // The format record: written into a new database, checked in an existing one.
  RK_ASSIGN_OR_RETURN(auto format, p->get(key_format));
  if (!format) {
    std::unique_ptr<rocksdb::Iterator> it{p->db->NewIterator(rocksdb::ReadOptions{})};
    it->SeekToFirst();
    if (it->Valid())
      return status{errc::data_loss, where + ": the database has data (first key '" +
                                         describe_key(it->key().ToString()) + "') but no format record '" +
                                         std::string{key_format} + "'"};
    RK_RETURN_IF_ERROR(from_rocksdb(it->status(), where + ": scan"));
    RK_RETURN_IF_ERROR(p->put(key_format, encode_format(store_format, p->clk->wall_now()), true));
  } else {
    RK_ASSIGN_OR_RETURN(auto r, record_reader::open(*format, key_format, record_type::store_format, 1));
    const auto v = r.u32("format");
    (void)r.i64("created");
    RK_RETURN_IF_ERROR(r.finish().with_context(where));
    if (v > store_format)
      return status{errc::unsupported, where + ": store format " + std::to_string(v) +
                                           " is newer than this build reads (" + std::to_string(store_format) +
                                           ")"};
  }

  RK_ASSIGN_OR_RETURN(auto epoch, p->get(key_epoch));
  if (epoch) {
    RK_ASSIGN_OR_RETURN(auto e, decode_u64(*epoch, key_epoch, record_type::epoch, "epoch"));
    p->epoch.store(e);
  }

  std::uint64_t last_seq = 0;
  RK_ASSIGN_OR_RETURN(auto last, p->last_with_prefix(prefix_event));
  if (last) {
    if (last->first.size() != prefix_event.size() + 8)
      return status{errc::data_loss, where + ": key '" + describe_key(last->first) + "' is not an event key"};
    last_seq = detail::get_be64(std::string_view{last->first}.substr(prefix_event.size()));
  }

  impl* raw_impl = p.get();
  // Each batch written, then the log synced outside the write path: the supervisor's own writes
  // (a rank's snapshot step, every few steps) do not queue behind this fsync, which takes seconds
  // on a disk busy writing back other data (one waited 364 ms behind it here), and a reader of
  // the log (`rekindle events`) waits only for the write.
  p->events = std::make_unique<detail::event_writer>(
      [raw_impl](const std::vector<detail::pending_event>& batch) {
        rocksdb::WriteBatch b;
        for (const auto& e : batch)
          b.Put(key_u64(prefix_event, e.seq), e.value);
        return raw_impl->write(b, false,
                               "event log: write of events " + std::to_string(batch.front().seq) + ".." +
                                   std::to_string(batch.back().seq));
      },
      last_seq, options.event_batch, options.event_delay, options.event_max_pending,
      [raw_impl] { return raw_impl->sync_log("event log"); });
  return std::unique_ptr<state_store>{new state_store{std::move(p)}};
}

status state_store::close() {
  if (!impl_ || !impl_->db)
    return {};
  status st;
  if (impl_->events)
    st = impl_->events->stop();
  impl_->events.reset();
  auto s = from_rocksdb(impl_->db->Close(), "state store " + impl_->dir.string() + ": close");
  impl_->db.reset();
  return st.ok() ? s : st;
}

const fs::path& state_store::path() const noexcept { return impl_->dir; }

// ---- job ----

status state_store::put_job(const job_record& job) { return impl_->put(key_job, encode_job(job), true); }

expected<std::optional<job_record>> state_store::job() const {
  RK_ASSIGN_OR_RETURN(auto v, impl_->get(key_job));
  if (!v)
    return std::optional<job_record>{};
  RK_ASSIGN_OR_RETURN(auto j, decode_job(*v, key_job));
  return std::optional<job_record>{std::move(j)};
}

// ---- epoch ----

epoch_t state_store::epoch() const noexcept { return epoch_t{impl_->epoch.load()}; }

status state_store::put_epoch(epoch_t e) {
  if (const auto stored = impl_->epoch.load(); e.value() <= stored)
    return status{errc::failed_precondition, "epoch " + std::to_string(e.value()) +
                                                 " is not newer than the stored epoch " + std::to_string(stored)};
  RK_RETURN_IF_ERROR(impl_->put(key_epoch, encode_u64(record_type::epoch, e.value()), true));
  impl_->epoch.store(e.value());
  return {};
}

// ---- membership ----

status state_store::put_membership(membership m) {
  if (m.epoch > epoch())
    return status{errc::failed_precondition, "membership of epoch " + std::to_string(m.epoch.value()) +
                                                 " is ahead of the current epoch " + std::to_string(epoch().value())};
  std::sort(m.ranks.begin(), m.ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  for (std::size_t i = 1; i < m.ranks.size(); ++i)
    if (m.ranks[i].rank == m.ranks[i - 1].rank)
      return status{errc::invalid_argument, "membership of epoch " + std::to_string(m.epoch.value()) + " lists rank " +
                                                std::to_string(m.ranks[i].rank.value()) + " twice"};
  return impl_->put(key_u64(prefix_member, m.epoch.value()), encode_membership(m), true);
}

expected<std::optional<membership>> state_store::latest_membership() const {
  RK_ASSIGN_OR_RETURN(auto last, impl_->last_with_prefix(prefix_member));
  if (!last)
    return std::optional<membership>{};
  RK_ASSIGN_OR_RETURN(auto m, decode_membership(last->second, describe_key(last->first)));
  return std::optional<membership>{std::move(m)};
}

expected<std::optional<epoch_t>> state_store::world_since() const {
  std::optional<std::vector<rank_id>> newest;
  std::optional<epoch_t> since;
  RK_RETURN_IF_ERROR(impl_->scan_backward(prefix_member, [&](std::string_view k, std::string_view v) -> expected<bool> {
    RK_ASSIGN_OR_RETURN(auto m, decode_membership(v, describe_key(k)));
    std::vector<rank_id> ids;
    ids.reserve(m.ranks.size());
    for (const auto& r : m.ranks)
      ids.push_back(r.rank);
    if (!newest)
      newest = std::move(ids);
    else if (ids != *newest)
      return false;
    since = m.epoch;
    return true;
  }));
  return since;
}

// ---- ranks ----

expected<rank_record> state_store::rank(rank_id r) const {
  const std::string k = key_u32(prefix_rank, r.value());
  RK_ASSIGN_OR_RETURN(auto v, impl_->get(k));
  if (!v)
    return rank_record{r, 0, std::nullopt};
  return decode_rank(*v, describe_key(k));
}

expected<std::uint64_t> state_store::total_restarts() const {
  RK_ASSIGN_OR_RETURN(auto v, impl_->get(key_restarts));
  if (!v)
    return std::uint64_t{0};
  return decode_u64(*v, key_restarts, record_type::restarts, "total");
}

expected<restart_counts> state_store::record_restart(rank_id r) {
  RK_ASSIGN_OR_RETURN(auto rec, rank(r));
  RK_ASSIGN_OR_RETURN(auto total, total_restarts());
  rec.restarts += 1;
  total += 1;
  rocksdb::WriteBatch b;
  b.Put(key_u32(prefix_rank, r.value()), encode_rank(rec));
  b.Put(key_restarts, encode_u64(record_type::restarts, total));
  RK_RETURN_IF_ERROR(impl_->write(b, true, "restart of rank " + std::to_string(r.value())));
  return restart_counts{rec.restarts, total};
}

status state_store::set_snapshot_step(rank_id r, step_t step) {
  auto rec = rank(r);
  if (!rec)
    return std::move(rec).error();
  rec->snapshot_step = step;
  return impl_->put(key_u32(prefix_rank, r.value()), encode_rank(*rec), false);
}

expected<std::vector<rank_record>> state_store::ranks() const {
  std::vector<rank_record> out;
  RK_RETURN_IF_ERROR(impl_->scan(prefix_rank, prefix_rank, [&](std::string_view k, std::string_view v) -> expected<bool> {
    RK_ASSIGN_OR_RETURN(auto x, decode_rank(v, describe_key(k)));
    out.push_back(x);
    return true;
  }));
  return out;
}

// ---- checkpoints ----

status state_store::put_checkpoint(checkpoint_manifest m) {
  const std::string what = "checkpoint of step " + std::to_string(m.step.value());
  std::sort(m.shards.begin(), m.shards.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  for (std::size_t i = 0; i < m.shards.size(); ++i) {
    const auto& s = m.shards[i];
    if (s.rank.value() >= m.world_size)
      return status{errc::invalid_argument, what + ": shard of rank " + std::to_string(s.rank.value()) +
                                                " is outside the world of " + std::to_string(m.world_size)};
    if (i > 0 && s.rank == m.shards[i - 1].rank)
      return status{errc::invalid_argument, what + ": rank " + std::to_string(s.rank.value()) + " has two shards"};
    if (!plain_file_name(s.file))
      return status{errc::invalid_argument, what + ": shard file name '" + s.file + "' of rank " +
                                                std::to_string(s.rank.value()) +
                                                " is not a plain name inside the checkpoint directory"};
  }
  const std::string k = key_u64(prefix_ckpt, m.step.value());
  RK_ASSIGN_OR_RETURN(auto old, impl_->get(k));
  if (old) {
    RK_ASSIGN_OR_RETURN(auto prev, decode_checkpoint(*old, describe_key(k)));
    if (prev.committed)
      return status{errc::failed_precondition, what + " is committed and cannot change"};
  }
  m.committed = false;
  m.commit_time = {};
  return impl_->put(k, encode_checkpoint(m), false);
}

status state_store::commit_checkpoint(step_t step) {
  const std::string what = "checkpoint of step " + std::to_string(step.value());
  const std::string k = key_u64(prefix_ckpt, step.value());
  RK_ASSIGN_OR_RETURN(auto v, impl_->get(k));
  if (!v)
    return status{errc::not_found, what + " has no manifest"};
  RK_ASSIGN_OR_RETURN(auto m, decode_checkpoint(*v, describe_key(k)));
  if (m.committed)
    return status{errc::failed_precondition, what + " is already committed"};
  if (m.world_size == 0 || m.shards.size() != m.world_size) {
    std::string missing;
    std::size_t shown = 0, n = 0, at = 0;
    for (std::uint32_t r = 0; r < m.world_size; ++r) {
      if (at < m.shards.size() && m.shards[at].rank.value() == r) {
        ++at;
        continue;
      }
      ++n;
      if (shown++ < 8)
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (n > shown)
      missing += ", ...";
    return status{errc::failed_precondition, what + ": " + std::to_string(n) + " of " +
                                                 std::to_string(m.world_size) + " shards missing (ranks " + missing +
                                                 ")"};
  }
  m.committed = true;
  m.commit_time = impl_->clk->wall_now();
  return impl_->put(k, encode_checkpoint(m), true);
}

expected<checkpoint_manifest> state_store::checkpoint(step_t step) const {
  const std::string k = key_u64(prefix_ckpt, step.value());
  RK_ASSIGN_OR_RETURN(auto v, impl_->get(k));
  if (!v)
    return status{errc::not_found, "checkpoint of step " + std::to_string(step.value()) + " has no manifest"};
  return decode_checkpoint(*v, describe_key(k));
}

expected<std::vector<checkpoint_manifest>> state_store::committed_checkpoints() const { return impl_->manifests(true); }

expected<std::vector<checkpoint_manifest>> state_store::checkpoints() const { return impl_->manifests(false); }

status state_store::delete_checkpoint(step_t step) {
  const std::string k = key_u64(prefix_ckpt, step.value());
  RK_ASSIGN_OR_RETURN(auto v, impl_->get(k));
  if (!v)
    return status{errc::not_found, "checkpoint of step " + std::to_string(step.value()) + " has no manifest"};
  rocksdb::WriteBatch b;
  b.Delete(k);
  return impl_->write(b, true, "delete of key '" + describe_key(k) + "'");
}

// ---- events ----

expected<std::uint64_t> state_store::append_event(event e) {
  if (!impl_->events)
    return impl_->closed();
  if (e.kind.empty())
    return status{errc::invalid_argument, "event has no kind"};
  for (std::size_t i = 0; i < e.fields.size(); ++i)
    if (e.fields[i].first.empty())
      return status{errc::invalid_argument, "event '" + e.kind + "': field " + std::to_string(i) + " has no key"};
  if (e.wall == clock::wall_time{})
    e.wall = impl_->clk->wall_now();
  if (e.steady == clock::time_point{})
    e.steady = impl_->clk->now();
  std::size_t bytes = e.kind.size() + 64;
  for (const auto& [k, v] : e.fields)
    bytes += k.size() + v.size() + 8;
  if (bytes > max_event_bytes)
    return status{errc::invalid_argument, "event '" + e.kind + "' takes " + std::to_string(bytes) +
                                              " bytes encoded, over the limit of " + std::to_string(max_event_bytes)};
  return impl_->events->append([&](std::uint64_t seq) {
    e.seq = seq;
    return encode_event(e);
  });
}

status state_store::flush_events() {
  if (!impl_->events)
    return impl_->closed();
  return impl_->events->flush();
}

status state_store::flush_events_readable() {
  if (!impl_->events)
    return impl_->closed();
  return impl_->events->flush_written();
}

std::uint64_t state_store::last_event_seq() const noexcept {
  return impl_->events ? impl_->events->last_seq() : 0;
}

std::uint64_t state_store::durable_event_seq() const noexcept {
  return impl_->events ? impl_->events->durable_seq() : 0;
}

expected<std::vector<event>> state_store::events(std::uint64_t first, std::uint64_t last, std::size_t limit) const {
  std::vector<event> out;
  if (first > last || limit == 0)
    return out;
  RK_RETURN_IF_ERROR(impl_->scan(prefix_event, key_u64(prefix_event, first),
                                 [&](std::string_view k, std::string_view v) -> expected<bool> {
                                   const std::string name = describe_key(k);
                                   if (k.size() != prefix_event.size() + 8)
                                     return status{errc::data_loss, "key '" + name + "' is not an event key"};
                                   const auto seq = detail::get_be64(k.substr(prefix_event.size()));
                                   if (seq > last)
                                     return false;
                                   RK_ASSIGN_OR_RETURN(auto e, decode_event(v, name, seq));
                                   out.push_back(std::move(e));
                                   return out.size() < limit;
                                 }));
  return out;
}

expected<std::vector<event>> state_store::events_after(std::uint64_t seq, std::size_t limit) const {
  if (seq == std::numeric_limits<std::uint64_t>::max())
    return std::vector<event>{};
  return events(seq + 1, std::numeric_limits<std::uint64_t>::max(), limit);
}

// ---- everything ----

expected<store_contents> state_store::load() const {
  store_contents c;
  RK_ASSIGN_OR_RETURN(c.job, job());
  c.epoch = epoch();
  RK_ASSIGN_OR_RETURN(c.latest_membership, latest_membership());
  RK_ASSIGN_OR_RETURN(c.ranks, ranks());
  RK_ASSIGN_OR_RETURN(c.total_restarts, total_restarts());
  RK_ASSIGN_OR_RETURN(c.checkpoints, checkpoints());
  c.last_event_seq = durable_event_seq();
  return c;
}

// ---- replication ----

std::string state_store::identity() const {
  std::string id;
  if (impl_->db)
    (void)impl_->db->GetDbIdentity(id);
  return id;
}

expected<replication_chunk> state_store::changes_since(const replica_position& from, std::size_t max_bytes) const {
  if (!impl_->db)
    return impl_->closed();
  const std::string where = "state store " + impl_->dir.string();
  replication_chunk out;
  out.next = from;
  const auto latest = impl_->db->GetLatestSequenceNumber();
  const auto start_copy = [&] {
    out.reset = true;
    out.next.source = identity();
    // Writes from here on come from the log once the copy is done; those the copy already
    // holds are applied again, in order, which ends at the same values.
    out.next.next = latest + 1;
    out.next.copying = true;
    out.next.copied.clear();
  };
  if (from.source != identity() || from.next == 0 || from.next > latest + 1) {
    start_copy();
  } else if (!from.copying) {
    if (from.next == latest + 1)
      return out;  // nothing new
    std::unique_ptr<rocksdb::TransactionLogIterator> it;
    auto s = impl_->db->GetUpdatesSince(from.next, &it);
    bool gap = !s.ok() || !it->Valid();
    std::size_t bytes = 0;
    for (; !gap && it->Valid() && (out.batches.empty() || bytes < max_bytes); it->Next()) {
      auto b = it->GetBatch();
      if (out.batches.empty() && b.sequence > from.next) {
        gap = true;  // the log no longer reaches back that far
        break;
      }
      const auto end = b.sequence + b.writeBatchPtr->Count();
      if (end <= from.next)
        continue;  // a batch the replica holds already
      bytes += b.writeBatchPtr->GetDataSize();
      out.batches.push_back(b.writeBatchPtr->Data());
      out.next.next = end;
    }
    if (!gap) {
      RK_RETURN_IF_ERROR(from_rocksdb(it->status(), where + ": read of the write-ahead log"));
      return out;
    }
    out.batches.clear();
    out.next = from;
    start_copy();
  }
  // A part of a full copy: the keys after the last one copied, replicas' own positions left out.
  rocksdb::WriteBatch b;
  std::unique_ptr<rocksdb::Iterator> it{impl_->db->NewIterator(rocksdb::ReadOptions{})};
  if (out.next.copied.empty())
    it->SeekToFirst();
  else {
    it->Seek(out.next.copied);
    if (it->Valid() && it->key() == rocksdb::Slice{out.next.copied})
      it->Next();
  }
  for (; it->Valid() && (b.Count() == 0 || b.GetDataSize() < max_bytes); it->Next()) {
    out.next.copied = it->key().ToString();
    if (it->key().starts_with(rocksdb::Slice{prefix_replica.data(), prefix_replica.size()}))
      continue;
    RK_RETURN_IF_ERROR(from_rocksdb(b.Put(it->key(), it->value()), where + ": copy"));
  }
  RK_RETURN_IF_ERROR(from_rocksdb(it->status(), where + ": copy"));
  if (!it->Valid()) {
    out.next.copying = false;
    out.next.copied.clear();
  }
  if (b.Count() > 0)
    out.batches.push_back(b.Data());
  return out;
}

}  // namespace rekindle::storage
