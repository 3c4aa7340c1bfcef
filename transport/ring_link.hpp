#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/expected.hpp"

// The two halves of a ring rank's links: a sender to the right neighbour and a receiver from the
// left one. Both carry an ordered stream of chunks; a collective is a sequence of chunks in a
// fixed order that sender and receiver agree on, identified by a tag (call, step, chunk) that the
// receiver checks. Private to the ring communicator.

namespace rekindle::transport::detail {

/// Where chunks to the right neighbour go.
class ring_sender {
 public:
  virtual ~ring_sender() = default;
  /// Called at the start of each collective.
  virtual void begin_call(std::uint32_t seq) = 0;
  /// Sends `len` bytes at `data` as the next chunk, or returns false when the link is full (try
  /// again after progress()). `data` must stay unchanged until call_may_end() holds.
  [[nodiscard]] virtual bool try_send(std::uint64_t tag, const std::byte* data, std::size_t len) = 0;
  /// True once nothing this call sent still reads local memory.
  [[nodiscard]] virtual bool call_may_end() = 0;
  [[nodiscard]] virtual status error() const = 0;
  /// Prepares for destruction: cancels what can be cancelled. Returns true once UCX holds no
  /// request of this link any more (progress the worker and ask again).
  [[nodiscard]] virtual bool wind_down() = 0;
};

/// Where chunks from the left neighbour arrive.
class ring_receiver {
 public:
  virtual ~ring_receiver() = default;
  /// Called at the start of each collective with the chunks it will receive, in order.
  virtual void begin_call(std::uint32_t seq, std::vector<std::pair<std::uint64_t, std::size_t>> expected) = 0;
  /// The next expected chunk, once it has arrived (nullptr before). REQUIRES: one is expected.
  [[nodiscard]] virtual const std::byte* try_receive() = 0;
  /// Done with the chunk try_receive() returned.
  virtual void release() = 0;
  /// True once this rank may end the call as far as the left neighbour is concerned.
  [[nodiscard]] virtual bool call_may_end() = 0;
  [[nodiscard]] virtual status error() const = 0;
  /// As ring_sender::wind_down.
  [[nodiscard]] virtual bool wind_down() = 0;
};

/// The receiving end of a same-host link: a mailbox of `slots` chunk slots in memory UCX
/// allocates as shared memory. The left neighbour maps it (ucp_rkey_ptr) and writes chunks
/// straight into the slots: one copy per chunk, no UCX messages, and no transport error if either
/// side dies (the memory stays mapped; the other side runs into its deadline).
///
/// Mailbox layout: a header cache line with `consumed` (messages the receiver released), one
/// cache line per slot with `number` (message number stored there, 1-based, written last with
/// release order), `tag` and `len`, then the slot data.
///
/// Protocol for message m (1-based), slot (m - 1) % slots:
///   1. The sender waits until consumed >= m - slots (the slot is free).
///   2. It copies the chunk into the slot, writes tag and len, then stores number = m (release).
///   3. The receiver sees number == m (acquire), checks tag and len, uses the chunk in place.
///   4. It stores consumed = m (release): the slot may be reused.
struct mailbox_layout {
  std::size_t slots = 0;
  std::size_t slot_size = 0;
  [[nodiscard]] std::size_t header_size() const noexcept { return 64 * (1 + slots); }
  [[nodiscard]] std::size_t total_size() const noexcept { return header_size() + slots * slot_size; }
};

/// Host memory UCX allocates as shared memory, which other processes of this host map by its
/// address bytes (base, size and packed key).
class shm_region {
 public:
  /// `what` names the region in errors ("the ring mailbox").
  static expected<std::unique_ptr<shm_region>> create(ucp_context_h context, std::size_t bytes, const std::string& what);
  ~shm_region();
  shm_region(const shm_region&) = delete;
  shm_region& operator=(const shm_region&) = delete;
  [[nodiscard]] const std::vector<std::byte>& address_bytes() const noexcept { return address_; }
  [[nodiscard]] std::byte* base() const noexcept { return base_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  shm_region() = default;
  ucp_context_h context_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  std::vector<std::byte> address_;
};

/// Another process's shm_region mapped here, through an endpoint to it. The mapping stays valid
/// when that process dies; it goes with this object (before the endpoint is closed).
class mapped_region {
 public:
  /// errc::unsupported when UCX cannot map it here (another host, no shared memory);
  /// errc::invalid_argument for malformed address bytes.
  static expected<std::unique_ptr<mapped_region>> map(ucp_ep_h ep, std::span<const std::byte> address);
  ~mapped_region();
  mapped_region(const mapped_region&) = delete;
  mapped_region& operator=(const mapped_region&) = delete;
  [[nodiscard]] std::byte* base() const noexcept { return base_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  mapped_region() = default;
  ucp_rkey_h rkey_ = nullptr;
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
};

/// The mailbox: a region of mailbox_layout's size.
class shm_mailbox {
 public:
  static expected<std::unique_ptr<shm_mailbox>> create(ucp_context_h context, mailbox_layout layout);
  /// What the left neighbour needs to map it.
  [[nodiscard]] const std::vector<std::byte>& address_bytes() const noexcept { return region_->address_bytes(); }
  [[nodiscard]] std::byte* base() const noexcept { return region_->base(); }
  [[nodiscard]] const mailbox_layout& layout() const noexcept { return layout_; }

 private:
  shm_mailbox() = default;
  std::unique_ptr<shm_region> region_;
  mailbox_layout layout_;
};

std::unique_ptr<ring_receiver> make_shm_receiver(shm_mailbox& mailbox);

/// Maps the right neighbour's mailbox through `ep` (an endpoint to it) and the bytes it
/// published; errc::unsupported when UCX cannot map it here (another host, no shared memory).
expected<std::unique_ptr<ring_sender>> make_shm_sender(ucp_ep_h ep, std::span<const std::byte> mailbox_address,
                                                       mailbox_layout layout);

/// UCX tag messages, for neighbours on other hosts (peer-failure endpoints). The receiver posts
/// receives into its own slots, at most `window` at a time, and when a call's chunks are all in
/// sends a one-byte fin to its left neighbour (`left`): the sender may end its call once the fin
/// arrived, even before UCX acknowledged every send.
std::unique_ptr<ring_sender> make_ucx_sender(ucp_worker_h worker, ucp_ep_h right, std::uint32_t gen);
std::unique_ptr<ring_receiver> make_ucx_receiver(ucp_worker_h worker, ucp_ep_h left, std::size_t slot_size,
                                                 std::size_t window, std::uint32_t gen);

/// One UCX request in flight: the record a completion callback fills (it lives until UCX is done).
struct request_record {
  bool done = false;
  ucs_status_t result = UCS_OK;
  /// The UCX request while in flight (for cancelling).
  void* request = nullptr;
  /// Bytes a receive got.
  std::size_t length = 0;
};
/// Completion callbacks for ucp_tag_send_nbx / ucp_tag_recv_nbx with a request_record as user data.
void on_send_done(void* request, ucs_status_t s, void* user_data);
void on_recv_done(void* request, ucs_status_t s, const ucp_tag_recv_info_t* info, void* user_data);
/// Records what a ucp_*_nbx call returned: done at once, failed at once, or in flight.
void track(request_record& r, void* req);
/// How a rank waits for a peer with nothing to do: spins for 20 µs of idleness, then yields the core,
/// from 2 ms naps an eighth of the idle time (at most 1 ms), so a rank waiting on a restoring peer
/// gives the cores to it.
void idle_wait(std::chrono::steady_clock::duration idle);

/// The tag of chunk `chunk` of step `step` of call `seq` of communicator generation `gen`:
/// generation 16 bits, call 16, step 12, chunk 20. The generation keeps a communicator's tags
/// apart from those of earlier ones on the same UCX worker.
constexpr std::uint64_t chunk_tag(std::uint32_t seq, std::uint32_t step, std::size_t chunk, std::uint32_t gen = 0) noexcept {
  return (std::uint64_t{gen & 0xffffu} << 48) | (std::uint64_t{seq & 0xffffu} << 32) | (std::uint64_t{step & 0xfffu} << 20) |
         (chunk & 0xfffffu);
}
/// The tag of a call's fin.
constexpr std::uint64_t fin_tag(std::uint32_t seq, std::uint32_t gen = 0) noexcept { return chunk_tag(seq, 0xfff, 0, gen); }

}  // namespace rekindle::transport::detail
