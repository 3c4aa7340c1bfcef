#include "transport/ring_communicator.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include "common/check.hpp"
#include "transport/reduce.hpp"
#include "transport/ucx.hpp"

namespace rekindle::transport {

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Identifies the machine (and its boot), so ranks can tell which neighbours share memory.
std::string host_identity() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string id = name;
  std::ifstream boot{"/proc/sys/kernel/random/boot_id"};
  std::string boot_id;
  if (boot >> boot_id)
    id += "/" + boot_id;
  return id;
}

int wrap(int x, int n) { return ((x % n) + n) % n; }

// One step of a collective as this rank sees it: what it sends to the right neighbour and what
// it receives from the left one. Chunk c of a step's send is chunk c of the previous step's
// receive (the ring forwards what it just reduced), so send (t, c) waits for the receive
// (t - 1, c) to be processed.
struct plan_step {
  bool has_send = false;
  const std::byte* send_src = nullptr;
  std::size_t send_len = 0;
  /// The receiver's step number for this send (its tag).
  std::uint32_t send_tag_step = 0;

  bool has_recv = false;
  std::byte* out = nullptr;
  /// Reduce: out = operand (op) received. Copy (operand == nullptr): out = received.
  const std::byte* operand = nullptr;
  std::size_t recv_len = 0;
  /// The receive writes `out` only after send (write_dep, c) completed (it read the same bytes).
  int write_dep = -1;
  /// Scale `out` by 1/size after processing (the last reduce step of an average).
  bool scale = false;
};

}  // namespace

class ring_communicator::impl {
 public:
  impl(int rank, int size, ring_options options) : rank_(rank), size_(size), options_(std::move(options)) {}

  ~impl() {
    if (!worker_)
      return;
    if (broken_.ok()) {
      // A healthy ring's neighbours send their last fins promptly: take them first.
      const auto limit = clock_type::now() + 200ms;
      while (outstanding_receives() && clock_type::now() < limit)
        ucp_worker_progress(worker_->get());
    }
    cancel_receives();
    // Destroying the worker (a member declared after the records) destroys the endpoints without
    // waiting for peers and completes whatever is left.
  }

  bool outstanding_receives() const {
    const auto pending = [](const op_state& op) {
      return std::any_of(op.records.begin(), op.records.end(), [](const record& r) { return r.outstanding && !r.is_send; });
    };
    return (op_ && pending(*op_)) || std::any_of(lingering_.begin(), lingering_.end(), [&](const auto& op) { return pending(*op); });
  }

  status init() {
    if (size_ < 1 || size_ > max_size || rank_ < 0 || rank_ >= size_)
      return status{errc::invalid_argument, "ring of " + std::to_string(size_) + " ranks cannot have rank " +
                                                std::to_string(rank_) + " (sizes 1.." + std::to_string(max_size) + ")"};
    // Same-host neighbours talk without UCX error handling (see open_endpoint), where a transport
    // error is fatal to the process. Cross-memory attach (CMA, and knem/xpmem alike) writes
    // straight into the neighbour's address space and fails when the neighbour dies, so it is
    // left out: a survivor must outlive a dead neighbour. Shared-memory FIFOs stay mapped after
    // a peer's death, so they only run into the deadline. Rendezvous by put: the sender completes
    // on its own, without waiting for a receiver that may already have finished its call.
    RK_ASSIGN_OR_RETURN(context_, ucx_context::create(ucx_options{.active_messages = false,
                                                                  .tags = true,
                                                                  .wakeup = false,
                                                                  .net_devices = options_.net_devices,
                                                                  .tls = options_.tls.empty() ? "^cma,knem,xpmem" : options_.tls,
                                                                  .rndv_scheme = "put_zcopy"}));
    RK_ASSIGN_OR_RETURN(worker_, ucx_worker::create(*context_, false));
    RK_ASSIGN_OR_RETURN(auto worker_address, worker_->address());
    host_ = host_identity();
    address_.push_back(static_cast<std::byte>(host_.size()));
    for (char ch : host_)
      address_.push_back(static_cast<std::byte>(ch));
    address_.insert(address_.end(), worker_address.begin(), worker_address.end());
    chunk_ = std::max<std::size_t>(options_.chunk_size, 64);
    return {};
  }

  const std::vector<std::byte>& address() const noexcept { return address_; }

  status connect(const std::vector<std::vector<std::byte>>& addresses) {
    if (addresses.size() != static_cast<std::size_t>(size_))
      return fail(status{errc::invalid_argument, "connect() needs " + std::to_string(size_) + " addresses, got " +
                                                     std::to_string(addresses.size())});
    if (size_ == 1)
      return {};
    const int right = wrap(rank_ + 1, size_);
    const int left = wrap(rank_ - 1, size_);
    RK_ASSIGN_OR_RETURN(right_, open_endpoint(right, addresses[static_cast<std::size_t>(right)], right_local_));
    if (left == right) {
      left_ = right_;
    } else {
      bool left_local = false;
      RK_ASSIGN_OR_RETURN(left_, open_endpoint(left, addresses[static_cast<std::size_t>(left)], left_local));
    }
    return barrier().with_context("first barrier of the ring");
  }

  // Data goes right; only the one-byte fin of each call goes left.
  expected<ucp_ep_h> open_endpoint(int peer, const std::vector<std::byte>& theirs, bool& local) {
    if (theirs.empty() || static_cast<std::size_t>(theirs[0]) + 1 >= theirs.size())
      return fail(status{errc::invalid_argument, "malformed ring address of rank " + std::to_string(peer)});
    const std::size_t host_len = static_cast<std::size_t>(theirs[0]);
    const std::string their_host(reinterpret_cast<const char*>(theirs.data() + 1), host_len);
    local = their_host == host_;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.address = reinterpret_cast<const ucp_address_t*>(theirs.data() + 1 + host_len);
    // Same host: no error handling, so UCX may use shared memory (peer mode would force tcp);
    // deadlines and abort() cover a dead neighbour. Other hosts: hear about failures at once.
    params.err_mode = local ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    if (!local) {
      params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
      params.err_handler.cb = &impl::error_callback;
      params.err_handler.arg = this;
    }
    ucp_ep_h ep = nullptr;
    if (auto s = ucp_ep_create(worker_->get(), &params, &ep); s != UCS_OK)
      return fail(ucx_status(s, "connecting to ring neighbour " + std::to_string(peer)));
    return ep;
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  bool neighbour_is_local() const noexcept { return right_local_; }
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
    std::vector<plan_step> steps(static_cast<std::size_t>(2 * (n - 1)));
    for (int t = 0; t < n - 1; ++t) {  // reduce-scatter: rank r ends with segment r complete
      auto& s = steps[static_cast<std::size_t>(t)];
      const int send_seg = wrap(rank_ - t - 1, n);
      const int recv_seg = wrap(rank_ - t - 2, n);
      s.has_send = true;
      s.send_src = base + off(send_seg);
      s.send_len = len(send_seg);
      s.send_tag_step = static_cast<std::uint32_t>(t);
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
      s.send_tag_step = static_cast<std::uint32_t>(n - 1 + u);
      s.has_recv = true;
      s.out = base + off(recv_seg);
      s.recv_len = len(recv_seg);
      s.write_dep = u;  // reduce-scatter step u sent these bytes
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
    if (n > 2 && work_.size() < 2 * seg)
      work_.resize(2 * seg);
    std::byte* work[2] = {work_.data(), work_.data() + seg};
    std::vector<plan_step> steps(static_cast<std::size_t>(n - 1));
    for (int t = 0; t < n - 1; ++t) {
      auto& s = steps[static_cast<std::size_t>(t)];
      const int send_seg = wrap(rank_ - t - 1, n);
      const int recv_seg = wrap(rank_ - t - 2, n);
      s.has_send = true;
      s.send_src = t == 0 ? in + static_cast<std::size_t>(send_seg) * seg : work[(t - 1) % 2];
      s.send_len = seg;
      s.send_tag_step = static_cast<std::uint32_t>(t);
      s.has_recv = true;
      s.operand = in + static_cast<std::size_t>(recv_seg) * seg;
      const bool last = t == n - 2;
      s.out = last ? out : work[t % 2];
      s.recv_len = seg;
      s.write_dep = (!last && t >= 2) ? t - 1 : -1;  // send t-1 read work[t % 2]
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
    std::vector<plan_step> steps(static_cast<std::size_t>(n - 1));
    for (int u = 0; u < n - 1; ++u) {
      auto& s = steps[static_cast<std::size_t>(u)];
      s.has_send = true;
      s.send_src = out + static_cast<std::size_t>(wrap(rank_ - u, n)) * blk;
      s.send_len = blk;
      s.send_tag_step = static_cast<std::uint32_t>(u);
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
      s.send_tag_step = 0;
      steps.push_back(s);
    }
    return run(steps, type, reduce_op::sum);
  }

  status barrier() {
    float token = 0;
    return allreduce(&token, 1, dtype::f32, reduce_op::sum);
  }

 private:
  // Per-request bookkeeping; UCX hands the pointer back on completion.
  struct record {
    impl* self = nullptr;
    std::uint32_t seq = 0;
    void* request = nullptr;
    bool is_send = false;
    bool is_fin = false;
    bool outstanding = false;
    bool done = false;
    ucs_status_t result = UCS_OK;
    int step = 0;
    std::size_t chunk = 0;
    int slot = -1;
  };

  status ready() {
    if (!broken_.ok())
      return broken_;
    if (aborted())
      return fail(status{errc::aborted, "communicator aborted"});
    if (size_ > 1 && right_ == nullptr)
      return status{errc::failed_precondition, "ring not connected: call connect() first"};
    return {};
  }

  std::size_t chunks_of(std::size_t bytes) const { return (bytes + chunk_ - 1) / chunk_; }

  std::size_t sends_total_of(const std::vector<plan_step>& steps) const {
    std::size_t total = 0;
    for (const auto& st : steps)
      if (st.has_send)
        total += chunks_of(st.send_len);
    return total;
  }

  std::uint64_t tag_of(std::uint32_t step, std::size_t chunk) const {
    return (std::uint64_t{seq_ & 0xfffffu} << 44) | (std::uint64_t{step & 0xfffu} << 32) | (chunk & 0xffffffffu);
  }

  // Runs a plan to completion, an error, the deadline or an abort.
  status run(std::vector<plan_step>& steps, dtype type, reduce_op op) {
    ++seq_;
    const std::size_t e = size_of(type);
    RK_CHECK(chunk_ >= e);
    chunk_ -= chunk_ % e;
    const int steps_n = static_cast<int>(steps.size());
    std::size_t per_step = 1;
    for (const auto& s : steps)
      per_step = std::max({per_step, chunks_of(s.send_len), chunks_of(s.recv_len)});
    // Sends of earlier calls that UCX has not acknowledged yet stay alive until it does.
    std::erase_if(lingering_, [](const std::unique_ptr<op_state>& old) {
      return std::none_of(old->records.begin(), old->records.end(), [](const record& r) { return r.outstanding; });
    });
    if (op_ && std::any_of(op_->records.begin(), op_->records.end(), [](const record& r) { return r.outstanding; }))
      lingering_.push_back(std::move(op_));
    op_ = std::make_unique<op_state>();
    // Two records per (step, chunk), then the fin pair.
    op_->records.assign(static_cast<std::size_t>(2 * steps_n) * per_step + 2, record{});
    for (auto& r : op_->records) {
      r.self = this;
      r.seq = seq_;
    }
    auto& records = op_->records;
    const auto send_rec = [&](int t, std::size_t c) -> record& {
      return records[static_cast<std::size_t>(t) * per_step + c];
    };
    const auto recv_rec = [&](int t, std::size_t c) -> record& {
      return records[(static_cast<std::size_t>(steps_n) + static_cast<std::size_t>(t)) * per_step + c];
    };
    record& fin_out = records[records.size() - 2];
    record& fin_in = records[records.size() - 1];
    // The fin protocol: a rank that has received everything tells its left neighbour so, and a
    // rank may return once its right neighbour said so, even before UCX acknowledges the sends
    // (a receive can complete before its acknowledgement leaves the receiver).
    const bool any_send = sends_total_of(steps) > 0;
    const bool any_recv = std::any_of(steps.begin(), steps.end(), [](const plan_step& st) { return st.has_recv; });
    // Receives are posted in (step, chunk) order, at most `window` at a time.
    std::vector<std::pair<int, std::size_t>> recv_order;
    std::size_t sends_total = 0;
    for (int t = 0; t < steps_n; ++t) {
      const auto& s = steps[static_cast<std::size_t>(t)];
      if (s.has_recv)
        for (std::size_t c = 0; c < chunks_of(s.recv_len); ++c)
          recv_order.emplace_back(t, c);
      if (s.has_send)
        sends_total += chunks_of(s.send_len);
    }
    const std::size_t window = std::clamp<std::size_t>((32u << 20) / chunk_, 2, 16);
    if (scratch_.size() < window * chunk_)
      scratch_.resize(window * chunk_);
    free_slots_.clear();
    for (std::size_t i = 0; i < window; ++i)
      free_slots_.push_back(static_cast<int>(window - 1 - i));
    completed_.clear();

    const auto chunk_span = [&](std::size_t total, std::size_t c) {
      const std::size_t begin = c * chunk_;
      return std::pair{begin, std::min(total, begin + chunk_) - begin};
    };
    status err;
    std::size_t sends_done = 0, recvs_done = 0, next_recv = 0, in_flight = 0;

    const auto post_send = [&](int t, std::size_t c) {
      const auto& s = steps[static_cast<std::size_t>(t)];
      auto [begin, n] = chunk_span(s.send_len, c);
      auto& r = send_rec(t, c);
      r.is_send = true;
      r.step = t;
      r.chunk = c;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.send = &impl::send_callback;
      p.user_data = &r;
      void* req = ucp_tag_send_nbx(right_, s.send_src + begin, n, tag_of(s.send_tag_step, c), &p);
      on_posted(r, req);
    };
    const auto post_recv = [&](int t, std::size_t c) {
      const auto& s = steps[static_cast<std::size_t>(t)];
      auto [begin, n] = chunk_span(s.recv_len, c);
      auto& r = recv_rec(t, c);
      r.step = t;
      r.chunk = c;
      std::byte* dest = s.out + begin;
      if (s.operand != nullptr) {
        r.slot = free_slots_.back();
        free_slots_.pop_back();
        dest = scratch_.data() + static_cast<std::size_t>(r.slot) * chunk_;
      }
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.recv = &impl::recv_callback;
      p.user_data = &r;
      void* req = ucp_tag_recv_nbx(worker_->get(), dest, n, tag_of(static_cast<std::uint32_t>(t), c), ~std::uint64_t{0}, &p);
      ++in_flight;
      on_posted(r, req);
    };

    // Sends with nothing to wait for go out at once.
    for (int t = 0; t < steps_n; ++t) {
      const auto& s = steps[static_cast<std::size_t>(t)];
      if (s.has_send && (t == 0 || !steps[static_cast<std::size_t>(t - 1)].has_recv))
        for (std::size_t c = 0; c < chunks_of(s.send_len); ++c)
          post_send(t, c);
    }

    if (any_send) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.recv = &impl::recv_callback;
      p.user_data = &fin_in;
      fin_in.is_fin = true;
      void* req = ucp_tag_recv_nbx(worker_->get(), &fin_byte_in_, 1, tag_of(fin_step, 0), ~std::uint64_t{0}, &p);
      on_posted(fin_in, req);
    }
    bool fin_sent = !any_recv;
    const auto deadline = clock_type::now() + options_.timeout;
    auto idle_since = clock_type::now();
    while (err.ok() && (!fin_sent || (any_send && !fin_in.done && sends_done < sends_total) ||
                        recvs_done < recv_order.size())) {
      bool progressed = false;
      // Post receives in order while the window has room and their memory is free to write.
      while (next_recv < recv_order.size() && in_flight < window) {
        auto [t, c] = recv_order[next_recv];
        const auto& s = steps[static_cast<std::size_t>(t)];
        if (s.operand != nullptr && free_slots_.empty())
          break;
        if (s.write_dep >= 0 && !send_rec(s.write_dep, c).done)
          break;
        post_recv(t, c);
        ++next_recv;
        progressed = true;
      }
      while (ucp_worker_progress(worker_->get()) != 0)
        progressed = true;
      // Handling a completion may post a send that completes at once and lands in completed_.
      while (!completed_.empty()) {
        handling_.swap(completed_);
      for (record* r : handling_) {
        progressed = true;
        if (r->result != UCS_OK && err.ok()) {
          err = r->result == UCS_ERR_CANCELED
                    ? status{errc::aborted, "communicator aborted"}
                    : ucx_status(r->result, std::string{r->is_send ? "sending to rank " : "receiving from rank "} +
                                                std::to_string(wrap(rank_ + (r->is_send ? 1 : -1), size_)));
          continue;
        }
        if (r->is_fin)
          continue;
        if (r->is_send) {
          ++sends_done;
          continue;
        }
        // A chunk arrived: reduce it, then forward it.
        const int t = r->step;
        const auto& s = steps[static_cast<std::size_t>(t)];
        auto [begin, n] = chunk_span(s.recv_len, r->chunk);
        if (s.operand != nullptr) {
          const std::byte* received = scratch_.data() + static_cast<std::size_t>(r->slot) * chunk_;
          reduce_elements(s.out + begin, s.operand + begin, received, n / e, type, op);
          free_slots_.push_back(r->slot);
        }
        if (s.scale)
          scale_elements(s.out + begin, n / e, type, 1.0f / static_cast<float>(size_));
        --in_flight;
        ++recvs_done;
        if (t + 1 < steps_n && steps[static_cast<std::size_t>(t + 1)].has_send &&
            r->chunk < chunks_of(steps[static_cast<std::size_t>(t + 1)].send_len))
          post_send(t + 1, r->chunk);
      }
        handling_.clear();
      }
      if (err.ok() && !fin_sent && recvs_done == recv_order.size()) {
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.send = &impl::send_callback;
        p.user_data = &fin_out;
        fin_out.is_fin = true;
        fin_out.is_send = true;
        void* req = ucp_tag_send_nbx(left_, &fin_byte_out_, 1, tag_of(fin_step, 0), &p);
        on_posted(fin_out, req);
        fin_sent = true;
        progressed = true;
      }
      if (!err.ok())
        break;
      if (aborted()) {
        err = status{errc::aborted, "communicator aborted"};
        break;
      }
      if (peer_error_.load()) {
        err = status{errc::peer_failed, "ring neighbour " + std::to_string(wrap(rank_ + 1, size_)) + " failed"};
        break;
      }
      const auto now = clock_type::now();
      if (now > deadline) {
        err = status{errc::timeout, "collective #" + std::to_string(seq_) + " did not complete within " +
                                        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout).count()) +
                                        " ms (rank " + std::to_string(rank_) + ": " + std::to_string(recvs_done) + "/" +
                                        std::to_string(recv_order.size()) + " chunks received, " +
                                        std::to_string(sends_done) + "/" + std::to_string(sends_total) + " sent)"};
        break;
      }
      if (progressed) {
        idle_since = now;
        continue;
      }
      // Idle: spin briefly, then yield the core, then nap.
      const auto idle = now - idle_since;
      if (idle < 20us)
        continue;
      if (idle < 2ms)
        sched_yield();
      else
        std::this_thread::sleep_for(50us);
    }
    if (!err.ok())
      return fail(err);
    return {};
  }

  void on_posted(record& r, void* req) {
    if (req == nullptr) {
      r.done = true;
      completed_.push_back(&r);
    } else if (UCS_PTR_IS_ERR(req)) {
      r.done = true;
      r.result = UCS_PTR_STATUS(req);
      completed_.push_back(&r);
    } else {
      r.request = req;
      r.outstanding = true;
    }
  }

  static void complete(void* request, ucs_status_t s, void* user_data) {
    auto* r = static_cast<record*>(user_data);
    r->result = s;
    r->done = true;
    r->outstanding = false;
    r->request = nullptr;
    ucp_request_free(request);
    if (r->seq == r->self->seq_)
      r->self->completed_.push_back(r);
  }
  static void send_callback(void* request, ucs_status_t s, void* user_data) { complete(request, s, user_data); }
  static void recv_callback(void* request, ucs_status_t s, const ucp_tag_recv_info_t*, void* user_data) {
    complete(request, s, user_data);
  }
  static void error_callback(void* arg, ucp_ep_h, ucs_status_t) {
    static_cast<impl*>(arg)->peer_error_.store(true);
  }

  // Breaks the communicator and returns at once. Posted receives are cancelled; the endpoints
  // stay open until destruction, because force-closing an endpoint without peer error handling
  // (the shared-memory path) is undefined in UCX and a flush would wait for a dead peer. A late
  // write from a neighbour still inside the same call is harmless: recovery rolls every rank back
  // to a snapshot only after all of them have left the old epoch.
  status fail(status why) {
    cancel_receives();
    if (broken_.ok())
      broken_ = why;
    return why;
  }

  void cancel_receives() {
    const auto cancel = [&](op_state& op) {
      for (auto& r : op.records)
        if (r.outstanding && r.request != nullptr && !r.is_send)
          ucp_request_cancel(worker_->get(), r.request);
    };
    if (op_)
      cancel(*op_);
    for (auto& old : lingering_)
      cancel(*old);
    const auto limit = clock_type::now() + 50ms;
    while (outstanding_receives() && clock_type::now() < limit)
      ucp_worker_progress(worker_->get());
    completed_.clear();
  }

  int rank_;
  int size_;
  ring_options options_;
  // Declared before the worker so they outlive it: destroying a worker completes (and calls
  // back for) every request still in flight.
  struct op_state {
    std::vector<record> records;
  };
  std::unique_ptr<op_state> op_;
  std::vector<std::unique_ptr<op_state>> lingering_;
  std::vector<record*> completed_;
  std::vector<record*> handling_;
  std::vector<std::byte> scratch_;
  std::vector<std::byte> work_;
  std::vector<int> free_slots_;
  std::optional<ucx_context> context_;
  std::optional<ucx_worker> worker_;
  std::string host_;
  std::vector<std::byte> address_;
  ucp_ep_h right_ = nullptr;
  bool right_local_ = false;
  std::size_t chunk_ = 0;
  std::uint32_t seq_ = 0;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> peer_error_{false};
  status broken_;
  ucp_ep_h left_ = nullptr;
  std::uint8_t fin_byte_out_ = 1;
  std::uint8_t fin_byte_in_ = 0;
  static constexpr std::uint32_t fin_step = 0xfff;
};

expected<std::unique_ptr<ring_communicator>> ring_communicator::create(int rank, int size, const ring_options& options) {
  auto p = std::make_unique<impl>(rank, size, options);
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
void ring_communicator::abort() noexcept { impl_->abort(); }
bool ring_communicator::aborted() const noexcept { return impl_->aborted(); }
bool ring_communicator::neighbour_is_local() const noexcept { return impl_->neighbour_is_local(); }

}  // namespace rekindle::transport
