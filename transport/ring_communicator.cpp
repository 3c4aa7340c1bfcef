#include "transport/ring_communicator.hpp"

#include <sched.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <fstream>
#include <optional>
#include <thread>

#include "common/check.hpp"
#include "transport/reduce.hpp"
#include "transport/ring_link.hpp"
#include "transport/ucx.hpp"

namespace rekindle::transport {

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;
using detail::chunk_tag;

// Identifies the machine, its boot, this IPC namespace and this network namespace: ranks with equal
// identities share memory. Hosts emulated as network namespaces of one machine (the multi-host
// tests) are different hosts, whose traffic crosses their links.
std::string host_identity() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string id = name;
  std::ifstream boot{"/proc/sys/kernel/random/boot_id"};
  std::string boot_id;
  if (boot >> boot_id)
    id += "/" + boot_id;
  char ipc[128] = {};
  if (const auto n = readlink("/proc/self/ns/ipc", ipc, sizeof ipc - 1); n > 0)
    id += "/" + std::string(ipc, static_cast<std::size_t>(n));
  char net[128] = {};
  if (const auto n = readlink("/proc/self/ns/net", net, sizeof net - 1); n > 0)
    id += "/" + std::string(net, static_cast<std::size_t>(n));
  return id;
}

int wrap(int x, int n) { return ((x % n) + n) % n; }

// A rank's address: what it publishes at rendezvous, in length-prefixed parts.
struct ring_address {
  std::string host;
  std::vector<std::byte> worker;
  std::vector<std::byte> mailbox;
  /// The control words of the shared-buffer path, then each shared buffer (none: no shared buffers).
  std::vector<std::vector<std::byte>> shared;
};

// Length-prefixed parts: the layout of addresses, and of the list of shared regions inside one.
void put_part(std::vector<std::byte>& out, std::span<const std::byte> bytes) {
  const auto n = static_cast<std::uint32_t>(bytes.size());
  const auto* p = reinterpret_cast<const std::byte*>(&n);
  out.insert(out.end(), p, p + 4);
  out.insert(out.end(), bytes.begin(), bytes.end());
}

bool take_part(std::span<const std::byte> in, std::size_t& at, std::vector<std::byte>& out) {
  if (in.size() - at < 4)
    return false;
  std::uint32_t n = 0;
  std::memcpy(&n, in.data() + at, 4);
  at += 4;
  if (in.size() - at < n)
    return false;
  out.assign(in.begin() + static_cast<std::ptrdiff_t>(at), in.begin() + static_cast<std::ptrdiff_t>(at + n));
  at += n;
  return true;
}

std::vector<std::byte> encode(const ring_address& a) {
  std::vector<std::byte> out;
  put_part(out, std::as_bytes(std::span{a.host.data(), a.host.size()}));
  put_part(out, a.worker);
  put_part(out, a.mailbox);
  std::vector<std::byte> shared;
  for (const auto& region : a.shared)
    put_part(shared, region);
  put_part(out, shared);
  return out;
}

expected<ring_address> decode(std::span<const std::byte> in, int rank) {
  ring_address a;
  std::size_t at = 0;
  const auto part = [&](std::vector<std::byte>& out) { return take_part(in, at, out); };
  std::vector<std::byte> host;
  std::vector<std::byte> shared;
  const auto malformed = [&] {
    return status{errc::invalid_argument, "malformed ring address of rank " + std::to_string(rank) + " (" +
                                              std::to_string(in.size()) + " bytes)"};
  };
  if (!part(host) || !part(a.worker) || !part(a.mailbox) || !part(shared) || at != in.size() || a.worker.empty())
    return malformed();
  for (std::size_t s = 0; s < shared.size();) {
    if (a.shared.size() > ring_resources::max_shared_buffers || !take_part(shared, s, a.shared.emplace_back()))
      return malformed();
  }
  a.host.assign(reinterpret_cast<const char*>(host.data()), host.size());
  return a;
}

// One step of a collective as this rank sees it: what it sends to the right neighbour and what
// it receives from the left one. Chunk c of a step's send is chunk c of the previous step's
// receive (the ring forwards what it just reduced), so send (t, c) waits for receive (t - 1, c).
// Every region is written at most once per call, or only after the chunks that read it have
// travelled on (an allgather chunk can only arrive after the neighbour consumed the
// reduce-scatter chunk that read the same bytes), so no send ever waits on a later receive.
struct plan_step {
  bool has_send = false;
  const std::byte* send_src = nullptr;
  std::size_t send_len = 0;
  /// The receiver's step number for this send.
  std::uint32_t send_step = 0;

  bool has_recv = false;
  std::byte* out = nullptr;
  /// Reduce: out = operand (op) received. Copy (operand == nullptr): out = received.
  const std::byte* operand = nullptr;
  std::size_t recv_len = 0;
  /// Scale `out` by 1/size after the reduction (the last reduce step of an average).
  bool scale = false;
};

std::size_t normalised_chunk(std::size_t chunk) {
  chunk = std::max<std::size_t>(chunk, 4096);
  return chunk - chunk % 64;
}

detail::mailbox_layout layout_for(std::size_t chunk) {
  return {std::clamp<std::size_t>((8u << 20) / chunk, 2, 8), chunk};
}

// A point-to-point message's tag: the step field 0xffe (no collective has that many steps), the
// sender's rank in the chunk field, and the number of the message between the two ranks.
constexpr std::uint32_t p2p_step = 0xffe;
std::uint64_t p2p_tag(std::uint32_t number, int from, std::uint32_t gen) noexcept {
  return chunk_tag(number, p2p_step, static_cast<std::size_t>(from), gen);
}

// A point-to-point send in flight owns a copy of its bytes until UCX is done.
struct p2p_send {
  detail::request_record record;
  std::vector<std::byte> bytes;
};

// Below this many bytes a collective on shared buffers runs the ring all the same: the ranks'
// agreement on their buffers costs more than it saves.
constexpr std::size_t direct_min_bytes = 64 << 10;

// Point-to-point sends a rank may have in flight before send() waits for some to complete.
constexpr std::size_t max_pending_sends = 256;

}  // namespace

class ring_resources::impl {
 public:
  explicit impl(ring_options options) : options_(std::move(options)), chunk_(normalised_chunk(options_.chunk_size)) {}

  ~impl() {
    // Links that UCX still held requests of go before the worker, then their mailboxes, then
    // the context.
    graveyard_senders_.clear();
    worker_.reset();
    graveyard_sends_.clear();
    graveyard_receivers_.clear();
    graveyard_mailboxes_.clear();
    spare_.reset();
    shared_.clear();
    control_.reset();
    context_.reset();
  }

  status init() {
    // Rendezvous by put: the sender writes and completes on its own, without waiting for a
    // receiver that may already have finished its call.
    RK_ASSIGN_OR_RETURN(context_, ucx_context::create(ucx_options{.active_messages = false,
                                                                  .tags = true,
                                                                  .wakeup = false,
                                                                  .net_devices = options_.net_devices,
                                                                  .tls = options_.tls,
                                                                  .rndv_scheme = "put_zcopy"}));
    RK_ASSIGN_OR_RETURN(worker_, ucx_worker::create(*context_, false));
    RK_ASSIGN_OR_RETURN(worker_address_, worker_->address());
    host_ = host_identity();
    return prepare();
  }

  status prepare() {
    if (spare_)
      return {};
    RK_ASSIGN_OR_RETURN(spare_, detail::shm_mailbox::create(context_->get(), layout_for(chunk_)));
    return {};
  }

  expected<std::span<std::byte>> allocate_shared(std::size_t bytes) {
    if (bytes == 0)
      return status{errc::invalid_argument, "a shared buffer of 0 bytes"};
    if (shared_.size() >= max_shared_buffers)
      return status{errc::out_of_range, "a rank's ring has at most " + std::to_string(max_shared_buffers) +
                                            " shared buffers; all are allocated"};
    if (!control_) {
      RK_ASSIGN_OR_RETURN(control_, detail::shm_region::create(context_->get(), 4096, "the shared buffers' control words"));
    }
    RK_ASSIGN_OR_RETURN(auto region, detail::shm_region::create(context_->get(), bytes, "a shared buffer"));
    shared_.push_back(std::move(region));
    return std::span<std::byte>{shared_.back()->base(), bytes};
  }

  /// A fresh mailbox for a new communicator: the spare when there is one.
  expected<std::unique_ptr<detail::shm_mailbox>> take_mailbox() {
    RK_RETURN_IF_ERROR(prepare());
    return std::move(spare_);
  }

  ring_options options_;
  std::size_t chunk_;
  std::optional<ucx_context> context_;
  std::optional<ucx_worker> worker_;
  std::vector<std::byte> worker_address_;
  std::string host_;
  std::unique_ptr<detail::shm_mailbox> spare_;
  /// The shared buffers, and the control words through which the ranks of a call on them agree.
  std::unique_ptr<detail::shm_region> control_;
  std::vector<std::unique_ptr<detail::shm_region>> shared_;
  std::vector<std::unique_ptr<detail::ring_sender>> graveyard_senders_;
  /// Point-to-point sends UCX still held when their communicator ended (their bytes with them).
  std::vector<std::shared_ptr<void>> graveyard_sends_;
  std::vector<std::unique_ptr<detail::ring_receiver>> graveyard_receivers_;
  std::vector<std::unique_ptr<detail::shm_mailbox>> graveyard_mailboxes_;
};

ring_resources::ring_resources(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
ring_resources::~ring_resources() = default;
status ring_resources::prepare() { return impl_->prepare(); }
expected<std::span<std::byte>> ring_resources::allocate_shared(std::size_t bytes) { return impl_->allocate_shared(bytes); }

expected<std::shared_ptr<ring_resources>> ring_resources::create(const ring_options& options) {
  auto p = std::make_unique<impl>(options);
  RK_RETURN_IF_ERROR(p->init());
  return std::shared_ptr<ring_resources>{new ring_resources{std::move(p)}};
}

class ring_communicator::impl {
 public:
  impl(std::shared_ptr<ring_resources> resources, int rank, int size, ring_options options)
      : resources_(std::move(resources)), rank_(rank), size_(size), options_(std::move(options)) {}

  ~impl() {
    // 1. Mapped keys go before their endpoints. 2. Endpoints close by force (queued sends complete
    // with an error; all are peer-failure endpoints, so neither side sees a transport error, and
    // no flush waits on a peer that may be dead: a same-host one logged three UCX errors in each
    // survivor of every recovery when it was closed gracefully). 3. The links
    // wind down while the shared worker progresses; what UCX still holds after a while stays in
    // the resources' graveyard, never freed under a pending request. A communicator that failed
    // or was aborted (a peer died: the recovery waits for this) gives its links 20 ms: a send to
    // a dead peer on another host is not released sooner by waiting, and the full 500 ms was
    // half a second of every such recovery.
    auto& res = resources_->internals();
    peers_.clear();  // the peers' shared buffers, mapped through the endpoints closed below
    const bool sender_shm = sender_ && right_local_;
    if (sender_shm)
      sender_.reset();
    const auto close = [](ucp_ep_h ep) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* req = ucp_ep_close_nbx(ep, &p);
      if (req != nullptr && !UCS_PTR_IS_ERR(req))
        ucp_request_free(req);
    };
    if (right_ep_ != nullptr)
      close(right_ep_);
    if (left_ep_ != nullptr && left_ep_ != right_ep_)
      close(left_ep_);
    for (auto& ep : p2p_eps_)
      if (ep != nullptr)
        close(ep);
    for (auto& send : pending_sends_)
      if (!send->record.done && send->record.request != nullptr)
        ucp_request_cancel(res.worker_->get(), send->record.request);
    const auto sends_done = [&] {
      (void)reap_sends();
      return pending_sends_.empty();
    };
    const auto limit = clock_type::now() + (broken_.ok() && !aborted() ? 500ms : 20ms);
    while (clock_type::now() < limit) {
      const bool s = !sender_ || sender_->wind_down();
      const bool r = !receiver_ || receiver_->wind_down();
      if (s && r && sends_done())
        break;
      ucp_worker_progress(res.worker_->get());
    }
    sends_done();
    for (auto& send : pending_sends_)
      res.graveyard_sends_.push_back(std::shared_ptr<p2p_send>(std::move(send)));
    const bool s_done = !sender_ || sender_->wind_down();
    const bool r_done = !receiver_ || receiver_->wind_down();
    if (sender_ && !s_done)
      res.graveyard_senders_.push_back(std::move(sender_));
    if (receiver_ && !r_done) {
      res.graveyard_receivers_.push_back(std::move(receiver_));
      if (mailbox_)
        res.graveyard_mailboxes_.push_back(std::move(mailbox_));
    }
    sender_.reset();
    receiver_.reset();
    mailbox_.reset();
  }

  status init() {
    if (size_ < 1 || size_ > max_size || rank_ < 0 || rank_ >= size_)
      return status{errc::invalid_argument, "ring of " + std::to_string(size_) + " ranks cannot have rank " +
                                                std::to_string(rank_) + " (sizes 1.." + std::to_string(max_size) + ")"};
    auto& res = resources_->internals();
    chunk_ = res.chunk_;
    gen_ = options_.generation & 0xffffu;
    RK_ASSIGN_OR_RETURN(mailbox_, res.take_mailbox());
    ring_address a;
    a.host = res.host_;
    host_ = a.host;
    a.worker = res.worker_address_;
    a.mailbox = mailbox_->address_bytes();
    if (res.control_) {
      // Control words of earlier communicators on these resources are stale: no peer reads them
      // before the barrier that ends connect(), which this rank reaches only after this.
      std::memset(res.control_->base(), 0, res.control_->size());
      a.shared.push_back(res.control_->address_bytes());
      for (const auto& b : res.shared_) {
        a.shared.push_back(b->address_bytes());
        own_shared_.emplace_back(b->base(), b->size());
      }
    }
    address_ = encode(a);
    return {};
  }

  const std::vector<std::byte>& address() const noexcept { return address_; }

  status connect(const std::vector<std::vector<std::byte>>& addresses) {
    if (addresses.size() != static_cast<std::size_t>(size_))
      return fail(status{errc::invalid_argument, "connect() needs " + std::to_string(size_) + " addresses, got " +
                                                     std::to_string(addresses.size())});
    if (size_ == 1)
      return {};
    peer_addresses_ = addresses;
    p2p_eps_.assign(static_cast<std::size_t>(size_), nullptr);
    sent_to_.assign(static_cast<std::size_t>(size_), 0);
    received_from_.assign(static_cast<std::size_t>(size_), 0);
    const int right = wrap(rank_ + 1, size_);
    const int left = wrap(rank_ - 1, size_);
    RK_ASSIGN_OR_RETURN(auto right_address, decode(addresses[static_cast<std::size_t>(right)], right));
    RK_ASSIGN_OR_RETURN(auto left_address, decode(addresses[static_cast<std::size_t>(left)], left));
    right_local_ = right_address.host == host_;
    const bool left_local = left_address.host == host_;

    // To the right: a same-host neighbour's mailbox is mapped (the endpoint carries only the
    // key); another host gets tag messages. Either way a peer-failure endpoint, closed by force.
    RK_ASSIGN_OR_RETURN(right_ep_, open_endpoint(right, right_address));
    ucp_ep_h right_ep = right_ep_;
    if (right_local_) {
      auto s = detail::make_shm_sender(right_ep, right_address.mailbox, layout());
      if (!s)
        return fail(s.error().with_context("rank " + std::to_string(rank_) + " mapping the mailbox of rank " +
                                           std::to_string(right) + " on the same host"));
      sender_ = std::move(*s);
    } else {
      sender_ = detail::make_ucx_sender(worker(), right_ep, gen_);
    }
    // From the left: our mailbox, or tag receives plus an endpoint for the fins.
    shm_only_ = right_local_ && left_local;
    if (left_local) {
      receiver_ = detail::make_shm_receiver(*mailbox_);
    } else {
      ucp_ep_h left_ep = right_ep;
      if (left != right || right_local_) {
        RK_ASSIGN_OR_RETURN(left_ep, open_endpoint(left, left_address));
        left_ep_ = left_ep;
      }
      receiver_ = detail::make_ucx_receiver(worker(), left_ep, chunk_, window(), gen_);
    }
    connected_ = true;
    RK_RETURN_IF_ERROR(barrier().with_context("first barrier of the ring"));
    return map_shared_buffers();
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  bool neighbour_is_local() const noexcept { return right_local_; }
  bool reads_shared_buffers() const noexcept { return direct_; }
  void abort() noexcept { aborted_.store(true, std::memory_order_release); }
  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }

  status allreduce(void* data, std::size_t count, dtype type, reduce_op op) {
    RK_RETURN_IF_ERROR(ready());
    if (count == 0 || size_ == 1)
      return {};
    const std::size_t e = size_of(type);
    auto* base = static_cast<std::byte*>(data);
    const auto off = [&](int k) { return count * static_cast<std::size_t>(k) / static_cast<std::size_t>(size_) * e; };
    const auto len = [&](int k) { return off(k + 1) - off(k); };
    const int n = size_;
    if (direct_ && count * e >= direct_min_bytes) {
      RK_ASSIGN_OR_RETURN(auto peers, enter_direct(base, count * e));
      if (!peers.empty()) {
        // Segment r, reduced by rank r, goes into every rank's buffer: each byte of segment r of
        // any buffer is read and written by rank r alone.
        reduce_segment(peers, base + off(rank_), off(rank_), len(rank_), type, op, true);
        return leave_direct();
      }
    }
    std::vector<plan_step> steps(static_cast<std::size_t>(2 * (n - 1)));
    for (int t = 0; t < n - 1; ++t) {  // reduce-scatter: rank r ends with segment r complete
      auto& s = steps[static_cast<std::size_t>(t)];
      const int send_seg = wrap(rank_ - t - 1, n);
      const int recv_seg = wrap(rank_ - t - 2, n);
      s.has_send = true;
      s.send_src = base + off(send_seg);
      s.send_len = len(send_seg);
      s.send_step = static_cast<std::uint32_t>(t);
      s.has_recv = true;
      s.out = base + off(recv_seg);
      s.operand = s.out;
      s.recv_len = len(recv_seg);
      s.scale = op == reduce_op::average && t == n - 2;
    }
    for (int u = 0; u < n - 1; ++u) {  // allgather of the complete segments
      auto& s = steps[static_cast<std::size_t>(n - 1 + u)];
      const int send_seg = wrap(rank_ - u, n);
      const int recv_seg = wrap(rank_ - u - 1, n);
      s.has_send = true;
      s.send_src = base + off(send_seg);
      s.send_len = len(send_seg);
      s.send_step = static_cast<std::uint32_t>(n - 1 + u);
      s.has_recv = true;
      s.out = base + off(recv_seg);
      s.recv_len = len(recv_seg);
    }
    return run(steps, type, op);
  }

  status reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type, reduce_op op) {
    RK_RETURN_IF_ERROR(ready());
    const std::size_t e = size_of(type);
    const std::size_t seg = recv_count * e;
    const auto* in = static_cast<const std::byte*>(send);
    auto* out = static_cast<std::byte*>(recv);
    if (recv_count == 0)
      return {};
    if (size_ == 1) {
      std::memmove(out, in, seg);
      return {};
    }
    const int n = size_;
    if (direct_ && seg * static_cast<std::size_t>(n) >= direct_min_bytes) {
      // The peers read segment r of this rank's `send`; `recv` is written by this rank only.
      RK_ASSIGN_OR_RETURN(auto peers, enter_direct(in, seg * static_cast<std::size_t>(n)));
      if (!peers.empty()) {
        reduce_segment(peers, out, static_cast<std::size_t>(rank_) * seg, seg, type, op, false);
        return leave_direct();
      }
    }
    // Partial sums of step t go to work segment t and travel on from there; each is written once.
    if (n > 2 && work_.size() < static_cast<std::size_t>(n - 2) * seg)
      work_.resize(static_cast<std::size_t>(n - 2) * seg);
    std::vector<plan_step> steps(static_cast<std::size_t>(n - 1));
    for (int t = 0; t < n - 1; ++t) {
      auto& s = steps[static_cast<std::size_t>(t)];
      const int send_seg = wrap(rank_ - t - 1, n);
      const int recv_seg = wrap(rank_ - t - 2, n);
      s.has_send = true;
      s.send_src = t == 0 ? in + static_cast<std::size_t>(send_seg) * seg
                          : work_.data() + static_cast<std::size_t>(t - 1) * seg;
      s.send_len = seg;
      s.send_step = static_cast<std::uint32_t>(t);
      s.has_recv = true;
      s.operand = in + static_cast<std::size_t>(recv_seg) * seg;
      const bool last = t == n - 2;
      s.out = last ? out : work_.data() + static_cast<std::size_t>(t) * seg;
      s.recv_len = seg;
      s.scale = op == reduce_op::average && last;
    }
    return run(steps, type, op);
  }

  status allgather(const void* send, void* recv, std::size_t send_count, dtype type) {
    RK_RETURN_IF_ERROR(ready());
    const std::size_t blk = send_count * size_of(type);
    auto* out = static_cast<std::byte*>(recv);
    if (send_count == 0)
      return {};
    if (send != out + static_cast<std::size_t>(rank_) * blk)
      std::memmove(out + static_cast<std::size_t>(rank_) * blk, send, blk);
    const int n = size_;
    if (direct_ && blk * static_cast<std::size_t>(n) >= direct_min_bytes) {
      // Each rank's block is in its `recv` before it enters; the others copy it from there.
      RK_ASSIGN_OR_RETURN(auto peers, enter_direct(out, blk * static_cast<std::size_t>(n)));
      if (!peers.empty()) {
        for (int k = 1; k < n; ++k) {
          const auto q = static_cast<std::size_t>(wrap(rank_ + k, n));
          std::memcpy(out + q * blk, peers[q] + q * blk, blk);
        }
        return leave_direct();
      }
    }
    std::vector<plan_step> steps(static_cast<std::size_t>(n - 1));
    for (int u = 0; u < n - 1; ++u) {
      auto& s = steps[static_cast<std::size_t>(u)];
      s.has_send = true;
      s.send_src = out + static_cast<std::size_t>(wrap(rank_ - u, n)) * blk;
      s.send_len = blk;
      s.send_step = static_cast<std::uint32_t>(u);
      s.has_recv = true;
      s.out = out + static_cast<std::size_t>(wrap(rank_ - u - 1, n)) * blk;
      s.recv_len = blk;
    }
    return run(steps, type, reduce_op::sum);
  }

  status broadcast(void* data, std::size_t count, dtype type, int root) {
    RK_RETURN_IF_ERROR(ready());
    if (root < 0 || root >= size_)
      return status{errc::invalid_argument, "broadcast root " + std::to_string(root) + " is not a rank of " +
                                                std::to_string(size_)};
    if (count == 0 || size_ == 1)
      return {};
    const std::size_t bytes = count * size_of(type);
    auto* base = static_cast<std::byte*>(data);
    const int position = wrap(rank_ - root, size_);
    std::vector<plan_step> steps;
    if (position != 0) {
      plan_step s;
      s.has_recv = true;
      s.out = base;
      s.recv_len = bytes;
      steps.push_back(s);
    }
    if (position != size_ - 1) {
      plan_step s;
      s.has_send = true;
      s.send_src = base;
      s.send_len = bytes;
      s.send_step = 0;  // every rank receives the broadcast as its step 0
      steps.push_back(s);
    }
    return run(steps, type, reduce_op::sum);
  }

  status barrier() {
    float token = 0;
    return allreduce(&token, 1, dtype::f32, reduce_op::sum);
  }

  // Point to point: UCX tag messages on the ring's worker, to any rank, through an endpoint
  // opened on first use. A send copies the bytes and returns; UCX delivers them while this rank
  // makes later calls (it waits only past max_pending_sends). A receive lands in the caller's
  // buffer.
  status send(const void* data, std::size_t bytes, int peer) {
    RK_RETURN_IF_ERROR(ready());
    RK_RETURN_IF_ERROR(check_peer(peer, "send to"));
    RK_RETURN_IF_ERROR(reap_sends());
    const auto deadline = clock_type::now() + options_.timeout;
    while (pending_sends_.size() >= max_pending_sends) {
      ucp_worker_progress(worker());
      RK_RETURN_IF_ERROR(reap_sends());
      if (aborted())
        return fail(status{errc::aborted, "communicator aborted"});
      if (clock_type::now() > deadline)
        return fail(status{errc::timeout, "rank " + std::to_string(rank_) + ": " + std::to_string(max_pending_sends) +
                                              " point-to-point sends still undelivered after " + timeout_text()});
    }
    RK_ASSIGN_OR_RETURN(ucp_ep_h ep, p2p_endpoint(peer));
    auto r = std::make_unique<p2p_send>();
    const auto* p = static_cast<const std::byte*>(data);
    r->bytes.assign(p, p + bytes);
    ucp_request_param_t params{};
    // Fast local completion: UCX picks a protocol that does not wait for the receiver (not a
    // rendezvous), so the message travels while this rank computes, without it progressing the
    // worker; the bytes are our copy anyway.
    params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_FAST_CMPL;
    params.cb.send = &detail::on_send_done;
    params.user_data = &r->record;
    const std::uint32_t number = sent_to_[static_cast<std::size_t>(peer)]++;
    detail::track(r->record, ucp_tag_send_nbx(ep, r->bytes.data(), bytes, p2p_tag(number, rank_, gen_), &params));
    // A large message moves only while this worker progresses (the receiver asks for it, this side
    // writes it): a receiver already waiting gets it now, not when this rank next calls in. One
    // that is busy gets it once this rank calls in again: the wait is short, not to spend a
    // pipeline stage's time on a peer that computes.
    const auto until = clock_type::now() + 200us;
    while (!r->record.done && clock_type::now() < until)
      ucp_worker_progress(worker());
    pending_sends_.push_back(std::move(r));
    return reap_sends();
  }

  status recv(void* data, std::size_t bytes, int peer) {
    RK_RETURN_IF_ERROR(ready());
    RK_RETURN_IF_ERROR(check_peer(peer, "receive from"));
    detail::request_record r;
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    params.cb.recv = &detail::on_recv_done;
    params.user_data = &r;
    const std::uint32_t number = received_from_[static_cast<std::size_t>(peer)]++;
    detail::track(r, ucp_tag_recv_nbx(worker(), data, bytes, p2p_tag(number, peer, gen_), ~std::uint64_t{0}, &params));
    if (r.done && r.request == nullptr && r.result == UCS_OK)
      r.length = bytes;  // completed in the call: UCX reports no length then, and truncation is an error
    const auto deadline = clock_type::now() + options_.timeout;
    auto idle_since = clock_type::now();
    status outcome;
    while (!r.done) {
      const bool progressed = ucp_worker_progress(worker()) != 0;
      if (auto s = reap_sends(); !s.ok()) {
        outcome = s;
        break;
      }
      if (aborted()) {
        outcome = status{errc::aborted, "communicator aborted"};
        break;
      }
      const auto now = clock_type::now();
      if (now > deadline) {
        outcome = status{errc::timeout, "rank " + std::to_string(rank_) + " waited " + timeout_text() +
                                            " for message " + std::to_string(number) + " from rank " +
                                            std::to_string(peer)};
        break;
      }
      if (progressed)
        idle_since = now;
      else
        detail::idle_wait(now - idle_since);
    }
    if (!r.done) {  // UCX must let go of the caller's buffer before this returns
      ucp_request_cancel(worker(), r.request);
      while (!r.done)
        ucp_worker_progress(worker());
      return fail(outcome);
    }
    if (r.result != UCS_OK)
      return fail(ucx_status(r.result, "rank " + std::to_string(rank_) + " receiving message " + std::to_string(number) +
                                           " of " + std::to_string(bytes) + " bytes from rank " + std::to_string(peer)));
    if (r.length != bytes)
      return fail(status{errc::invalid_argument, "rank " + std::to_string(rank_) + " expected " +
                                                     std::to_string(bytes) + " bytes from rank " +
                                                     std::to_string(peer) + ", the message holds " +
                                                     std::to_string(r.length)});
    return {};
  }

 private:
  // ---- Collectives on shared buffers (ring_resources::allocate_shared), every rank on this host.
  //
  // Each rank's control words, one cache line each, written by their rank only:
  //   entered: the id of the call it entered, stored (release) after `place` (buffer index, offset
  //            and length of its operand; buffer ~0 when the operand is not in a shared buffer);
  //   done:    the id once it is done with the others' buffers (read what it needed, wrote what
  //            was its to write).
  // A call's id is (generation, call number): the same on every rank, which make the same calls.
  // A rank whose operand is not shared enters and runs the ring; the others see its place and
  // run the ring too, so all ranks take the same path. A rank returns only once every other is
  // done, since they read its buffer until then.
  static constexpr std::size_t entered_line = 0, done_line = 1;
  static constexpr std::uint32_t not_shared = ~std::uint32_t{0};

  struct peer_buffers {
    std::byte* control = nullptr;
    std::vector<std::pair<std::byte*, std::size_t>> buffers;
    std::vector<std::unique_ptr<detail::mapped_region>> mappings;
  };

  static std::atomic_ref<std::uint64_t> control_word(std::byte* control, std::size_t line) {
    return std::atomic_ref<std::uint64_t>{*reinterpret_cast<std::uint64_t*>(control + 64 * line)};
  }

  // After the first barrier: maps every peer's control words and shared buffers when all ranks are
  // on this host and have them; the ranks then agree (a sum of votes) whether all of them could.
  status map_shared_buffers() {
    bool can = !own_shared_.empty();
    std::vector<ring_address> all;
    for (int r = 0; r < size_ && can; ++r) {
      RK_ASSIGN_OR_RETURN(auto a, decode(peer_addresses_[static_cast<std::size_t>(r)], r));
      can = a.host == host_ && a.shared.size() >= 2;
      all.push_back(std::move(a));
    }
    if (can) {
      peers_.resize(static_cast<std::size_t>(size_));
      for (int r = 0; r < size_ && can; ++r) {
        auto& p = peers_[static_cast<std::size_t>(r)];
        if (r == rank_) {
          p.control = resources_->internals().control_->base();
          p.buffers = own_shared_;
          continue;
        }
        auto ep = p2p_endpoint(r);
        if (!ep) {
          spdlog::warn("rank {}: collectives on shared buffers go around the ring: no endpoint to rank {}: {}", rank_, r,
                       ep.error().message());
          can = false;
          break;
        }
        for (const auto& bytes : all[static_cast<std::size_t>(r)].shared) {
          auto m = detail::mapped_region::map(*ep, bytes);
          if (!m) {
            spdlog::warn("rank {}: collectives on shared buffers go around the ring: rank {}'s buffers: {}", rank_, r,
                         m.error().message());
            can = false;
            break;
          }
          if (p.control == nullptr)
            p.control = (*m)->base();
          else
            p.buffers.emplace_back((*m)->base(), (*m)->size());
          p.mappings.push_back(std::move(*m));
        }
      }
    }
    float votes = can ? 1.0f : 0.0f;
    RK_RETURN_IF_ERROR(allreduce(&votes, 1, dtype::f32, reduce_op::sum).with_context("agreeing on shared buffers"));
    direct_ = votes == static_cast<float>(size_);
    if (!direct_)
      peers_.clear();
    return {};
  }

  void publish(std::size_t line, std::uint64_t id) {
    control_word(peers_[static_cast<std::size_t>(rank_)].control, line).store(id, std::memory_order_release);
  }

  // Waits until rank `q` stored this call's id in `line`.
  status wait_peer(int q, std::size_t line, const char* what) {
    auto word = control_word(peers_[static_cast<std::size_t>(q)].control, line);
    if (word.load(std::memory_order_acquire) == call_id_)
      return {};
    const auto start = clock_type::now();
    const auto deadline = start + options_.timeout;
    for (;;) {
      if (word.load(std::memory_order_acquire) == call_id_)
        return {};
      if (aborted())
        return fail(status{errc::aborted, "communicator aborted"});
      const auto now = clock_type::now();
      if (now > deadline)
        return fail(status{errc::timeout, "collective #" + std::to_string(seq_) + " on shared buffers did not complete within " +
                                              timeout_text() + " (rank " + std::to_string(rank_) + " waited for rank " +
                                              std::to_string(q) + " to " + what + ")"});
      detail::idle_wait(now - start);
    }
  }

  // Enters a call on `bytes` bytes at `p`: the other ranks' operands, by rank (this rank's too),
  // or none when some rank's operand is not in a shared buffer (then the ring runs).
  expected<std::vector<std::byte*>> enter_direct(const void* p, std::size_t bytes) {
    ++seq_;
    call_id_ = (std::uint64_t{gen_} << 32) | seq_;
    auto& mine = peers_[static_cast<std::size_t>(rank_)];
    std::uint32_t buffer = not_shared;
    std::uint64_t offset = 0;
    const auto* at = static_cast<const std::byte*>(p);
    for (std::uint32_t b = 0; b < mine.buffers.size(); ++b) {
      const auto [base, size] = mine.buffers[b];
      if (at >= base && at < base + size && bytes <= static_cast<std::size_t>(base + size - at)) {
        buffer = b;
        offset = static_cast<std::uint64_t>(at - base);
        break;
      }
    }
    std::byte* place = mine.control + 8;
    const std::uint64_t len = bytes;
    std::memcpy(place, &buffer, 4);
    std::memcpy(place + 8, &offset, 8);
    std::memcpy(place + 16, &len, 8);
    publish(entered_line, call_id_);
    std::vector<std::byte*> out;
    if (buffer == not_shared)
      return out;
    out.resize(static_cast<std::size_t>(size_));
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) {
        out[static_cast<std::size_t>(q)] = const_cast<std::byte*>(at);  // this rank's own shared buffer
        continue;
      }
      RK_RETURN_IF_ERROR(wait_peer(q, entered_line, "enter it"));
      const auto& peer = peers_[static_cast<std::size_t>(q)];
      std::uint32_t b = 0;
      std::uint64_t o = 0, l = 0;
      std::memcpy(&b, peer.control + 8, 4);
      std::memcpy(&o, peer.control + 16, 8);
      std::memcpy(&l, peer.control + 24, 8);
      if (b == not_shared)
        return std::vector<std::byte*>{};
      if (l != bytes)
        return fail(status{errc::invalid_argument, "collective #" + std::to_string(seq_) + ": rank " + std::to_string(q) +
                                                       " passed " + std::to_string(l) + " bytes, rank " +
                                                       std::to_string(rank_) + " " + std::to_string(bytes)});
      if (b >= peer.buffers.size() || o > peer.buffers[b].second || l > peer.buffers[b].second - o)
        return fail(status{errc::invalid_argument, "collective #" + std::to_string(seq_) + ": rank " + std::to_string(q) +
                                                       " named bytes outside its shared buffers"});
      out[static_cast<std::size_t>(q)] = peer.buffers[b].first + o;
    }
    return out;
  }

  // Says this rank is done with the others' buffers, and waits until they are done with its own.
  status leave_direct() {
    publish(done_line, call_id_);
    for (int k = 1; k < size_; ++k)
      RK_RETURN_IF_ERROR(wait_peer(wrap(rank_ + k, size_), done_line, "finish"));
    return {};
  }

  // out = the reduction of bytes [from, from + len) of every rank's operand, in the ring's order:
  // segment s starts at rank s + 1, and rank s + k (k = 2 .. n) computes its own (op) the sum so
  // far, rank s last. Works a cache-sized block at a time, so the partial sums stay in the cache;
  // with `spread`, each block of the result is also copied into the other ranks' operands (in
  // place of theirs, which only this rank reads) while it is in the cache.
  void reduce_segment(const std::vector<std::byte*>& in, std::byte* out, std::size_t from, std::size_t len, dtype type,
                      reduce_op op, bool spread) {
    const std::size_t e = size_of(type);
    const int n = size_;
    const int s = rank_;
    const auto at = [&](int k, std::size_t o) { return in[static_cast<std::size_t>(wrap(s + k, n))] + from + o; };
    constexpr std::size_t block = 32 << 10;
    if (n > 2 && partial_.size() < block)
      partial_.resize(block);
    for (std::size_t o = 0; o < len; o += block) {
      const std::size_t b = std::min(block, len - o);
      if (n == 2) {
        reduce_elements(out + o, at(0, o), at(1, o), b / e, type, op);
      } else {
        reduce_elements(partial_.data(), at(2, o), at(1, o), b / e, type, op);
        for (int k = 3; k < n; ++k)
          reduce_elements(partial_.data(), at(k, o), partial_.data(), b / e, type, op);
        reduce_elements(out + o, at(0, o), partial_.data(), b / e, type, op);
      }
      if (op == reduce_op::average)
        scale_elements(out + o, b / e, type, 1.0f / static_cast<float>(n));
      if (spread)
        for (int k = 1; k < n; ++k)
          std::memcpy(in[static_cast<std::size_t>(wrap(s + k, n))] + from + o, out + o, b);
    }
  }

  std::string timeout_text() const {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout).count()) + " ms";
  }

  status check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size_ || peer == rank_)
      return status{errc::invalid_argument, std::string{what} + " rank " + std::to_string(peer) + " from rank " +
                                                std::to_string(rank_) + " of " + std::to_string(size_)};
    return {};
  }

  // Drops the sends UCX has finished; the first failed one breaks the communicator.
  status reap_sends() {
    while (!pending_sends_.empty() && pending_sends_.front()->record.done) {
      const auto result = pending_sends_.front()->record.result;
      pending_sends_.pop_front();
      if (result != UCS_OK && result != UCS_ERR_CANCELED)
        return fail(ucx_status(result, "rank " + std::to_string(rank_) + ": a point-to-point send"));
    }
    return broken_;
  }

  expected<ucp_ep_h> p2p_endpoint(int peer) {
    auto& ep = p2p_eps_[static_cast<std::size_t>(peer)];
    if (ep == nullptr) {
      RK_ASSIGN_OR_RETURN(auto a, decode(peer_addresses_[static_cast<std::size_t>(peer)], peer));
      RK_ASSIGN_OR_RETURN(ep, open_endpoint(peer, a));
    }
    return ep;
  }

  detail::mailbox_layout layout() const { return layout_for(chunk_); }
  std::size_t window() const { return layout_for(chunk_).slots; }
  ucp_worker_h worker() const { return resources_->internals().worker_->get(); }
  std::size_t chunks_of(std::size_t bytes) const { return (bytes + chunk_ - 1) / chunk_; }

  status ready() {
    if (!broken_.ok())
      return broken_;
    if (aborted())
      return fail(status{errc::aborted, "communicator aborted"});
    if (size_ > 1 && !connected_)
      return status{errc::failed_precondition, "ring not connected: call connect() first"};
    return {};
  }

  // Runs a plan to completion, an error, the deadline or an abort.
  status run(const std::vector<plan_step>& steps, dtype type, reduce_op op) {
    if (size_ == 1)
      return {};
    ++seq_;
    const std::size_t e = size_of(type);
    const int steps_n = static_cast<int>(steps.size());
    const auto span_of = [&](std::size_t total, std::size_t c) {
      const std::size_t begin = c * chunk_;
      return std::pair{begin, std::min(total, begin + chunk_) - begin};
    };
    // What arrives, in order: (step, chunk).
    std::vector<std::pair<int, std::size_t>> recv_order;
    std::vector<std::pair<std::uint64_t, std::size_t>> expected;
    for (int t = 0; t < steps_n; ++t) {
      const auto& s = steps[static_cast<std::size_t>(t)];
      if (!s.has_recv)
        continue;
      for (std::size_t c = 0; c < chunks_of(s.recv_len); ++c) {
        recv_order.emplace_back(t, c);
        expected.emplace_back(chunk_tag(seq_, static_cast<std::uint32_t>(t), c, gen_), span_of(s.recv_len, c).second);
      }
    }
    sender_->begin_call(seq_);
    receiver_->begin_call(seq_, std::move(expected));

    // Sends leave in the order they become ready, which is the order the right neighbour expects.
    std::deque<std::pair<int, std::size_t>> ready_sends;
    for (int t = 0; t < steps_n; ++t) {
      const auto& s = steps[static_cast<std::size_t>(t)];
      if (s.has_send && (t == 0 || !steps[static_cast<std::size_t>(t - 1)].has_recv))
        for (std::size_t c = 0; c < chunks_of(s.send_len); ++c)
          ready_sends.emplace_back(t, c);
    }

    std::size_t received = 0;
    const auto deadline = clock_type::now() + options_.timeout;
    auto idle_since = clock_type::now();
    for (;;) {
      bool progressed = false;
      while (!ready_sends.empty()) {
        const auto [t, c] = ready_sends.front();
        const auto& s = steps[static_cast<std::size_t>(t)];
        const auto [begin, n] = span_of(s.send_len, c);
        if (!sender_->try_send(chunk_tag(seq_, s.send_step, c, gen_), s.send_src + begin, n))
          break;
        ready_sends.pop_front();
        progressed = true;
      }
      while (received < recv_order.size()) {
        const std::byte* chunk = receiver_->try_receive();
        if (chunk == nullptr)
          break;
        const auto [t, c] = recv_order[received];
        const auto& s = steps[static_cast<std::size_t>(t)];
        const auto [begin, n] = span_of(s.recv_len, c);
        if (s.operand != nullptr)
          reduce_elements(s.out + begin, s.operand + begin, chunk, n / e, type, op);
        else
          std::memcpy(s.out + begin, chunk, n);
        if (s.scale)
          scale_elements(s.out + begin, n / e, type, 1.0f / static_cast<float>(size_));
        receiver_->release();
        ++received;
        progressed = true;
        if (t + 1 < steps_n && steps[static_cast<std::size_t>(t + 1)].has_send &&
            c < chunks_of(steps[static_cast<std::size_t>(t + 1)].send_len))
          ready_sends.emplace_back(t + 1, c);
      }
      // Chunks between same-host neighbours move through mapped memory, not UCX: its progress (a
      // system call per try on the TCP transport) is needed only while nothing else moves.
      if (!shm_only_ || !progressed)
        while (ucp_worker_progress(worker()) != 0)
          progressed = true;
      if (auto s = sender_->error(); !s.ok())
        return fail(s.with_context("rank " + std::to_string(rank_)));
      if (auto s = receiver_->error(); !s.ok())
        return fail(s.with_context("rank " + std::to_string(rank_)));
      if (received == recv_order.size() && ready_sends.empty() && receiver_->call_may_end() &&
          sender_->call_may_end())
        return {};
      if (aborted())
        return fail(status{errc::aborted, "communicator aborted"});
      const auto now = clock_type::now();
      if (now > deadline)
        return fail(status{errc::timeout,
                           "collective #" + std::to_string(seq_) + " did not complete within " +
                               std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout).count()) +
                               " ms (rank " + std::to_string(rank_) + ": " + std::to_string(received) + "/" +
                               std::to_string(recv_order.size()) + " chunks received, " +
                               std::to_string(ready_sends.size()) + " waiting to be sent)"});
      if (progressed)
        idle_since = now;
      else
        detail::idle_wait(now - idle_since);
    }
  }

  // A peer-failure endpoint: a dead peer fails its requests instead of the process.
  expected<ucp_ep_h> open_endpoint(int peer, const ring_address& a) {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(a.worker.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = [](void*, ucp_ep_h, ucs_status_t) {};  // requests fail with the status
    params.err_handler.arg = nullptr;
    ucp_ep_h ep = nullptr;
    if (auto s = ucp_ep_create(worker(), &params, &ep); s != UCS_OK)
      return fail(ucx_status(s, "connecting to ring neighbour " + std::to_string(peer)));
    return ep;
  }

  // Breaks the communicator. Nothing is cancelled: same-host chunks land in our own mailbox, and
  // tag receives in the receiver's own slots, never in caller memory; UCX returns every request
  // when the worker is destroyed.
  status fail(status why) {
    if (broken_.ok())
      broken_ = why;
    return why;
  }

  std::shared_ptr<ring_resources> resources_;
  int rank_;
  int size_;
  ring_options options_;
  std::size_t chunk_ = 0;
  std::uint32_t gen_ = 0;
  std::string host_;
  std::vector<std::byte> address_;
  std::unique_ptr<detail::shm_mailbox> mailbox_;
  std::unique_ptr<detail::ring_receiver> receiver_;
  std::unique_ptr<detail::ring_sender> sender_;
  ucp_ep_h right_ep_ = nullptr;
  ucp_ep_h left_ep_ = nullptr;
  bool connected_ = false;
  bool right_local_ = false;
  /// Both neighbours on this host: every chunk goes through mailboxes.
  bool shm_only_ = false;
  std::uint32_t seq_ = 0;
  std::atomic<bool> aborted_{false};
  status broken_;
  std::vector<std::byte> work_;
  // Shared buffers: this rank's (as its resources held them at init), and every rank's mapped
  // (empty unless direct_).
  std::vector<std::pair<std::byte*, std::size_t>> own_shared_;
  std::vector<peer_buffers> peers_;
  bool direct_ = false;
  std::uint64_t call_id_ = 0;
  std::vector<std::byte> partial_;
  // Point to point: every rank's address, endpoints opened on first use, messages numbered per
  // peer, sends UCX has not finished (oldest first).
  std::vector<std::vector<std::byte>> peer_addresses_;
  std::vector<ucp_ep_h> p2p_eps_;
  std::vector<std::uint32_t> sent_to_;
  std::vector<std::uint32_t> received_from_;
  std::deque<std::unique_ptr<p2p_send>> pending_sends_;
};

expected<std::unique_ptr<ring_communicator>> ring_communicator::create(int rank, int size, const ring_options& options) {
  if (size < 1 || size > max_size || rank < 0 || rank >= size)
    return status{errc::invalid_argument, "ring of " + std::to_string(size) + " ranks cannot have rank " +
                                              std::to_string(rank) + " (sizes 1.." + std::to_string(max_size) + ")"};
  RK_ASSIGN_OR_RETURN(auto resources, ring_resources::create(options));
  return create(std::move(resources), rank, size, options);
}

expected<std::unique_ptr<ring_communicator>> ring_communicator::create(std::shared_ptr<ring_resources> resources, int rank,
                                                                       int size, const ring_options& options) {
  auto p = std::make_unique<impl>(std::move(resources), rank, size, options);
  RK_RETURN_IF_ERROR(p->init());
  return std::unique_ptr<ring_communicator>{new ring_communicator{std::move(p)}};
}

ring_communicator::ring_communicator(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
ring_communicator::~ring_communicator() = default;

const std::vector<std::byte>& ring_communicator::address() const noexcept { return impl_->address(); }
status ring_communicator::connect(const std::vector<std::vector<std::byte>>& addresses) { return impl_->connect(addresses); }
int ring_communicator::rank() const noexcept { return impl_->rank(); }
int ring_communicator::size() const noexcept { return impl_->size(); }
status ring_communicator::allreduce(void* data, std::size_t count, dtype type, reduce_op op) {
  return impl_->allreduce(data, count, type, op);
}
status ring_communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type, reduce_op op) {
  return impl_->reduce_scatter(send, recv, recv_count, type, op);
}
status ring_communicator::allgather(const void* send, void* recv, std::size_t send_count, dtype type) {
  return impl_->allgather(send, recv, send_count, type);
}
status ring_communicator::broadcast(void* data, std::size_t count, dtype type, int root) {
  return impl_->broadcast(data, count, type, root);
}
status ring_communicator::barrier() { return impl_->barrier(); }
status ring_communicator::send(const void* data, std::size_t bytes, int peer) { return impl_->send(data, bytes, peer); }
status ring_communicator::recv(void* data, std::size_t bytes, int peer) { return impl_->recv(data, bytes, peer); }
void ring_communicator::abort() noexcept { impl_->abort(); }
bool ring_communicator::aborted() const noexcept { return impl_->aborted(); }
bool ring_communicator::neighbour_is_local() const noexcept { return impl_->neighbour_is_local(); }
bool ring_communicator::reads_shared_buffers() const noexcept { return impl_->reads_shared_buffers(); }

}  // namespace rekindle::transport
