// The storage side of a daemon or worker process, for multi-process tests that kill it.
//
//   storage_tool open-store   --dir DB [--no-create] [--as-user UID]
//   storage_tool hold-store   --dir DB
//   storage_tool fill-store   --dir DB
//   storage_tool append-events --dir DB [--flush-every K]
//   storage_tool bump-epochs  --dir DB
//   storage_tool slot-writer  --name SLOT [--max-bytes B] [--count C]
//   storage_tool write-shards --dir CKPT --db DB --step S [--ranks R] [--bytes N]
//                             [--stop-at POINT --stop-rank R]
//   storage_tool write-shard  --dir D [--bytes N] [--repeat] [--as-user UID] [--fsize-limit BYTES]
//                             [--private-tmpfs SIZE]
//
// Prints one line per event, flushed at once so a test can wait for it and then kill the process:
// "ready", "flushed SEQ", "epoch N", "published STEP", "at POINT FILE", "committed STEP",
// "ok", "error CODE MESSAGE", "done". Exit status: 0 done, 1 an operation failed, 2 bad usage,
// 4 a check of what was read failed, 77 a precondition of the test is missing (the line says why).
//
// The contents it writes are functions of their position (step, rank, sequence number), so the
// test that reads them back knows exactly what each must hold.

#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "storage/shard_file.hpp"
#include "storage/snapshot_slot.hpp"
#include "storage/state_store.hpp"
#include "tests/tools/storage/patterns.hpp"

using namespace rekindle;
using namespace rekindle::storage;
namespace fs = std::filesystem;

namespace {

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

int fail(const status& st) {
  say("error " + std::string{to_string(st.code())} + " " + st.message());
  return 1;
}

struct args {
  std::map<std::string, std::string> values;
  [[nodiscard]] bool has(const std::string& k) const { return values.count(k) != 0; }
  [[nodiscard]] std::string str(const std::string& k, const std::string& fallback = "") const {
    auto it = values.find(k);
    return it == values.end() ? fallback : it->second;
  }
  [[nodiscard]] std::uint64_t num(const std::string& k, std::uint64_t fallback) const {
    auto it = values.find(k);
    return it == values.end() ? fallback : std::stoull(it->second);
  }
};

// Drops root to `uid` (its own group too), so permission checks apply. A no-op when not root.
bool become(const args& a) {
  if (!a.has("--as-user") || geteuid() != 0)
    return true;
  const auto uid = static_cast<uid_t>(a.num("--as-user", 65534));
  if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0) {
    say(std::string{"skip cannot switch to uid "} + std::to_string(uid) + ": " + std::strerror(errno));
    return false;
  }
  return true;
}

expected<std::unique_ptr<state_store>> open_store(const args& a) {
  state_store_options o;
  o.create_if_missing = !a.has("--no-create");
  return state_store::open(a.str("--dir"), o);
}

int open_store_cmd(const args& a) {
  if (!become(a))
    return 77;
  auto s = open_store(a);
  if (!s)
    return fail(s.error());
  say("ok");
  return 0;
}

int hold_store(const args& a) {
  auto s = open_store(a);
  if (!s)
    return fail(s.error());
  say("ready");
  for (;;)
    std::this_thread::sleep_for(std::chrono::seconds{1});
}

// Everything a supervisor stores, with values testing::expected_fill() describes.
int fill_store(const args& a) {
  auto s = open_store(a);
  if (!s)
    return fail(s.error());
  auto& st = **s;
  job_record j{"fill", "<embedded local.toml>", 77, job_state::running, "started", clock::wall_time{}};
  if (auto r = st.put_job(j); !r.ok())
    return fail(r);
  for (int i = 0; i < 3; ++i)
    if (auto e = st.put_epoch(st.epoch().next()); !e.ok())
      return fail(e);
  membership m;
  m.epoch = epoch_t{3};
  for (std::uint32_t r = 0; r < 4; ++r)
    m.ranks.push_back(rank_member{rank_id{r}, node_id{r / 2}, r % 2, "cpu", {std::byte{1}, std::byte{2}}});
  m.spares_in_use = {node_id{9}};
  if (auto r = st.put_membership(m); !r.ok())
    return fail(r);
  for (std::uint32_t r : {1u, 1u, 3u})
    if (auto c = st.record_restart(rank_id{r}); !c)
      return fail(c.error());
  for (std::uint64_t step : {10u, 20u}) {
    checkpoint_manifest cm;
    cm.step = step_t{step};
    cm.world_size = 4;
    cm.layout_version = 1;
    for (std::uint32_t r = 0; r < 4; ++r)
      cm.shards.push_back(shard_entry{rank_id{r}, shard_file_name(cm.step, rank_id{r}), step * 100 + r, step + r});
    if (auto r = st.put_checkpoint(cm); !r.ok())
      return fail(r);
    if (auto r = st.commit_checkpoint(cm.step); !r.ok())
      return fail(r);
  }
  for (std::uint64_t i = 1; i <= 250; ++i) {
    event e;
    e.kind = "tick";
    e.epoch = epoch_t{3};
    e.fields = {{"i", std::to_string(i)}};
    if (auto r = st.append_event(e); !r)
      return fail(r.error());
  }
  if (auto r = st.close(); !r.ok())
    return fail(r);
  say("done");
  return 0;
}

int append_events(const args& a) {
  auto s = open_store(a);
  if (!s)
    return fail(s.error());
  const auto every = a.num("--flush-every", 50);
  for (std::uint64_t n = 1;; ++n) {
    event e;
    e.kind = "tick";
    e.epoch = epoch_t{1};
    e.rank = rank_id{static_cast<std::uint32_t>(n % 7)};
    // The content is a function of the sequence number the store assigns: the tool predicts it.
    const std::uint64_t seq = (*s)->last_event_seq() + 1;
    e.fields = testing::event_fields(seq);
    auto got = (*s)->append_event(e);
    if (!got)
      return fail(got.error());
    if (*got != seq) {
      say("error internal sequence " + std::to_string(*got) + " expected " + std::to_string(seq));
      return 4;
    }
    if (n % every == 0) {
      if (auto r = (*s)->flush_events(); !r.ok())
        return fail(r);
      say("flushed " + std::to_string(seq));
    }
  }
}

int bump_epochs(const args& a) {
  auto s = open_store(a);
  if (!s)
    return fail(s.error());
  for (;;) {
    const auto next = (*s)->epoch().next();
    if (auto e = (*s)->put_epoch(next); !e.ok())
      return fail(e);
    say("epoch " + std::to_string(next.value()));
  }
}

int slot_writer(const args& a) {
  auto slot = snapshot_slot::open(a.str("--name"));
  if (!slot)
    return fail(slot.error());
  const auto max_bytes = std::min<std::uint64_t>(a.num("--max-bytes", slot->capacity()), slot->capacity());
  const auto count = a.num("--count", 0);
  // A restarted worker first restores from the slot: the newest complete snapshot, checked.
  std::uint64_t step = 0;
  if (auto v = slot->latest(); v) {
    if (!testing::snapshot_matches(v->step.value(), v->data, max_bytes)) {
      say("error data_loss restored snapshot of step " + std::to_string(v->step.value()) + " has wrong contents");
      return 4;
    }
    step = v->step.value();
  } else if (v.error().code() != errc::not_found) {
    return fail(v.error());
  }
  say("resumed " + std::to_string(step));
  std::vector<std::byte> state(max_bytes);
  for (std::uint64_t n = 1; count == 0 || n <= count; ++n) {
    ++step;
    const auto len = testing::snapshot_length(step, max_bytes);
    // Alternate the two ways of writing: copy from a buffer, and export straight into the slot.
    if (step % 2 == 0) {
      testing::fill_snapshot(step, std::span<std::byte>{state.data(), len});
      if (auto r = slot->write(storage::snapshot_meta::of_step(step_t{step}), std::span<const std::byte>{state.data(), len});
          !r)
        return fail(r.error());
    } else {
      auto t = slot->begin_write(storage::snapshot_meta::of_step(step_t{step}));
      if (!t)
        return fail(t.error());
      testing::fill_snapshot(step, t->half.first(len));
      if (auto r = slot->publish(len); !r.ok())
        return fail(r);
    }
    if (n == 1)
      say("ready");
  }
  say("published " + std::to_string(step));
  say("done");
  return 0;
}

// Stops the process at one sync point of one rank's shard, so the test can kill it exactly there.
class stop_hooks final : public shard_file_hooks {
 public:
  stop_hooks(std::optional<shard_sync_point> at, std::uint32_t rank) : at_(at), rank_(rank) {}
  void set_rank(std::uint32_t r) { current_ = r; }
  status at(shard_sync_point p, const fs::path& file) override {
    if (at_ == p && current_ == rank_) {
      say("at " + std::string{to_string(p)} + " " + file.filename().string());
      ::raise(SIGSTOP);
    }
    return {};
  }

 private:
  std::optional<shard_sync_point> at_;
  std::uint32_t rank_;
  std::uint32_t current_ = 0;
};

int write_shards(const args& a) {
  auto store = state_store::open(a.str("--db"));
  if (!store)
    return fail(store.error());
  const step_t step{a.num("--step", 1)};
  const auto ranks = static_cast<std::uint32_t>(a.num("--ranks", 4));
  const auto bytes = a.num("--bytes", 1 << 20);
  std::optional<shard_sync_point> stop_at;
  if (a.has("--stop-at")) {
    auto p = parse_shard_sync_point(a.str("--stop-at"));
    if (!p)
      return fail(p.error());
    stop_at = *p;
  }
  stop_hooks hooks{stop_at, static_cast<std::uint32_t>(a.num("--stop-rank", 0))};
  checkpoint_manifest m;
  m.step = step;
  m.world_size = ranks;
  m.layout_version = 1;
  std::vector<std::byte> payload(bytes);
  for (std::uint32_t r = 0; r < ranks; ++r) {
    testing::fill_shard(step.value(), r, payload);
    hooks.set_rank(r);
    shard_write_options o;
    o.hooks = &hooks;
    const auto name = shard_file_name(step, rank_id{r});
    auto info = write_shard(a.str("--dir"), name, step, rank_id{r}, payload, o);
    if (!info)
      return fail(info.error());
    m.shards.push_back(shard_entry{rank_id{r}, name, info->size, info->checksum});
  }
  // Every shard is durable: now, and only now, the checkpoint is committed.
  if (auto r = (*store)->put_checkpoint(m); !r.ok())
    return fail(r);
  if (auto r = (*store)->commit_checkpoint(step); !r.ok())
    return fail(r);
  say("committed " + std::to_string(step.value()));
  return 0;
}

// Mounts a tmpfs of `size` over `dir` in a private mount namespace (gone with the process).
bool private_tmpfs(const fs::path& dir, const std::string& size) {
  if (unshare(CLONE_NEWNS) != 0) {
    say(std::string{"skip unshare(CLONE_NEWNS): "} + std::strerror(errno));
    return false;
  }
  if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    say(std::string{"skip making mounts private: "} + std::strerror(errno));
    return false;
  }
  const std::string opts = "size=" + size;
  if (mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
    say(std::string{"skip mounting a tmpfs: "} + std::strerror(errno));
    return false;
  }
  return true;
}

int write_shard_cmd(const args& a) {
  const fs::path dir = a.str("--dir");
  if (a.has("--private-tmpfs") && !private_tmpfs(dir, a.str("--private-tmpfs")))
    return 77;
  if (!become(a))
    return 77;
  if (a.has("--fsize-limit")) {
    // Past the limit write(2) fails with EFBIG instead of the process dying of SIGXFSZ.
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{a.num("--fsize-limit", 0), a.num("--fsize-limit", 0)};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
      say(std::string{"skip setrlimit: "} + std::strerror(errno));
      return 77;
    }
  }
  std::vector<std::byte> payload(a.num("--bytes", 1 << 20));
  int rc = 0;
  std::uint32_t written = 0;
  for (std::uint32_t i = 0;; ++i) {
    testing::fill_shard(1, i, payload);
    auto info = write_shard(dir, shard_file_name(step_t{1}, rank_id{i}), step_t{1}, rank_id{i}, payload);
    if (!info) {
      rc = fail(info.error());
      break;
    }
    ++written;
    if (!a.has("--repeat"))
      break;
  }
  if (rc == 0)
    say("ok");
  // What a reader finds afterwards: every file that looks like a shard must verify.
  std::uint32_t files = 0, verified = 0, tmp = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto n = e.path().filename().string();
    if (n.ends_with(".tmp")) {
      ++tmp;
    } else if (n.ends_with(".shard")) {
      ++files;
      std::vector<std::byte> back;
      auto info = read_shard(e.path(), back);
      if (info && testing::shard_matches(1, info->rank.value(), back))
        ++verified;
    }
  }
  say("written " + std::to_string(written) + " files " + std::to_string(files) + " verified " +
      std::to_string(verified) + " tmp " + std::to_string(tmp));
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: storage_tool COMMAND [--flag value]...\n");
    return 2;
  }
  const std::string cmd = argv[1];
  args a;
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) {
      std::fprintf(stderr, "storage_tool: unexpected argument %s\n", k.c_str());
      return 2;
    }
    const bool is_flag = k == "--no-create" || k == "--repeat";
    a.values[k] = is_flag || i + 1 >= argc ? "" : argv[++i];
  }
  if (cmd == "open-store") return open_store_cmd(a);
  if (cmd == "hold-store") return hold_store(a);
  if (cmd == "fill-store") return fill_store(a);
  if (cmd == "append-events") return append_events(a);
  if (cmd == "bump-epochs") return bump_epochs(a);
  if (cmd == "slot-writer") return slot_writer(a);
  if (cmd == "write-shards") return write_shards(a);
  if (cmd == "write-shard") return write_shard_cmd(a);
  std::fprintf(stderr, "storage_tool: unknown command %s\n", cmd.c_str());
  return 2;
}
