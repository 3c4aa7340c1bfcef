#include "common/files.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/process.hpp"
#include "common/text.hpp"

namespace rekindle {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

}  // namespace

expected<std::string> read_file_bounded(const std::filesystem::path& path, std::uint64_t max_bytes,
                                        std::string_view what) {
  const std::string kind{what};
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    return status{e == ENOENT || e == ENOTDIR ? errc::not_found : errc::io_error,
                  "cannot read " + kind + ": " + std::strerror(e)};
  }
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return status{errc::io_error, "cannot read " + kind + ": " + std::strerror(errno)};
  if (!S_ISREG(st.st_mode))
    return status{errc::invalid_argument, "is " + kind_of(st.st_mode) + ", not a " + kind};
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
    return status{errc::invalid_argument, "is " + format_bytes(static_cast<double>(st.st_size)) + "; the limit for a " +
                                              kind + " is " + format_bytes(static_cast<double>(max_bytes))};
  // A file that grows while it is read is cut at the limit and refused.
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (true) {
    if (got == out.size()) {
      if (out.size() > max_bytes)
        return status{errc::invalid_argument, "grew past the limit for a " + kind + " of " +
                                                  format_bytes(static_cast<double>(max_bytes)) + " while it was read"};
      out.resize(std::min<std::size_t>(out.size() + 65536, static_cast<std::size_t>(max_bytes) + 1));
    }
    const auto n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return status{errc::io_error, "cannot read " + kind + ": " + std::strerror(errno)};
    if (n == 0)
      break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

status write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out.flush())
      return status{errc::io_error, "cannot write " + tmp};
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return status{errc::io_error, "cannot rename " + tmp + " to " + path.string() + ": " + ec.message()};
  return {};
}

background_file_writer::background_file_writer(std::chrono::milliseconds stop_wait)
    : state_(std::make_shared<state>()), stop_wait_(stop_wait) {
  std::thread([s = state_] { run(s); }).detach();
}

background_file_writer::~background_file_writer() {
  std::unique_lock lock{state_->mutex};
  state_->stopping = true;
  state_->work.notify_one();
  if (!state_->done.wait_for(lock, stop_wait_, [&] { return state_->ended; }))
    spdlog::warn("the file writer's thread is still in a write after {} ms; it is left to end on its own",
                 stop_wait_.count());
}

void background_file_writer::write(std::filesystem::path path, std::string text) {
  std::lock_guard lock{state_->mutex};
  state_->pending[std::move(path)] = std::move(text);
  ++state_->handed;
  state_->work.notify_one();
}

bool background_file_writer::flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock{state_->mutex};
  const auto until = state_->handed;
  return state_->done.wait_for(lock, timeout, [&] { return state_->written >= until; });
}

void background_file_writer::run(const std::shared_ptr<state>& s) {
  name_this_thread("rk-file-writer");
  std::map<std::filesystem::path, bool> failing;
  std::unique_lock lock{s->mutex};
  for (;;) {
    s->work.wait(lock, [&] { return s->stopping || !s->pending.empty(); });
    if (s->pending.empty())
      break;  // stopping, and everything is written
    auto batch = std::move(s->pending);
    s->pending.clear();
    const auto taken = s->handed;
    lock.unlock();
    for (const auto& [path, text] : batch) {
      const auto st = write_file_atomically(path, text);
      auto& was_failing = failing[path];
      if (!st.ok() && !was_failing)
        spdlog::warn("{} (not logged again until it is written)", st.message());
      was_failing = !st.ok();
    }
    lock.lock();
    s->written = taken;
    s->done.notify_all();
  }
  s->ended = true;
  s->done.notify_all();
}

}  // namespace rekindle
