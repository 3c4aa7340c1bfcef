#include "storage/event_writer.hpp"

#include "common/process.hpp"

namespace rekindle::storage::detail {

event_writer::event_writer(sink write, std::uint64_t durable_seq, std::size_t batch,
                           std::chrono::milliseconds delay, std::size_t max_pending, sync_sink sync)
    : write_(std::move(write)),
      sync_(std::move(sync)),
      batch_(batch == 0 ? 1 : batch),
      delay_(delay),
      max_pending_(max_pending == 0 ? 1 : max_pending),
      last_seq_(durable_seq),
      written_seq_(durable_seq),
      durable_seq_(durable_seq),
      thread_([this] { run(); }) {}

event_writer::~event_writer() { (void)stop(); }

expected<std::uint64_t> event_writer::append(const std::function<std::string(std::uint64_t)>& encode) {
  std::unique_lock lock{mu_};
  if (!error_.ok())
    return error_;
  if (stopping_)
    return status{errc::failed_precondition, "event log: the store is closed"};
  if (pending_.size() >= max_pending_)
    return status{errc::resource_exhausted, "event log: " + std::to_string(pending_.size()) +
                                                " events wait to be written (the limit); the disk is too slow "
                                                "or the writer is stuck"};
  const std::uint64_t seq = last_seq_ + 1;
  pending_.push_back(pending_event{seq, encode(seq)});
  last_seq_ = seq;
  if (pending_.size() == 1)
    oldest_ = std::chrono::steady_clock::now();
  if (pending_.size() == 1 || pending_.size() >= batch_)
    wake_.notify_one();
  return seq;
}

status event_writer::flush() { return wait_for(durable_seq_); }

status event_writer::flush_written() { return wait_for(written_seq_); }

status event_writer::wait_for(const std::uint64_t& reached) {
  std::unique_lock lock{mu_};
  const std::uint64_t target = last_seq_;
  ++flushers_;
  wake_.notify_one();
  done_.wait(lock, [&] { return reached >= target || !error_.ok() || stopped_; });
  --flushers_;
  if (reached >= target)
    return {};
  if (!error_.ok())
    return error_;
  return status{errc::failed_precondition, "event log: the store is closed"};
}

status event_writer::stop() {
  {
    std::lock_guard lock{mu_};
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable())
    thread_.join();
  std::lock_guard lock{mu_};
  stopped_ = true;
  done_.notify_all();
  return error_;
}

std::uint64_t event_writer::last_seq() const {
  std::lock_guard lock{mu_};
  return last_seq_;
}

std::uint64_t event_writer::durable_seq() const {
  std::lock_guard lock{mu_};
  return durable_seq_;
}

void event_writer::run() {
  name_this_thread("rk-event-log");
  std::unique_lock lock{mu_};
  for (;;) {
    // Step 2: wait for a reason to write.
    for (;;) {
      if (!error_.ok() && stopping_)
        return;
      if (!pending_.empty() && error_.ok()) {
        if (stopping_ || flushers_ > 0 || pending_.size() >= batch_)
          break;
        if (std::chrono::steady_clock::now() >= oldest_ + delay_)
          break;
        wake_.wait_until(lock, oldest_ + delay_);
        continue;
      }
      if (stopping_)
        return;
      wake_.wait(lock);
    }
    std::vector<pending_event> batch;
    batch.swap(pending_);
    lock.unlock();
    status st = write_(batch);
    lock.lock();
    // Step 3.
    if (!st.ok()) {
      error_ = std::move(st);
      done_.notify_all();
      continue;
    }
    written_seq_ = batch.back().seq;
    if (!sync_) {
      durable_seq_ = written_seq_;
      done_.notify_all();
      continue;
    }
    done_.notify_all();
    lock.unlock();
    st = sync_();
    lock.lock();
    if (st.ok())
      durable_seq_ = batch.back().seq;
    else
      error_ = std::move(st);
    done_.notify_all();
  }
}

}  // namespace rekindle::storage::detail
