#include "storage/shard_writer.hpp"

#include <chrono>

namespace rekindle::storage {

shard_writer::shard_writer(std::function<void(shard_done)> done, shard_file_hooks* hooks)
    : done_(std::move(done)), hooks_(hooks), thread_([this] { run(); }) {}

shard_writer::~shard_writer() {
  {
    std::lock_guard lock{mutex_};
    stop_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

void shard_writer::submit(shard_job job) {
  {
    std::lock_guard lock{mutex_};
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void shard_writer::run() {
  for (;;) {
    shard_job job;
    {
      std::unique_lock lock{mutex_};
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_)
        return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    const auto t0 = std::chrono::steady_clock::now();
    shard_write_options options;
    options.hooks = hooks_;
    options.expected_checksum = job.checksum;
    auto file = shard_file_name(job.step, job.rank);
    auto result = write_shard(job.dir, file, job.step, job.rank, job.payload, options);
    shard_done d{job.step, job.rank, std::move(file), std::move(result), 0};
    d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    job.payload = {};
    done_(std::move(d));
  }
}

}  // namespace rekindle::storage
