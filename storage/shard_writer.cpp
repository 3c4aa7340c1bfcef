#include "storage/shard_writer.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

#include "common/checksum.hpp"
#include "common/process.hpp"

namespace rekindle::storage {

shard_writer::shard_writer(std::function<void(shard_done)> done, shard_file_hooks* hooks)
    : done_(std::move(done)), hooks_(hooks), copier_([this] { copy_loop(); }), writer_([this] { write_loop(); }) {}

shard_writer::~shard_writer() {
  {
    std::lock_guard lock{mutex_};
    stop_ = true;
    to_copy_.clear();
    to_write_.clear();
  }
  cv_.notify_all();
  copier_.join();
  writer_.join();
}

void shard_writer::submit(shard_job job) {
  {
    std::lock_guard lock{mutex_};
    to_copy_.push_back(std::move(job));
  }
  cv_.notify_all();
}

namespace {

// This thread at niceness 10 and the lowest best-effort I/O priority; either may be refused
// (a container without CAP_SYS_NICE refuses nothing here: lowering a priority needs no right).
void lower_priority() noexcept {
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  (void)::setpriority(PRIO_PROCESS, tid, 10);
  constexpr int ioprio_who_process = 1, ioprio_class_be = 2, ioprio_class_shift = 13, lowest = 7;
  (void)::syscall(SYS_ioprio_set, ioprio_who_process, static_cast<int>(tid),
                  (ioprio_class_be << ioprio_class_shift) | lowest);
}

}  // namespace

std::span<std::byte> shard_buffer::reserve(std::size_t size) {
  if (capacity < size) {
    bytes = std::make_unique_for_overwrite<std::byte[]>(size);
    capacity = size;
  }
  return {bytes.get(), size};
}

std::optional<shard_job> shard_writer::take(std::deque<shard_job>& queue) {
  std::unique_lock lock{mutex_};
  cv_.wait(lock, [&] { return stop_ || !queue.empty(); });
  if (stop_)
    return std::nullopt;
  auto job = std::move(queue.front());
  queue.pop_front();
  return job;
}

void shard_writer::copy_loop() {
  name_this_thread("rk-shard-copy");
  for (;;) {
    auto next = take(to_copy_);
    if (!next)
      return;
    shard_job job = std::move(*next);
    if (job.source) {
      auto source = std::move(*job.source);
      job.source.reset();
      job.size = source.bytes.size();
      job.checksum = copy_and_checksum(job.buffer.reserve(job.size), source.bytes);
      std::string error;
      if (source.still_valid && !source.still_valid())
        error = source.what + " changed while it was copied";
      else if (job.checksum != source.published_checksum)
        error = source.what + " fails its checksum";
      if (!error.empty()) {
        auto file = shard_file_name(job.step, job.rank);
        done_(shard_done{job.step, job.rank, std::move(file), status{errc::data_loss, std::move(error)}, 0,
                         std::move(job.buffer)});
        continue;
      }
    }
    {
      std::lock_guard lock{mutex_};
      if (stop_)
        return;
      to_write_.push_back(std::move(job));
    }
    cv_.notify_all();
  }
}

void shard_writer::write_loop() {
  name_this_thread("rk-shard-write");
  lower_priority();
  for (;;) {
    auto next = take(to_write_);
    if (!next)
      return;
    shard_job job = std::move(*next);
    const auto t0 = std::chrono::steady_clock::now();
    shard_write_options options;
    options.hooks = hooks_;
    options.known_checksum = job.checksum;
    auto file = shard_file_name(job.step, job.rank);
    const std::span<const std::byte> payload{job.buffer.bytes.get(), job.size};
    auto result = write_shard(job.dir, file, job.step, job.rank, payload, options);
    shard_done d{job.step, job.rank, std::move(file), std::move(result), 0, std::move(job.buffer)};
    d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    done_(std::move(d));
  }
}

}  // namespace rekindle::storage
