#include "storage/shard_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/checksum.hpp"
#include "storage/codec.hpp"
#include "storage/posix_error.hpp"

namespace rekindle::storage {

namespace fs = std::filesystem;

namespace {

constexpr std::byte shard_magic[8] = {std::byte{'R'}, std::byte{'K'}, std::byte{'S'}, std::byte{'H'},
                                      std::byte{'A'}, std::byte{'R'}, std::byte{'D'}, std::byte{0}};
constexpr std::uint32_t shard_version = 2;
constexpr std::size_t header_checksum_offset = 56;
// Payload bytes per write(2) and read(2).
constexpr std::size_t io_chunk = 4 << 20;

// An open file descriptor, closed on scope exit.
class unique_fd {
 public:
  explicit unique_fd(int fd = -1) noexcept : fd_(fd) {}
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }
  [[nodiscard]] int get() const noexcept { return fd_; }
  /// Closes now; returns close(2)'s errno (0 when fine).
  int reset() noexcept {
    int err = 0;
    if (fd_ >= 0 && ::close(fd_) != 0)
      err = errno;
    fd_ = -1;
    return err;
  }

 private:
  int fd_;
};

void encode_header(std::byte* h, step_t step, rank_id rank, std::uint64_t length, std::uint64_t checksum) {
  std::memset(h, 0, shard_header_bytes);
  std::memcpy(h, shard_magic, sizeof shard_magic);
  detail::store_le32(h + 8, shard_version);
  detail::store_le32(h + 12, static_cast<std::uint32_t>(shard_header_bytes));
  detail::store_le64(h + 16, step.value());
  detail::store_le32(h + 24, rank.value());
  detail::store_le64(h + 32, length);
  detail::store_le64(h + 40, checksum);
  detail::store_le64(h + header_checksum_offset,
                     xxh64(std::span<const std::byte>{h, header_checksum_offset}));
}

bool valid_name(std::string_view name) {
  constexpr std::string_view ext = ".shard";
  return name.size() > ext.size() && name.substr(name.size() - ext.size()) == ext &&
         name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

// Writes all of `data` at `offset`, asking `hooks` before each write(2).
status write_all(int fd, std::span<const std::byte> data, std::uint64_t offset, shard_file_hooks* hooks,
                 const std::string& what) {
  while (!data.empty()) {
    const std::size_t n = std::min(data.size(), io_chunk);
    std::size_t partial = 0;
    const int injected = hooks != nullptr ? hooks->before_write(offset, n, partial) : 0;
    const std::size_t attempt = injected != 0 ? std::min(partial, n) : n;
    ssize_t w = 0;
    if (attempt > 0) {
      w = ::pwrite(fd, data.data(), attempt, static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR)
          continue;
        return detail::from_errno(errno, what + ": write of " + std::to_string(n) + " bytes at offset " +
                                             std::to_string(offset));
      }
    }
    const auto done = static_cast<std::size_t>(w);
    if (injected != 0)
      return detail::from_errno(injected, what + ": write of " + std::to_string(n) + " bytes at offset " +
                                              std::to_string(offset + done) + " (after " + std::to_string(done) +
                                              " bytes)");
    data = data.subspan(done);
    offset += done;
  }
  return {};
}

// Reads exactly out.size() bytes at `offset`; `got` says how many arrived before end of file.
status read_all(int fd, std::span<std::byte> out, std::uint64_t offset, std::size_t& got, const std::string& what) {
  got = 0;
  while (got < out.size()) {
    const ssize_t r = ::pread(fd, out.data() + got, std::min(out.size() - got, io_chunk), static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return detail::from_errno(errno, what + ": read at offset " + std::to_string(offset + got));
    }
    if (r == 0)
      break;
    got += static_cast<std::size_t>(r);
  }
  return {};
}

status fsync_dir(const fs::path& dir, const std::string& what) {
  unique_fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.get() < 0)
    return detail::from_errno(errno, what + ": open of the directory for fsync");
  if (::fsync(d.get()) != 0)
    return detail::from_errno(errno, what + ": fsync of the directory");
  return {};
}

// Reads and checks a shard; the payload goes into `*whole` when given, else through a small buffer.
expected<shard_info> read_checked(const fs::path& file, const shard_expectation& expect,
                                  std::vector<std::byte>* whole) {
  const bool allocate_first = whole != nullptr;
  const std::string what = "shard file " + file.string();
  unique_fd fd{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.get() < 0)
    return detail::from_errno(errno, what + ": open");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return detail::from_errno(errno, what + ": fstat");
  const auto size = static_cast<std::uint64_t>(st.st_size);

  std::byte h[shard_header_bytes]{};
  std::size_t got = 0;
  RK_RETURN_IF_ERROR(read_all(fd.get(), std::span<std::byte>{h, shard_header_bytes}, 0, got, what));
  if (got >= sizeof shard_magic && std::memcmp(h, shard_magic, sizeof shard_magic) != 0)
    return status{errc::data_loss, what + " byte 0: wrong magic (not a shard file)"};
  if (got < shard_header_bytes)
    return status{errc::data_loss, what + ": truncated at byte " + std::to_string(got) + ": the header needs " +
                                       std::to_string(shard_header_bytes) + " bytes"};
  const std::uint64_t stored_hsum = detail::load_le64(h + header_checksum_offset);
  const std::uint64_t hsum = xxh64(std::span<const std::byte>{h, header_checksum_offset});
  if (stored_hsum != hsum)
    return status{errc::data_loss, what + " byte " + std::to_string(header_checksum_offset) +
                                       ": header checksum mismatch (stored " + detail::hex64(stored_hsum) +
                                       ", computed " + detail::hex64(hsum) + " over bytes [0, 56))"};
  if (const auto v = detail::load_le32(h + 8); v != shard_version)
    return status{errc::data_loss, what + " byte 8: version " + std::to_string(v) + " is not " +
                                       std::to_string(shard_version)};
  if (const auto hb = detail::load_le32(h + 12); hb != shard_header_bytes)
    return status{errc::data_loss, what + " byte 12: header_bytes " + std::to_string(hb) + " is not " +
                                       std::to_string(shard_header_bytes)};
  shard_info info{step_t{detail::load_le64(h + 16)}, rank_id{detail::load_le32(h + 24)}, detail::load_le64(h + 32),
                  detail::load_le64(h + 40)};
  if (info.size > size - shard_header_bytes)
    return status{errc::data_loss, what + ": truncated at byte " + std::to_string(size) + ": the header (byte 32) says " +
                                       std::to_string(shard_header_bytes) + " + " + std::to_string(info.size) +
                                       " = " + std::to_string(shard_header_bytes + info.size) + " bytes"};
  if (info.size < size - shard_header_bytes)
    return status{errc::data_loss, what + ": " + std::to_string(size - shard_header_bytes - info.size) +
                                       " extra bytes after the payload, from byte " +
                                       std::to_string(shard_header_bytes + info.size)};
  auto differs = [&](std::string_view field, std::size_t offset, std::uint64_t found, std::uint64_t wanted) {
    return status{errc::data_loss, what + " byte " + std::to_string(offset) + ": " + std::string{field} + " " +
                                       std::to_string(found) + ", the manifest says " + std::to_string(wanted)};
  };
  if (expect.step && *expect.step != info.step)
    return differs("step", 16, info.step.value(), expect.step->value());
  if (expect.rank && *expect.rank != info.rank)
    return differs("rank", 24, info.rank.value(), expect.rank->value());
  if (expect.size && *expect.size != info.size)
    return differs("payload length", 32, info.size, *expect.size);
  if (expect.checksum && *expect.checksum != info.checksum)
    return status{errc::data_loss, what + " byte 40: payload checksum " + detail::hex64(info.checksum) +
                                       ", the manifest says " + detail::hex64(*expect.checksum)};

  snapshot_checksum_stream hs;
  std::vector<std::byte> buffer;
  if (allocate_first)
    whole->resize(static_cast<std::size_t>(info.size));
  else
    buffer.resize(static_cast<std::size_t>(std::min<std::uint64_t>(info.size, io_chunk)));
  for (std::uint64_t at = 0; at < info.size;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(info.size - at, io_chunk));
    std::span<std::byte> chunk = allocate_first ? std::span<std::byte>{whole->data() + at, n}
                                                : std::span<std::byte>{buffer.data(), n};
    RK_RETURN_IF_ERROR(read_all(fd.get(), chunk, shard_header_bytes + at, got, what));
    if (got < n)
      return status{errc::data_loss, what + ": truncated at byte " + std::to_string(shard_header_bytes + at + got) +
                                         " while reading (the file shrank)"};
    hs.update(chunk);
    at += n;
  }
  if (hs.digest() != info.checksum)
    return status{errc::data_loss, what + ": payload checksum mismatch (stored " + detail::hex64(info.checksum) +
                                       " at byte 40, computed " + detail::hex64(hs.digest()) + " over bytes [" +
                                       std::to_string(shard_header_bytes) + ", " +
                                       std::to_string(shard_header_bytes + info.size) + "))"};
  return info;
}

}  // namespace

std::string_view to_string(shard_sync_point p) noexcept {
  switch (p) {
    case shard_sync_point::after_write: return "after_write";
    case shard_sync_point::after_fsync: return "after_fsync";
    case shard_sync_point::after_rename: return "after_rename";
  }
  return "unknown";
}

expected<shard_sync_point> parse_shard_sync_point(std::string_view text) {
  for (auto p : {shard_sync_point::after_write, shard_sync_point::after_fsync, shard_sync_point::after_rename})
    if (to_string(p) == text)
      return p;
  return status{errc::parse_error, "'" + std::string{text} +
                                       "' is not a shard sync point (after_write, after_fsync, after_rename)"};
}

status shard_file_hooks::at(shard_sync_point, const fs::path&) { return {}; }

int shard_file_hooks::before_write(std::uint64_t, std::size_t, std::size_t&) { return 0; }

std::string shard_file_name(step_t step, rank_id rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ckpt-%012llu-r%06u.shard", static_cast<unsigned long long>(step.value()),
                static_cast<unsigned>(rank.value()));
  return buf;
}

expected<shard_info> write_shard(const fs::path& dir, std::string_view name, step_t step, rank_id rank,
                                 std::span<const std::byte> payload, const shard_write_options& options) {
  if (!valid_name(name))
    return status{errc::invalid_argument, "shard file name '" + std::string{name} +
                                              "' must be a plain file name ending in '.shard'"};
  const fs::path final_path = dir / std::string{name};
  const fs::path tmp_path = dir / (std::string{name} + ".tmp");
  const std::string what = "shard file " + final_path.string();
  shard_file_hooks* hooks = options.hooks;

  // Step 1.
  unique_fd fd{::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (fd.get() < 0)
    return detail::from_errno(errno, what + ": step 1 (create " + tmp_path.filename().string() + ")");
  // Until the rename, every failure removes NAME.tmp: nothing half-written stays behind.
  auto fail = [&](status st) {
    fd.reset();
    ::unlink(tmp_path.c_str());
    return st;
  };
  std::byte header[shard_header_bytes]{};
  if (auto st = write_all(fd.get(), header, 0, hooks, what + ": step 1"); !st.ok())
    return fail(st);

  // Step 2.
  snapshot_checksum_stream hs;
  for (std::size_t at = 0; at < payload.size(); at += io_chunk) {
    const auto chunk = payload.subspan(at, std::min(io_chunk, payload.size() - at));
    if (!options.known_checksum)
      hs.update(chunk);
    if (auto st = write_all(fd.get(), chunk, shard_header_bytes + at, hooks, what + ": step 2"); !st.ok())
      return fail(st);
  }
  const std::uint64_t sum = options.known_checksum ? *options.known_checksum : hs.digest();
  if (options.expected_checksum && *options.expected_checksum != sum)
    return fail(status{errc::aborted, what + ": the payload changed while it was written (checksum " +
                                          detail::hex64(sum) + ", expected " + detail::hex64(*options.expected_checksum) +
                                          ")"});
  encode_header(header, step, rank, payload.size(), sum);
  if (auto st = write_all(fd.get(), header, 0, hooks, what + ": step 2 (header)"); !st.ok())
    return fail(st);
  if (hooks != nullptr)
    if (auto st = hooks->at(shard_sync_point::after_write, tmp_path); !st.ok())
      return fail(st);

  // Step 3.
  if (::fsync(fd.get()) != 0)
    return fail(detail::from_errno(errno, what + ": step 3 (fsync)"));
  if (const int err = fd.reset(); err != 0)
    return fail(detail::from_errno(err, what + ": step 3 (close)"));
  if (hooks != nullptr)
    if (auto st = hooks->at(shard_sync_point::after_fsync, tmp_path); !st.ok())
      return fail(st);

  // Step 4.
  if (::rename(tmp_path.c_str(), final_path.c_str()) != 0)
    return fail(detail::from_errno(errno, what + ": step 4 (rename from " + tmp_path.filename().string() + ")"));
  if (hooks != nullptr)
    RK_RETURN_IF_ERROR(hooks->at(shard_sync_point::after_rename, final_path));

  // Step 5.
  RK_RETURN_IF_ERROR(fsync_dir(dir, what + ": step 5"));
  return shard_info{step, rank, payload.size(), sum};
}

expected<shard_info> verify_shard(const fs::path& file, const shard_expectation& expect) {
  return read_checked(file, expect, nullptr);
}

expected<shard_info> read_shard(const fs::path& file, std::vector<std::byte>& payload,
                                const shard_expectation& expect) {
  std::vector<std::byte> data;
  auto info = read_checked(file, expect, &data);
  if (info)
    payload = std::move(data);
  return info;
}

expected<shard_gc_report> collect_garbage(const fs::path& dir, const std::set<std::string>& referenced) {
  const std::string what = "checkpoint directory " + dir.string();
  std::unique_ptr<DIR, int (*)(DIR*)> d{::opendir(dir.c_str()), ::closedir};
  if (!d)
    return detail::from_errno(errno, what + ": opendir");
  auto ends_with = [](std::string_view s, std::string_view suffix) {
    return s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
  };
  std::vector<std::string> doomed;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string n{e->d_name};
    if (ends_with(n, ".tmp") || (ends_with(n, ".shard") && referenced.count(n) == 0))
      doomed.push_back(n);
  }
  std::sort(doomed.begin(), doomed.end());
  shard_gc_report report;
  for (const auto& n : doomed) {
    const fs::path p = dir / n;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (::unlink(p.c_str()) != 0) {
      if (errno == ENOENT)
        continue;
      return detail::from_errno(errno, what + ": unlink " + n);
    }
    report.removed.push_back(n);
    report.bytes += static_cast<std::uint64_t>(st.st_size);
  }
  if (!report.removed.empty())
    RK_RETURN_IF_ERROR(fsync_dir(dir, what));
  return report;
}

}  // namespace rekindle::storage
