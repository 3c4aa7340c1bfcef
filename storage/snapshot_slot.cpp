#include "storage/snapshot_slot.hpp"

#include <algorithm>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <utility>

#include "common/check.hpp"
#include "common/checksum.hpp"
#include "storage/codec.hpp"
#include "storage/posix_error.hpp"

namespace rekindle::storage {

namespace {

// ---- header layout (docs/STORAGE.md, "Snapshot slots"); host byte order ----

constexpr std::uint64_t slot_magic = 0x00'00'54'4f'4c'53'4b'52ull;  // "RKSLOT\0\0" little-endian
constexpr std::uint32_t slot_version = 2;
constexpr std::size_t page = 4096;

constexpr std::uint32_t no_half = 0xffffffffu;
constexpr std::uint64_t max_capacity = 1ull << 44;  // 16 TiB: far above any rank state
constexpr int max_read_attempts = 1000;

constexpr std::size_t off_magic = 0;
constexpr std::size_t off_version = 8;
constexpr std::size_t off_header_bytes = 12;
constexpr std::size_t off_capacity = 16;
constexpr std::size_t off_object_bytes = 24;
constexpr std::size_t off_generation = 32;
constexpr std::size_t off_active = 40;
constexpr std::size_t off_writer = 48;  // claim: pid (low 32 bits), handle nonce (high 32 bits)
constexpr std::size_t off_created_ns = 56;
constexpr std::size_t off_pin_sequence = 64;  // even when the pin is stable, odd while it changes
constexpr std::size_t off_pin_epoch = 72;
constexpr std::size_t off_pin_step = 80;
constexpr std::size_t off_half = 128;
constexpr std::size_t half_desc_bytes = 128;
// Inside a half descriptor.
constexpr std::size_t d_sequence = 0;
constexpr std::size_t d_step = 8;
constexpr std::size_t d_length = 16;
constexpr std::size_t d_checksum = 24;
constexpr std::size_t d_state = 32;
constexpr std::size_t d_rank = 36;
constexpr std::size_t d_published_ns = 40;
constexpr std::size_t d_generation = 48;
constexpr std::size_t d_epoch = 56;
constexpr std::size_t d_world = 64;

enum half_state : std::uint32_t { half_empty = 0, half_writing = 1, half_published = 2 };

template <class T>
std::atomic_ref<T> field(std::byte* base, std::size_t offset) noexcept {
  return std::atomic_ref<T>{*reinterpret_cast<T*>(base + offset)};
}

std::atomic_ref<std::uint64_t> u64_at(std::byte* base, std::size_t off) noexcept { return field<std::uint64_t>(base, off); }
std::atomic_ref<std::uint32_t> u32_at(std::byte* base, std::size_t off) noexcept { return field<std::uint32_t>(base, off); }
std::size_t desc(std::uint32_t h, std::size_t f) noexcept { return off_half + h * half_desc_bytes + f; }

std::int64_t wall_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

status check_name(const std::string& name) {
  if (name.size() < 2 || name.size() > 255 || name[0] != '/' || name.find('/', 1) != std::string::npos ||
      name.find('\0') != std::string::npos)
    return status{errc::invalid_argument, "snapshot slot name '" + name +
                                              "' must be '/' and 1 to 254 more characters without '/'"};
  return {};
}

bool process_alive(pid_t pid) noexcept { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// An open file descriptor, closed on scope exit.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

}  // namespace

std::string snapshot_slot::name_prefix(const std::filesystem::path& data_dir, std::string_view job) {
  std::error_code ec;
  auto abs = std::filesystem::weakly_canonical(data_dir, ec);
  if (ec)
    abs = std::filesystem::absolute(data_dir, ec);
  std::string key = abs.string();
  key.push_back('\0');
  key.append(job);
  const auto h = xxh64(std::span<const std::byte>{reinterpret_cast<const std::byte*>(key.data()), key.size()});
  std::string clean;
  for (char c : job) {
    if (clean.size() == 32)
      break;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    clean.push_back(ok ? c : '_');
  }
  return "/rekindle-" + clean + "-" + detail::hex64(h).substr(2) + "-r";
}

std::string snapshot_slot::name_for(const std::filesystem::path& data_dir, std::string_view job,
                                    std::uint32_t local_rank) {
  return name_prefix(data_dir, job) + std::to_string(local_rank);
}

snapshot_slot::snapshot_slot(std::string name, std::byte* base, std::size_t size, std::uint64_t capacity) noexcept
    : name_(std::move(name)), base_(base), size_(size), capacity_(capacity) {}

snapshot_slot::snapshot_slot(snapshot_slot&& other) noexcept
    : name_(std::move(other.name_)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(other.capacity_),
      writer_(std::exchange(other.writer_, false)),
      claim_(other.claim_),
      writing_(std::exchange(other.writing_, std::nullopt)) {}

snapshot_slot& snapshot_slot::operator=(snapshot_slot&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = other.capacity_;
    writer_ = std::exchange(other.writer_, false);
    claim_ = other.claim_;
    writing_ = std::exchange(other.writing_, std::nullopt);
  }
  return *this;
}

snapshot_slot::~snapshot_slot() { release(); }

void snapshot_slot::release() noexcept {
  if (base_ == nullptr)
    return;
  if (writer_) {
    std::uint64_t mine = claim_;
    u64_at(base_, off_writer).compare_exchange_strong(mine, 0, std::memory_order_acq_rel);
    writer_ = false;
  }
  ::munmap(base_, size_);
  base_ = nullptr;
}

expected<snapshot_slot> snapshot_slot::create(const std::string& name, std::uint64_t capacity) {
  RK_RETURN_IF_ERROR(check_name(name));
  const std::string what = "snapshot slot " + name;
  if (capacity == 0 || capacity > max_capacity)
    return status{errc::invalid_argument, what + ": capacity " + std::to_string(capacity) +
                                              " is outside 1 .. 2^44 bytes"};
  capacity = (capacity + page - 1) / page * page;
  const std::uint64_t total = header_bytes + 2 * capacity;

  fd_guard fd{::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600)};
  if (fd.fd < 0) {
    const int err = errno;
    if (err == EEXIST)
      return status{errc::already_exists, what + " exists already (a previous daemon's: remove it first)"};
    return detail::from_errno(err, what + ": shm_open");
  }
  // From here on a failure removes the half-made object.
  auto fail = [&](status st) {
    ::shm_unlink(name.c_str());
    return st;
  };
  if (::ftruncate(fd.fd, static_cast<off_t>(total)) != 0)
    return fail(detail::from_errno(errno, what + ": ftruncate to " + std::to_string(total) + " bytes"));
  // Reserve the memory now: a full /dev/shm would otherwise surface as SIGBUS on first touch.
  if (int err = ::posix_fallocate(fd.fd, 0, static_cast<off_t>(total)); err != 0)
    return fail(detail::from_errno(err, what + ": reserving " + std::to_string(total) + " bytes"));
  // MAP_POPULATE faults every page in now, so the first snapshot copies at memory speed.
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.fd, 0);
  if (p == MAP_FAILED)
    return fail(detail::from_errno(errno, what + ": mmap of " + std::to_string(total) + " bytes"));
  auto* base = static_cast<std::byte*>(p);

  u32_at(base, off_version).store(slot_version, std::memory_order_relaxed);
  u32_at(base, off_header_bytes).store(static_cast<std::uint32_t>(header_bytes), std::memory_order_relaxed);
  u64_at(base, off_capacity).store(capacity, std::memory_order_relaxed);
  u64_at(base, off_object_bytes).store(total, std::memory_order_relaxed);
  u64_at(base, off_generation).store(0, std::memory_order_relaxed);
  u32_at(base, off_active).store(no_half, std::memory_order_relaxed);
  u64_at(base, off_writer).store(0, std::memory_order_relaxed);
  field<std::int64_t>(base, off_created_ns).store(wall_ns(), std::memory_order_relaxed);
  u64_at(base, off_pin_sequence).store(0, std::memory_order_relaxed);
  u64_at(base, off_pin_epoch).store(0, std::memory_order_relaxed);
  u64_at(base, off_pin_step).store(0, std::memory_order_relaxed);
  for (std::uint32_t h = 0; h < 2; ++h) {
    u64_at(base, desc(h, d_sequence)).store(0, std::memory_order_relaxed);
    u32_at(base, desc(h, d_state)).store(half_empty, std::memory_order_relaxed);
  }
  // The magic last: a slot with a magic has a complete header.
  u64_at(base, off_magic).store(slot_magic, std::memory_order_release);
  return snapshot_slot{name, base, static_cast<std::size_t>(total), capacity};
}

expected<snapshot_slot> snapshot_slot::open(const std::string& name) {
  RK_RETURN_IF_ERROR(check_name(name));
  const std::string what = "snapshot slot " + name;
  fd_guard fd{::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0)};
  if (fd.fd < 0)
    return detail::from_errno(errno, what + ": shm_open");
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0)
    return detail::from_errno(errno, what + ": fstat");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < header_bytes)
    return status{errc::data_loss, what + ": object of " + std::to_string(size) + " bytes is shorter than the " +
                                       std::to_string(header_bytes) + "-byte header"};
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.fd, 0);
  if (p == MAP_FAILED)
    return detail::from_errno(errno, what + ": mmap of " + std::to_string(size) + " bytes");
  auto* base = static_cast<std::byte*>(p);
  snapshot_slot slot{name, base, static_cast<std::size_t>(size), 0};  // unmaps on the error paths

  auto bad = [&](std::size_t offset, std::string_view fieldname, const std::string& text) {
    return status{errc::data_loss, what + " byte " + std::to_string(offset) + ": " + std::string{fieldname} + " " + text};
  };
  if (const auto m = u64_at(base, off_magic).load(std::memory_order_acquire); m != slot_magic)
    return bad(off_magic, "magic", detail::hex64(m) + " is not \"RKSLOT\" (not a snapshot slot)");
  if (const auto v = u32_at(base, off_version).load(std::memory_order_relaxed); v != slot_version)
    return bad(off_version, "version", std::to_string(v) + " is not " + std::to_string(slot_version));
  if (const auto hb = u32_at(base, off_header_bytes).load(std::memory_order_relaxed); hb != header_bytes)
    return bad(off_header_bytes, "header_bytes", std::to_string(hb) + " is not " + std::to_string(header_bytes));
  const auto cap = u64_at(base, off_capacity).load(std::memory_order_relaxed);
  if (cap == 0 || cap > max_capacity || cap % page != 0 || header_bytes + 2 * cap > size)
    return bad(off_capacity, "capacity", std::to_string(cap) + " does not fit an object of " + std::to_string(size) +
                                             " bytes (needs 4096 + 2 x capacity, a multiple of 4096)");
  slot.capacity_ = cap;
  return slot;
}

void snapshot_slot::touch_pages() const noexcept {
  // One byte of every page, reads only: the halves may hold a snapshot other processes read.
  unsigned char sum = 0;
  for (std::size_t at = 0; at < size_; at += page) {
    const auto* byte = reinterpret_cast<const unsigned char*>(base_ + at);
    sum = static_cast<unsigned char>(sum + __atomic_load_n(byte, __ATOMIC_RELAXED));
  }
  asm volatile("" : : "r"(sum));  // kept: the loads are the point
}

status snapshot_slot::remove(const std::string& name) {
  RK_RETURN_IF_ERROR(check_name(name));
  if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT)
    return detail::from_errno(errno, "snapshot slot " + name + ": shm_unlink");
  return {};
}

expected<std::vector<std::string>> snapshot_slot::remove_with_prefix(std::string_view prefix) {
  if (prefix.size() < 2 || prefix[0] != '/')
    return status{errc::invalid_argument, "snapshot slot prefix '" + std::string{prefix} + "' must start with '/'"};
  const std::string_view bare = prefix.substr(1);
  std::unique_ptr<DIR, int (*)(DIR*)> dir{::opendir("/dev/shm"), ::closedir};
  if (!dir)
    return detail::from_errno(errno, "snapshot slots: opendir /dev/shm");
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir.get())) {
    const std::string_view n{e->d_name};
    if (n.substr(0, bare.size()) == bare)
      names.push_back("/" + std::string{n});
  }
  std::vector<std::string> removed;
  for (const auto& n : names) {
    if (::shm_unlink(n.c_str()) == 0)
      removed.push_back(n);
    else if (errno != ENOENT)
      return detail::from_errno(errno, "snapshot slot " + n + ": shm_unlink");
  }
  return removed;
}

std::uint64_t snapshot_slot::generation() const noexcept {
  return u64_at(base_, off_generation).load(std::memory_order_acquire);
}

std::byte* snapshot_slot::half_data(std::uint32_t h) const noexcept { return base_ + header_bytes + h * capacity_; }

status snapshot_slot::claim_writer() {
  if (writer_)
    return {};
  // The nonce tells two handles of one process apart.
  std::random_device rd;
  const std::uint64_t mine = (std::uint64_t{rd() | 1u} << 32) | static_cast<std::uint32_t>(::getpid());
  auto word = u64_at(base_, off_writer);
  for (;;) {
    std::uint64_t cur = word.load(std::memory_order_acquire);
    const auto holder = static_cast<pid_t>(cur & 0xffffffffu);
    if (cur != 0 && process_alive(holder))
      return status{errc::unavailable, "snapshot slot " + name_ + " has a live writer (pid " + std::to_string(holder) + ")"};
    // Free, or held by a process that no longer exists: take it.
    if (word.compare_exchange_strong(cur, mine, std::memory_order_acq_rel)) {
      writer_ = true;
      claim_ = mine;
      return {};
    }
  }
}

void snapshot_slot::pin(policy::custody_pin p) noexcept {
  RK_CHECK(base_ != nullptr, "snapshot_slot used after move");
  auto seq = u64_at(base_, off_pin_sequence);
  const std::uint64_t s = seq.load(std::memory_order_relaxed);
  seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  u64_at(base_, off_pin_epoch).store(p.epoch.value(), std::memory_order_relaxed);
  u64_at(base_, off_pin_step).store(p.step.value(), std::memory_order_relaxed);
  seq.store(s + 2, std::memory_order_release);
}

policy::custody_pin snapshot_slot::pinned() const noexcept {
  RK_CHECK(base_ != nullptr, "snapshot_slot used after move");
  for (;;) {
    const std::uint64_t s1 = u64_at(base_, off_pin_sequence).load(std::memory_order_acquire);
    const policy::custody_pin p{epoch_t{u64_at(base_, off_pin_epoch).load(std::memory_order_relaxed)},
                                step_t{u64_at(base_, off_pin_step).load(std::memory_order_relaxed)}};
    std::atomic_thread_fence(std::memory_order_acquire);
    // A pinning process killed mid-update leaves the sequence odd: its values are the newest.
    if (s1 % 2 != 0 || u64_at(base_, off_pin_sequence).load(std::memory_order_relaxed) == s1)
      return p;
  }
}

std::array<std::optional<policy::copy_tag>, 2> snapshot_slot::halves() const {
  RK_CHECK(base_ != nullptr, "snapshot_slot used after move");
  std::array<std::optional<policy::copy_tag>, 2> out;
  for (std::uint32_t h = 0; h < 2; ++h) {
    for (int i = 0; i < max_read_attempts; ++i) {
      // A half being written (odd sequence) holds no published copy.
      const std::uint64_t s1 = u64_at(base_, desc(h, d_sequence)).load(std::memory_order_acquire);
      if (s1 % 2 != 0)
        break;
      const bool published = u32_at(base_, desc(h, d_state)).load(std::memory_order_relaxed) == half_published;
      const policy::copy_tag tag{epoch_t{u64_at(base_, desc(h, d_epoch)).load(std::memory_order_relaxed)},
                                 rank_id{u32_at(base_, desc(h, d_rank)).load(std::memory_order_relaxed)},
                                 step_t{u64_at(base_, desc(h, d_step)).load(std::memory_order_relaxed)}};
      std::atomic_thread_fence(std::memory_order_acquire);
      if (u64_at(base_, desc(h, d_sequence)).load(std::memory_order_relaxed) != s1)
        continue;
      if (published)
        out[h] = tag;
      break;
    }
  }
  return out;
}

expected<write_ticket> snapshot_slot::begin_write(const snapshot_meta& meta) {
  RK_CHECK(base_ != nullptr, "snapshot_slot used after move");
  RK_RETURN_IF_ERROR(claim_writer());
  // Step 1: the custody rule.
  const auto protect = policy::protected_step(pinned(), meta.tag.epoch, meta.epoch_start);
  write_ticket t;
  t.plan = policy::plan_slot_write(halves(), protect, meta.tag, meta.snapshot_every);
  if (!t.plan.half)
    return t;
  const std::uint32_t h = *t.plan.half;
  const std::uint32_t other = h == 0 ? 1 : 0;
  if (u32_at(base_, off_active).load(std::memory_order_acquire) == h &&
      u32_at(base_, desc(other, d_state)).load(std::memory_order_acquire) == half_published)
    u32_at(base_, off_active).store(other, std::memory_order_release);
  auto seq = u64_at(base_, desc(h, d_sequence));
  const std::uint64_t s = seq.load(std::memory_order_relaxed);
  // Odd: a writer died in the middle of this half; it stays odd, and moves on by 2.
  seq.store(s % 2 == 0 ? s + 1 : s + 2, std::memory_order_relaxed);
  u32_at(base_, desc(h, d_state)).store(half_writing, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  writing_ = h;
  pending_ = meta;
  t.half = std::span<std::byte>{half_data(h), capacity_};
  return t;
}

status snapshot_slot::publish(std::uint64_t length, std::optional<std::uint64_t> checksum) {
  RK_CHECK(base_ != nullptr, "snapshot_slot used after move");
  if (!writing_)
    return status{errc::failed_precondition, "snapshot slot " + name_ + ": publish without a begin_write that gave a half"};
  const auto step = pending_.tag.step;
  if (length > capacity_)
    return status{errc::resource_exhausted, "snapshot slot " + name_ + ": snapshot of step " +
                                                std::to_string(step.value()) + " has " + std::to_string(length) +
                                                " bytes, more than the slot's capacity of " +
                                                std::to_string(capacity_) + " bytes"};
  const std::uint32_t h = *writing_;
  const std::uint64_t sum =
      checksum ? *checksum : snapshot_checksum(std::span<const std::byte>{half_data(h), static_cast<std::size_t>(length)});
  const std::uint64_t gen = u64_at(base_, off_generation).load(std::memory_order_relaxed) + 1;
  // Step 3.
  u64_at(base_, desc(h, d_step)).store(step.value(), std::memory_order_relaxed);
  u64_at(base_, desc(h, d_epoch)).store(pending_.tag.epoch.value(), std::memory_order_relaxed);
  u32_at(base_, desc(h, d_rank)).store(pending_.tag.rank.value(), std::memory_order_relaxed);
  u32_at(base_, desc(h, d_world)).store(pending_.world, std::memory_order_relaxed);
  u64_at(base_, desc(h, d_length)).store(length, std::memory_order_relaxed);
  u64_at(base_, desc(h, d_checksum)).store(sum, std::memory_order_relaxed);
  field<std::int64_t>(base_, desc(h, d_published_ns)).store(wall_ns(), std::memory_order_relaxed);
  u64_at(base_, desc(h, d_generation)).store(gen, std::memory_order_relaxed);
  u32_at(base_, desc(h, d_state)).store(half_published, std::memory_order_relaxed);
  // Step 4.
  auto seq = u64_at(base_, desc(h, d_sequence));
  seq.store(seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  // Step 5.
  u32_at(base_, off_active).store(h, std::memory_order_release);
  u64_at(base_, off_generation).store(gen, std::memory_order_release);
  writing_.reset();
  return {};
}

expected<policy::slot_write> snapshot_slot::write(const snapshot_meta& meta, std::span<const std::byte> state) {
  if (state.size() > capacity_)
    return status{errc::resource_exhausted, "snapshot slot " + name_ + ": state of step " +
                                                std::to_string(meta.tag.step.value()) + " has " +
                                                std::to_string(state.size()) + " bytes, more than the slot's capacity of " +
                                                std::to_string(capacity_) + " bytes"};
  RK_ASSIGN_OR_RETURN(auto t, begin_write(meta));
  if (t.skipped())
    return t.plan;
  const std::uint64_t sum = copy_and_checksum(t.half, state);
  RK_RETURN_IF_ERROR(publish(state.size(), sum));
  return t.plan;
}

expected<snapshot_view> snapshot_slot::read_half(std::uint32_t a, bool verify) const {
  for (int i = 0; i < max_read_attempts; ++i) {
    const std::uint64_t s1 = u64_at(base_, desc(a, d_sequence)).load(std::memory_order_acquire);
    if (s1 % 2 != 0)
      continue;
    // Step 3.
    const std::uint64_t step = u64_at(base_, desc(a, d_step)).load(std::memory_order_relaxed);
    const std::uint64_t length = u64_at(base_, desc(a, d_length)).load(std::memory_order_relaxed);
    const std::uint64_t sum = u64_at(base_, desc(a, d_checksum)).load(std::memory_order_relaxed);
    const std::uint64_t gen = u64_at(base_, desc(a, d_generation)).load(std::memory_order_relaxed);
    const std::uint64_t epoch = u64_at(base_, desc(a, d_epoch)).load(std::memory_order_relaxed);
    const std::uint32_t rank = u32_at(base_, desc(a, d_rank)).load(std::memory_order_relaxed);
    const std::uint32_t world = u32_at(base_, desc(a, d_world)).load(std::memory_order_relaxed);
    const std::uint32_t state = u32_at(base_, desc(a, d_state)).load(std::memory_order_relaxed);
    const bool sane = length <= capacity_ && state == half_published;
    const std::uint64_t computed =
        sane && verify ? snapshot_checksum(std::span<const std::byte>{half_data(a), static_cast<std::size_t>(length)}) : sum;
    // Step 4.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (u64_at(base_, desc(a, d_sequence)).load(std::memory_order_relaxed) != s1)
      continue;
    // Step 5.
    if (!sane)
      return status{errc::data_loss, "snapshot slot " + name_ + " half " + std::to_string(a) + " (descriptor byte " +
                                         std::to_string(desc(a, 0)) + "): " +
                                         (state != half_published ? "not published (state " + std::to_string(state) + ")"
                                                                  : "length " + std::to_string(length) +
                                                                        " exceeds the capacity " + std::to_string(capacity_))};
    if (computed != sum)
      return status{errc::data_loss, "snapshot slot " + name_ + " half " + std::to_string(a) + ": snapshot of step " +
                                         std::to_string(step) + " fails its checksum (published " +
                                         detail::hex64(sum) + ", computed " + detail::hex64(computed) + " over " +
                                         std::to_string(length) + " bytes)"};
    return snapshot_view{step_t{step},         epoch_t{epoch}, rank_id{rank}, world,
                         std::span<const std::byte>{half_data(a), static_cast<std::size_t>(length)},
                         sum, a, s1, gen};
  }
  return status{errc::unavailable, "snapshot slot " + name_ + ": the writer overwrote the snapshot during " +
                                       std::to_string(max_read_attempts) + " reads in a row"};
}

expected<snapshot_view> snapshot_slot::latest(bool verify) const {
  RK_CHECK(base_ != nullptr, "snapshot_slot used after move");
  for (int i = 0; i < max_read_attempts; ++i) {
    // Steps 1 and 2.
    const std::uint32_t a = u32_at(base_, off_active).load(std::memory_order_acquire);
    if (a == no_half)
      return status{errc::not_found, "snapshot slot " + name_ + " holds no published snapshot yet"};
    if (a > 1)
      return status{errc::data_loss, "snapshot slot " + name_ + " byte " + std::to_string(off_active) +
                                         ": active half " + std::to_string(a) + " is not 0 or 1"};
    auto v = read_half(a, verify);
    // The active half moved on while we read it: start over with the new one.
    if (!v && v.error().code() == errc::unavailable)
      continue;
    if (v && u32_at(base_, off_active).load(std::memory_order_acquire) != a && !still_valid(*v))
      continue;
    return v;
  }
  return status{errc::unavailable, "snapshot slot " + name_ + ": the writer overwrote the snapshot during " +
                                       std::to_string(max_read_attempts) + " reads in a row"};
}

expected<snapshot_view> snapshot_slot::at_step(step_t step, bool verify) const {
  RK_CHECK(base_ != nullptr, "snapshot_slot used after move");
  std::string seen;
  for (std::uint32_t h = 0; h < 2; ++h) {
    const std::uint32_t state = u32_at(base_, desc(h, d_state)).load(std::memory_order_acquire);
    if (state != half_published)
      continue;
    // The descriptor first: only the half of `step` is verified, so damage to the other one
    // does not hide it.
    auto v = read_half(h, false);
    if (!v) {
      if (v.error().code() == errc::data_loss)
        return v;
      continue;
    }
    if (v->step == step)
      return verify ? read_half(h, true) : v;
    seen += (seen.empty() ? "" : ", ") + std::to_string(v->step.value());
  }
  return status{errc::not_found, "snapshot slot " + name_ + " holds no snapshot of step " + std::to_string(step.value()) +
                                     (seen.empty() ? " (it holds none)" : " (it holds step " + seen + ")")};
}

std::vector<step_t> snapshot_slot::steps() const {
  std::vector<step_t> out;
  for (const auto& h : halves())
    if (h)
      out.push_back(h->step);
  std::sort(out.begin(), out.end());
  return out;
}

bool snapshot_slot::still_valid(const snapshot_view& view) const noexcept {
  if (base_ == nullptr || view.half > 1)
    return false;
  std::atomic_thread_fence(std::memory_order_acquire);
  return u64_at(base_, desc(view.half, d_sequence)).load(std::memory_order_relaxed) == view.sequence;
}

expected<snapshot_info> snapshot_slot::copy_latest(std::span<std::byte> out) const {
  for (int i = 0; i < max_read_attempts; ++i) {
    RK_ASSIGN_OR_RETURN(auto v, latest(false));
    if (v.data.size() > out.size())
      return status{errc::resource_exhausted, "snapshot slot " + name_ + ": snapshot of step " +
                                                  std::to_string(v.step.value()) + " has " +
                                                  std::to_string(v.data.size()) + " bytes, the buffer " +
                                                  std::to_string(out.size())};
    const std::uint64_t computed = copy_and_checksum(out, v.data);
    if (!still_valid(v))
      continue;
    if (computed != v.checksum)
      return status{errc::data_loss, "snapshot slot " + name_ + " half " + std::to_string(v.half) +
                                         ": snapshot of step " + std::to_string(v.step.value()) +
                                         " fails its checksum (published " + detail::hex64(v.checksum) +
                                         ", computed " + detail::hex64(computed) + " over " +
                                         std::to_string(v.data.size()) + " bytes)"};
    return snapshot_info{v.step, v.data.size(), v.checksum, v.generation};
  }
  return status{errc::unavailable, "snapshot slot " + name_ + ": the writer overwrote the snapshot during " +
                                       std::to_string(max_read_attempts) + " copies in a row"};
}

}  // namespace rekindle::storage
