// Storage benchmark: what the supervisor's durable writes and a worker's snapshot cost.
//
// usage: state_store [--runs N] [--warmup N] [--dir DIR] [--snapshot-mib M] [--json]
//
// - synced epoch bumps per second (one synced RocksDB write each: the epoch is durable before it
//   is announced), in batches of 500 bumps;
// - event appends per second through the batching event writer (synced batches), 50,000 events
//   then flush_events();
// - publishing a snapshot of M MiB (default 100) into a shared-memory slot: `write` (copy and
//   the snapshot checksum (XXH3) in one pass, then publish), and begin_write + memcpy + publish with a known checksum
//   (the stall when the state buffer carries its checksum), next to a plain memcpy of the same
//   bytes into touched memory (the physical limit) and into freshly allocated memory.
//
// Baselines from the same run: synced single puts and synced batches of 100 puts with RocksDB
// alone (its options left at their defaults), the limit of the first two figures.
//
// Every figure is the median of --runs timed runs (default 5) after --warmup untimed ones
// (default 1). Results are verified before timing: the epoch reads back after reopening, every
// event is there, and the published snapshot reads back with a valid checksum and the right bytes.
// The database lives in a fresh directory under --dir (default $TMPDIR or /tmp), removed at exit.

#include <nlohmann/json.hpp>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/checksum.hpp"
#include "storage/snapshot_slot.hpp"
#include "storage/state_store.hpp"

using namespace rekindle;
using namespace rekindle::storage;
namespace fs = std::filesystem;

namespace {

struct options {
  int runs = 5;
  int warmup = 1;
  std::string dir;
  std::size_t snapshot_mib = 100;
  bool json = false;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "state_store: %s\n", what.c_str());
  std::exit(1);
}

void check(const status& st, const char* what) {
  if (!st.ok())
    die(std::string{what} + ": " + st.to_string());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Median seconds of fn over o.runs calls after o.warmup calls.
double time_median(const options& o, const std::function<void()>& fn) {
  for (int i = 0; i < o.warmup; ++i)
    fn();
  std::vector<double> s;
  for (int i = 0; i < o.runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(s);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--json")
      o.json = true;
    else if (a == "--runs")
      o.runs = std::max(1, std::atoi(value().c_str()));
    else if (a == "--warmup")
      o.warmup = std::max(0, std::atoi(value().c_str()));
    else if (a == "--dir")
      o.dir = value();
    else if (a == "--snapshot-mib")
      o.snapshot_mib = static_cast<std::size_t>(std::max(1, std::atoi(value().c_str())));
    else
      die("unknown argument '" + a + "' (usage: state_store [--runs N] [--warmup N] [--dir DIR] "
          "[--snapshot-mib M] [--json])");
  }
  if (o.dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    o.dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  return o;
}

// A fresh directory, removed on destruction.
struct scratch {
  fs::path path;
  explicit scratch(const std::string& parent) {
    std::string pattern = parent + "/rekindle-bench-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr)
      die("mkdtemp in " + parent + " failed");
    path = pattern;
  }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::unique_ptr<state_store> open_store(const fs::path& p) {
  auto s = state_store::open(p);
  if (!s)
    die("open " + p.string() + ": " + s.error().to_string());
  return std::move(*s);
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  scratch dir{o.dir};
  const fs::path db = dir.path / "db";

  // ---- synced epoch bumps ----
  constexpr int bumps = 500;
  std::uint64_t expected_epoch = 0;
  {
    auto s = open_store(db);
    check(s->put_epoch(s->epoch().next()), "put_epoch");
    ++expected_epoch;
  }
  {
    auto s = open_store(db);
    if (s->epoch().value() != expected_epoch)
      die("the epoch did not survive a reopen");
  }
  auto store = open_store(db);
  const double bump_s = time_median(o, [&] {
    for (int i = 0; i < bumps; ++i)
      check(store->put_epoch(store->epoch().next()), "put_epoch");
  });
  const double bumps_per_s = bumps / bump_s;

  // ---- batched event appends ----
  constexpr int events = 50000;
  event e;
  e.kind = "progress";
  e.epoch = epoch_t{1};
  e.rank = rank_id{3};
  e.fields = {{"step", "1234"}, {"loss", "2.7183"}, {"step_ms", "41.5"}};
  const std::uint64_t before = store->last_event_seq();
  check(store->flush_events(), "flush_events");
  const double append_s = time_median(o, [&] {
    for (int i = 0; i < events; ++i)
      check(store->append_event(e).to_status(), "append_event");
    check(store->flush_events(), "flush_events");
  });
  const double appends_per_s = events / append_s;
  const std::uint64_t appended = store->last_event_seq() - before;
  if (appended != static_cast<std::uint64_t>(events) * static_cast<std::uint64_t>(o.runs + o.warmup))
    die("event count mismatch");
  auto tail = store->events_after(store->last_event_seq() - 1);
  if (!tail || tail->size() != 1 || tail->front().field("loss") != "2.7183")
    die("the last event does not read back");
  check(store->close(), "close");

  // ---- the same writes with RocksDB alone ----
  rocksdb::Options ro;
  ro.create_if_missing = true;
  rocksdb::DB* raw_db = nullptr;
  if (auto st = rocksdb::DB::Open(ro, (dir.path / "raw").string(), &raw_db); !st.ok())
    die("raw RocksDB open: " + st.ToString());
  std::unique_ptr<rocksdb::DB> raw{raw_db};
  rocksdb::WriteOptions synced;
  synced.sync = true;
  std::uint64_t key = 0;
  const std::string value(64, 'v');
  auto next_key = [&] { return "k" + std::to_string(++key); };
  const double raw_put_s = time_median(o, [&] {
    for (int i = 0; i < bumps; ++i)
      if (!raw->Put(synced, next_key(), value).ok())
        die("raw put failed");
  });
  const double raw_batch_s = time_median(o, [&] {
    for (int i = 0; i < events; i += 100) {
      rocksdb::WriteBatch b;
      for (int k = 0; k < 100; ++k)
        b.Put(next_key(), value);
      if (!raw->Write(synced, &b).ok())
        die("raw batch failed");
    }
  });
  if (!raw->Close().ok())
    die("raw close failed");
  raw.reset();

  // ---- snapshot slot publish vs memcpy ----
  const std::size_t bytes = o.snapshot_mib << 20;
  const std::string name = snapshot_slot::name_for(dir.path, "bench", 0);
  check(snapshot_slot::remove(name), "remove slot");
  auto created = snapshot_slot::create(name, bytes);
  if (!created)
    die(created.error().to_string());
  auto& slot = *created;
  std::vector<std::byte> state(bytes);
  for (std::size_t i = 0; i < bytes; i += 64)
    state[i] = static_cast<std::byte>(i / 64);
  const std::uint64_t state_sum = snapshot_checksum(state);
  std::uint64_t step = 0;

  check(slot.write(snapshot_meta::of_step(step_t{++step}), state).to_status(), "slot write");
  {
    auto v = slot.latest();
    if (!v || v->checksum != state_sum || std::memcmp(v->data.data(), state.data(), bytes) != 0)
      die("the published snapshot does not read back");
  }
  const double write_s = time_median(o, [&] { check(slot.write(snapshot_meta::of_step(step_t{++step}), state).to_status(), "slot write"); });
  const double publish_s = time_median(o, [&] {
    auto t = slot.begin_write(snapshot_meta::of_step(step_t{++step}));
    if (!t)
      die(t.error().to_string());
    std::memcpy(t->half.data(), state.data(), bytes);
    check(slot.publish(bytes, state_sum), "publish");
  });
  if (auto v = slot.latest(); !v || v->step.value() != step)
    die("the last publish does not read back verified");

  std::vector<std::byte> touched(bytes, std::byte{1});
  const double memcpy_s = time_median(o, [&] { std::memcpy(touched.data(), state.data(), bytes); });
  if (std::memcmp(touched.data(), state.data(), bytes) != 0)
    die("memcpy check failed");
  const double fresh_s = time_median(o, [&] {
    auto fresh = std::make_unique_for_overwrite<std::byte[]>(bytes);
    std::memcpy(fresh.get(), state.data(), bytes);
    if (fresh[bytes - 64] != state[bytes - 64])
      die("memcpy check failed");
  });
  check(snapshot_slot::remove(name), "remove slot");

  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  const double gb = static_cast<double>(bytes) / 1e9;
  if (o.json) {
    nlohmann::json j;
    j["date"] = date;
    j["runs"] = o.runs;
    j["warmup"] = o.warmup;
    j["dir"] = o.dir;
    j["epoch_bumps_per_s"] = bumps_per_s;
    j["epoch_bump_ms"] = bump_s / bumps * 1e3;
    j["event_appends_per_s"] = appends_per_s;
    j["rocksdb_synced_puts_per_s"] = bumps / raw_put_s;
    j["rocksdb_puts_in_synced_batches_of_100_per_s"] = events / raw_batch_s;
    j["snapshot_bytes"] = bytes;
    j["slot_write_ms"] = write_s * 1e3;
    j["slot_memcpy_publish_ms"] = publish_s * 1e3;
    j["memcpy_touched_ms"] = memcpy_s * 1e3;
    j["memcpy_fresh_ms"] = fresh_s * 1e3;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("storage benchmark, %s, database under %s, median of %d runs after %d warm-up\n\n", date,
              o.dir.c_str(), o.runs, o.warmup);
  std::printf("| what | median | rate |\n|---|---|---|\n");
  std::printf("| synced epoch bump | %.3f ms | %.0f /s |\n", bump_s / bumps * 1e3, bumps_per_s);
  std::printf("| event append (batched, synced batches) + flush | %.2f us | %.0f /s |\n", append_s / events * 1e6,
              appends_per_s);
  std::printf("| baseline: RocksDB synced put | %.3f ms | %.0f /s |\n", raw_put_s / bumps * 1e3, bumps / raw_put_s);
  std::printf("| baseline: RocksDB put in synced batches of 100 | %.2f us | %.0f /s |\n", raw_batch_s / events * 1e6,
              events / raw_batch_s);
  std::printf("| slot write: copy + checksum + publish, %zu MiB | %.1f ms | %.2f GB/s |\n", o.snapshot_mib,
              write_s * 1e3, gb / write_s);
  std::printf("| slot begin_write + memcpy + publish (checksum known), %zu MiB | %.1f ms | %.2f GB/s |\n",
              o.snapshot_mib, publish_s * 1e3, gb / publish_s);
  std::printf("| memcpy into touched memory (baseline), %zu MiB | %.1f ms | %.2f GB/s |\n", o.snapshot_mib,
              memcpy_s * 1e3, gb / memcpy_s);
  std::printf("| memcpy into fresh memory, %zu MiB | %.1f ms | %.2f GB/s |\n", o.snapshot_mib, fresh_s * 1e3,
              gb / fresh_s);
  return 0;
}
