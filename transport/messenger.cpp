#include "transport/messenger.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/check.hpp"
#include "common/process.hpp"
#include "transport/handshake.hpp"
#include "transport/ucx.hpp"

namespace rekindle::transport {

std::uint64_t messenger_stats::dropped_total() const noexcept {
  std::uint64_t total = 0;
  for (auto d : dropped)
    total += d;
  return total;
}

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr unsigned frame_am_id = 7;

// UCX endpoints a client accepts on its one-shot listener while it waits for the server's
// attached; the first that presents the ticket is the server's.
constexpr std::size_t max_candidate_endpoints = 4;

// Connections that have not proved a token yet, at most; a new one beyond closes the oldest.
constexpr std::size_t max_pending_connections = 256;

// epoll keys: the three fds of the messenger, then one per peer's TCP connection.
constexpr std::uint64_t key_ucx = 1, key_wake = 2, key_listener = 3;
constexpr std::uint64_t key_peer_bit = 1ull << 63;

expected<sockaddr_storage> resolve(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = host.empty() ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const auto service = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result); rc != 0)
    return status{errc::invalid_argument, "cannot resolve '" + host + "': " + gai_strerror(rc)};
  sockaddr_storage out{};
  std::memcpy(&out, result->ai_addr, result->ai_addrlen);
  freeaddrinfo(result);
  return out;
}

std::string errno_text(int e) { return std::strerror(e); }

std::string describe(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  std::uint16_t port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return std::string{host} + ":" + std::to_string(port);
}

}  // namespace

class messenger::impl {
 public:
  impl(messenger_options options, messenger_handlers handlers)
      : options_(std::move(options)), handlers_(std::move(handlers)) {}

  ~impl() { stop(); }

  status init() {
    RK_ASSIGN_OR_RETURN(context_, ucx_context::create(ucx_options{.active_messages = true,
                                                                  .tags = false,
                                                                  .wakeup = true,
                                                                  .net_devices = options_.net_devices,
                                                                  .tls = options_.tls}));
    RK_ASSIGN_OR_RETURN(worker_, ucx_worker::create(*context_, true));
    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.id = frame_am_id;
    am.cb = &impl::am_callback;
    am.arg = this;
    RK_RETURN_IF_ERROR(ucx_status(ucp_worker_set_am_recv_handler(worker_->get(), &am), "registering the frame handler"));
    RK_ASSIGN_OR_RETURN(int efd, worker_->event_fd());
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (wake_fd_ < 0 || epoll_fd_ < 0)
      return status{errc::io_error, std::string{"creating the messenger's event fds: "} + std::strerror(errno)};
    RK_RETURN_IF_ERROR(watch(efd, key_ucx, EPOLLIN));
    RK_RETURN_IF_ERROR(watch(wake_fd_, key_wake, EPOLLIN));
    if (!options_.listen_host.empty())
      RK_RETURN_IF_ERROR(listen());
    thread_ = std::thread([this] { run(); });
    return {};
  }

  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }

  void post(std::function<void()> task) {
    {
      std::lock_guard lock{mutex_};
      posted_.push_back(std::move(task));
    }
    // A loop that is awake takes the task before it sleeps (it looks at posted_ after it says it
    // sleeps, under the same mutex): only a sleeping one needs the event, a system call each side.
    if (asleep_.exchange(false))
      wake();
  }

  [[nodiscard]] bool on_loop_thread() const noexcept { return std::this_thread::get_id() == loop_thread_id_; }

  void stop() {
    if (!thread_.joinable())
      return;
    RK_CHECK(!on_loop_thread(), "messenger::shutdown() called from its own loop thread");
    stopping_.store(true);
    wake();
    thread_.join();
    if (listen_fd_ >= 0)
      ::close(listen_fd_);
    listen_fd_ = -1;
    if (wake_fd_ >= 0)
      ::close(wake_fd_);
    if (epoll_fd_ >= 0)
      ::close(epoll_fd_);
    wake_fd_ = epoll_fd_ = -1;
  }

  messenger_stats stats() const noexcept {
    messenger_stats s;
    s.frames_sent = frames_sent_.load();
    s.frames_received = frames_received_.load();
    s.bytes_sent = bytes_sent_.load();
    s.bytes_received = bytes_received_.load();
    for (std::size_t i = 0; i < drop_reason_count; ++i)
      s.dropped[i] = dropped_[i].load();
    s.peers_refused = peers_refused_.load();
    s.peers_lost = peers_lost_.load();
    return s;
  }

  void count_drop(drop_reason r) noexcept { dropped_[static_cast<std::size_t>(r)].fetch_add(1); }

  // ---- called on the loop thread -------------------------------------------------------------

  // Opens the TCP connection the handshake runs on; the rest follows in on_socket.
  void do_connect(const std::string& host, std::uint16_t port, std::function<void(expected<peer_info>)> done) {
    const auto remote = host + ":" + std::to_string(port);
    auto addr = resolve(host, port);
    if (!addr) {
      defer([done = std::move(done), err = addr.error()] { done(err); });
      return;
    }
    const int fd = ::socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const socklen_t len = addr->ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (fd < 0 || (::connect(fd, reinterpret_cast<const sockaddr*>(&*addr), len) != 0 && errno != EINPROGRESS)) {
      const int e = errno;
      if (fd >= 0)
        ::close(fd);
      defer([done = std::move(done), err = status{errc::peer_failed, "connecting to " + remote + ": " + errno_text(e)}] {
        done(err);
      });
      return;
    }
    auto& p = add_peer(fd, true);
    p.remote = remote;
    p.connect_done = std::move(done);
    p.state = peer_state::connecting;
    if (auto s = watch(fd, key_peer_bit | p.info.id.value(), EPOLLIN | EPOLLOUT | EPOLLRDHUP); !s.ok())
      drop_peer(p, std::move(s));
  }

  void do_send(peer_id to, frame f, std::function<void(status)> done) {
    auto it = peers_.find(to.value());
    if (it == peers_.end() || it->second.state != peer_state::up) {
      if (done)
        defer([done = std::move(done), to] {
          done(status{errc::peer_failed, "peer " + std::to_string(to.value()) + " is not connected"});
        });
      return;
    }
    if (f.payload.size() > options_.max_frame_size) {
      if (done)
        defer([done = std::move(done), n = f.payload.size(), max = options_.max_frame_size] {
          done(status{errc::out_of_range, "frame payload of " + std::to_string(n) +
                                              " bytes exceeds transport.max_frame_size (" + std::to_string(max) + ")"});
        });
      return;
    }
    RK_CHECK_LT(f.header.type, first_reserved_type, "frame types from first_reserved_type up belong to the transport");
    f.header.src_node = options_.node;
    send_frame(it->second, std::move(f.header), std::move(f.payload), std::move(done));
  }

  void do_close(peer_id id, status why) {
    auto it = peers_.find(id.value());
    if (it != peers_.end())
      drop_peer(it->second, std::move(why));
  }

  void do_throttle(std::uint32_t node, double bytes_per_second, clock_type::time_point until) {
    spdlog::warn("slow link drill: traffic to node {} limited to {:.1f} MB/s for {} ms", node, bytes_per_second / 1e6,
                 std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count());
    auto& t = throttles_[node];
    t.bytes_per_second = bytes_per_second;
    t.until = until;
    t.next = std::max(t.next, clock_type::now());
  }

  void do_cut_off(std::uint32_t node, clock_type::time_point until) {
    spdlog::warn("partition: traffic with node {} dropped for {} ms", node,
                 std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count());
    cut_until_[node] = until;
  }

 private:
  enum class peer_state {
    connecting,         // client: TCP connect in progress
    handshaking,        // the token handshake on the TCP connection (its phase in hs)
    awaiting_attached,  // client: ready sent, waiting for the server's endpoint to present the ticket
    up,
  };

  struct peer {
    peer_info info;
    // The TCP connection of the handshake, kept open while the peer lives: its end is the peer's.
    int fd = -1;
    std::vector<std::byte> in, out;
    std::optional<handshake> hs;
    ucp_ep_h ep = nullptr;
    // Client: the one-shot listener the server connects its UCX endpoint to, and the endpoints it
    // accepted that have not presented the ticket yet.
    ucp_listener_h listener = nullptr;
    std::unique_ptr<std::pair<impl*, std::uint64_t>> listener_arg;
    std::vector<ucp_ep_h> candidates;
    peer_state state = peer_state::handshaking;
    std::string remote;
    clock_type::time_point created;
    clock_type::time_point last_recv;
    clock_type::time_point last_send;
    clock_type::time_point last_drop_log;
    std::uint64_t drops_not_logged = 0;
    std::function<void(expected<peer_info>)> connect_done;
  };

  // One send in flight: its header must live until UCX completes it.
  struct send_op {
    impl* self = nullptr;
    std::vector<std::byte> header;
    shared_bytes payload;
    std::function<void(status)> done;
  };

  // One rendezvous receive in flight.
  struct recv_op {
    impl* self = nullptr;
    std::uint64_t peer = 0;
    frame_header header;
    std::vector<std::byte> buffer;
  };

  status watch(int fd, std::uint64_t key, std::uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = key;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0)
      return status{errc::io_error, "epoll_ctl: " + errno_text(errno)};
    return {};
  }

  // The daemon's port is a plain TCP listener of this process: nothing a peer sends reaches UCX
  // before the peer has proved it holds a token.
  status listen() {
    const auto where = options_.listen_host + ":" + std::to_string(options_.listen_port);
    RK_ASSIGN_OR_RETURN(auto addr, resolve(options_.listen_host, options_.listen_port));
    listen_fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0)
      return status{errc::io_error, "listening on " + where + ": " + errno_text(errno)};
    const int one = 1;
    (void)::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const socklen_t len = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), len) != 0 || ::listen(listen_fd_, 512) != 0) {
      const int e = errno;
      return status{e == EADDRINUSE ? errc::unavailable : errc::io_error, "listening on " + where + ": " + errno_text(e)};
    }
    sockaddr_storage bound{};
    socklen_t bound_len = sizeof bound;
    if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0)
      return status{errc::io_error, "querying the listener's port: " + errno_text(errno)};
    port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                                        : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    return watch(listen_fd_, key_listener, EPOLLIN);
  }

  void on_listener() {
    for (int i = 0; i < 64; ++i) {
      sockaddr_storage from{};
      socklen_t len = sizeof from;
      const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0)
        return;
      // A flood of connections that never authenticate evicts its own oldest, so a real peer,
      // whose handshake takes a round trip or two, still gets through.
      if (auto oldest = oldest_pending(); oldest != nullptr) {
        peers_refused_.fetch_add(1);
        const auto now = clock_type::now();
        if (now - last_overflow_log_ > 1s) {
          spdlog::warn("connection from {} closed: {} connections have not completed the handshake", oldest->remote,
                       max_pending_connections);
          last_overflow_log_ = now;
        }
        drop_peer(*oldest, status{errc::resource_exhausted, "too many connections in the handshake"});
      }
      auto& p = add_peer(fd, false);
      p.remote = describe(from);
      if (auto s = watch(fd, key_peer_bit | p.info.id.value(), EPOLLIN | EPOLLRDHUP); !s.ok())
        drop_peer(p, std::move(s));
    }
  }

  // The oldest inbound connection that has not proved a token yet, when there are too many.
  peer* oldest_pending() {
    std::size_t n = 0;
    peer* oldest = nullptr;
    for (auto& [id, p] : peers_) {
      if (!p.hs->pending())
        continue;
      ++n;
      if (oldest == nullptr || p.created < oldest->created)
        oldest = &p;
    }
    return n >= max_pending_connections ? oldest : nullptr;
  }

  // Waits up to `timeout_ms` for socket events and handles them; true when there were any but
  // the UCX worker's.
  bool poll_sockets(int timeout_ms) {
    epoll_event events[64];
    const int n = epoll_wait(epoll_fd_, events, 64, timeout_ms);
    bool any = false;
    for (int i = 0; i < n; ++i) {
      const auto key = events[i].data.u64;
      if (key == key_ucx)
        continue;
      any = true;
      if (key == key_wake) {
        std::uint64_t drained = 0;
        (void)!::read(wake_fd_, &drained, sizeof drained);  // an eventfd's one read takes all
      } else if (key == key_listener) {
        on_listener();
      } else if ((key & key_peer_bit) != 0) {
        if (auto it = peers_.find(key & ~key_peer_bit); it != peers_.end())
          on_socket(it->second, events[i].events);
      }
    }
    return any;
  }

  void on_socket(peer& p, std::uint32_t events) {
    if (p.state == peer_state::connecting) {
      if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0)
        return;
      int err = 0;
      socklen_t len = sizeof err;
      (void)::getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0)
        return drop_peer(p, status{errc::peer_failed, "connecting to " + p.remote + ": " + errno_text(err)});
      p.state = peer_state::handshaking;
      auto hello = p.hs->hello();
      if (!tcp_send(p, hello.type, std::move(hello.payload)))
        return;
    }
    if ((events & EPOLLOUT) != 0 && !flush(p))
      return;
    if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) == 0)
      return;
    std::byte buf[4096];
    while (true) {
      const auto n = ::recv(p.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        if (p.state == peer_state::up || p.state == peer_state::awaiting_attached)
          return handshake_failed(p, "bytes after the handshake on the connection from " + p.remote);
        p.in.insert(p.in.end(), buf, buf + n);
        if (!parse_tcp(p))
          return;
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
      if (n < 0 && errno == EINTR)
        continue;
      const auto why = n == 0 ? std::string{"closed"} : errno_text(errno);
      if (p.state == peer_state::up)
        return drop_peer(p, status{errc::peer_failed, "connection to " + (p.info.name.empty() ? p.remote : p.info.name) +
                                                          " " + why});
      return drop_peer(p, status{errc::peer_failed, "the connection to " + p.remote + " " + why + " during the handshake"});
    }
  }

  // Reads whole handshake frames from p.in; false when the peer was dropped.
  bool parse_tcp(peer& p) {
    while (true) {
      auto cut = next_handshake_frame(p.in);
      if (cut.what == handshake_cut::result::need_more)
        return true;
      if (cut.what == handshake_cut::result::malformed) {
        count_drop(cut.reason);
        handshake_failed(p, "malformed handshake frame from " + p.remote + ": " + cut.why);
        return false;
      }
      frames_received_.fetch_add(1);
      bytes_received_.fetch_add(cut.wire_size);
      if (is_cut(cut.header.src_node)) {
        count_drop(drop_reason::partitioned);
        continue;
      }
      const auto id = p.info.id.value();
      handle_handshake(p, cut.header, cut.payload);
      if (!peers_.contains(id))
        return false;
    }
  }

  // Queues a handshake frame on the TCP connection; false when the peer was dropped.
  bool tcp_send(peer& p, std::uint16_t type, std::vector<std::byte> payload) {
    frame_header h;
    h.type = type;
    h.src_node = options_.node;
    const auto header = encode_header(h, payload);
    p.out.insert(p.out.end(), header.begin(), header.end());
    p.out.insert(p.out.end(), payload.begin(), payload.end());
    frames_sent_.fetch_add(1);
    bytes_sent_.fetch_add(header.size() + payload.size());
    return flush(p);
  }

  // Writes what the socket takes now; the rest waits for EPOLLOUT. False when the peer was dropped.
  bool flush(peer& p) {
    while (!p.out.empty()) {
      const auto n = ::send(p.fd, p.out.data(), p.out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        break;
      if (n < 0) {
        drop_peer(p, status{errc::peer_failed, "writing to " + p.remote + ": " + errno_text(errno)});
        return false;
      }
      p.out.erase(p.out.begin(), p.out.begin() + n);
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (p.out.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT));
    ev.data.u64 = key_peer_bit | p.info.id.value();
    (void)epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, p.fd, &ev);
    return true;
  }

  void wake() noexcept {
    const std::uint64_t one = 1;
    if (wake_fd_ >= 0)
      (void)!::write(wake_fd_, &one, sizeof one);
  }

  void defer(std::function<void()> f) { deferred_.push_back(std::move(f)); }

  // When tick() last ran. Loop thread only.
  clock_type::time_point last_tick_{};

  // Partition drills: node → until when its traffic is dropped. Loop thread only.
  std::map<std::uint32_t, clock_type::time_point> cut_until_;
  bool is_cut(std::uint32_t node) {
    const auto it = cut_until_.find(node);
    if (it == cut_until_.end())
      return false;
    if (clock_type::now() < it->second)
      return true;
    spdlog::warn("partition from node {} ends", node);
    cut_until_.erase(it);
    return false;
  }

  // Slow link drills: node → the rate its frames leave at, until when, and what waits.
  // Loop thread only.
  struct held_frame {
    peer_id to;
    frame_header header;
    shared_bytes payload;
    std::function<void(status)> done;
    clock_type::time_point leave;
  };
  struct throttle {
    double bytes_per_second = 0;
    clock_type::time_point until;
    // When the link is free again: the last held frame's bytes have crossed it.
    clock_type::time_point next;
    std::deque<held_frame> queue;
  };
  std::map<std::uint32_t, throttle> throttles_;
  static std::size_t encoded_size(std::size_t payload) noexcept { return frame_fixed_size + payload; }
  bool is_throttled(std::uint32_t node) const {
    const auto it = throttles_.find(node);
    return it != throttles_.end() && clock_type::now() < it->second.until;
  }
  // A frame of `bytes` starts crossing the link when it is free and has crossed it `bytes` at the
  // rate later: when it may leave.
  static clock_type::time_point pace(throttle& t, std::size_t bytes) {
    t.next = std::max(t.next, clock_type::now()) +
             std::chrono::duration_cast<clock_type::duration>(
                 std::chrono::duration<double>(static_cast<double>(bytes) / t.bytes_per_second));
    return t.next;
  }
  // Sends the held frames whose time has come (all of them once the drill is over); returns true
  // if one left, and lowers `wake` to when the next one may.
  bool release_throttled(clock_type::time_point& wake) {
    bool sent = false;
    for (auto it = throttles_.begin(); it != throttles_.end();) {
      auto& t = it->second;
      const bool over = clock_type::now() >= t.until;
      while (!t.queue.empty() && (over || clock_type::now() >= t.queue.front().leave)) {
        auto f = std::move(t.queue.front());
        t.queue.pop_front();
        sent = true;
        const auto p = peers_.find(f.to.value());
        if (p == peers_.end() || p->second.state != peer_state::up) {
          if (f.done)
            defer([done = std::move(f.done), to = f.to] {
              done(status{errc::peer_failed, "peer " + std::to_string(to.value()) + " is not connected"});
            });
          continue;
        }
        send_now(p->second, std::move(f.header), std::move(f.payload), std::move(f.done));
      }
      if (over && t.queue.empty()) {
        spdlog::warn("slow link drill on node {} ends", it->first);
        it = throttles_.erase(it);
        continue;
      }
      wake = std::min(wake, t.queue.empty() ? t.until : std::min(t.queue.front().leave, t.until));
      ++it;
    }
    return sent;
  }

  // The longest the loop sleeps without a deadline: a keep-alive's interval, and often enough
  // (four times a peer timeout) that a longer gap between its ticks is its own absence.
  [[nodiscard]] clock_type::duration longest_sleep() const {
    return std::min<clock_type::duration>(options_.keepalive, options_.peer_timeout / 4);
  }

  // The loop: posted tasks, UCX progress, deferred callbacks, timers; poll while busy, else block.
  void run() {
    name_this_thread("rk-messenger");
    loop_thread_id_ = std::this_thread::get_id();
    auto last_active = clock_type::now();
    auto next_tick = last_active + longest_sleep();
    last_tick_ = last_active;
    std::vector<std::function<void()>> tasks;
    while (true) {
      {
        std::lock_guard lock{mutex_};
        tasks.swap(posted_);
      }
      bool active = !tasks.empty();
      for (auto& t : tasks)
        t();
      tasks.clear();
      if (stopping_.load())
        break;
      while (ucp_worker_progress(worker_->get()) != 0)
        active = true;
      // Work after the UCX progress (a deferred callback, a throttled frame released) may have
      // sent: one more pass before the loop sleeps. The tasks ran before the progress, which has
      // taken what they sent.
      bool again = false;
      while (!deferred_.empty()) {
        auto f = std::move(deferred_.front());
        deferred_.pop_front();
        f();
        again = true;
      }
      auto wake = clock_type::time_point::max();
      if (!throttles_.empty() && release_throttled(wake))
        again = true;
      const auto now = clock_type::now();
      if (now >= next_tick)
        next_tick = tick(now);
      if (active || again)
        last_active = now;
      // The sockets are polled here only by a loop that will not sleep now; a sleep's wait takes
      // their events (level-triggered: none is missed). A message's wake-up is then one wait, the
      // progress that takes it, the arm and the next wait, not two passes of polls.
      if (again || !deferred_.empty() || now - last_active < options_.spin) {
        (void)poll_sockets(0);
        continue;
      }
      asleep_.store(true);
      {
        std::lock_guard lock{mutex_};
        if (!posted_.empty()) {
          asleep_.store(false);
          continue;
        }
      }
      const auto s = ucp_worker_arm(worker_->get());
      if (s == UCS_ERR_BUSY) {
        asleep_.store(false);
        (void)poll_sockets(0);  // busy UCX traffic does not starve the sockets
        continue;
      }
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(std::min(next_tick, wake) - clock_type::now());
      (void)poll_sockets(static_cast<int>(std::max<std::int64_t>(wait.count(), 0)));
      asleep_.store(false);
    }
    close_all();
  }

  // Keep-alives out, timeouts in; returns when the next one is due. The loop wakes for the
  // earliest deadline, not on a fixed period, and at least every quarter of the peer timeout (or
  // keep-alive interval, if shorter): a new peer's deadlines come no later than that, and a loop
  // that ran that often knows a longer gap is its own absence.
  clock_type::time_point tick(clock_type::time_point now) {
    // A loop that did not run for a while (the process or the machine was paused) cannot tell a
    // silent peer from its own absence: every peer gets a new timeout from now.
    if (now - last_tick_ > options_.peer_timeout / 2) {
      spdlog::warn("this process did not run for {} ms; peers get a new timeout",
                   std::chrono::duration_cast<std::chrono::milliseconds>(now - last_tick_).count());
      for (auto& [id, p] : peers_)
        p.last_recv = std::max(p.last_recv, now);
    }
    last_tick_ = now;
    auto next = now + longest_sleep();
    std::vector<std::uint64_t> expired;
    for (auto& [id, p] : peers_) {
      if (p.state != peer_state::up) {
        if (now - p.created >= options_.handshake_timeout)
          expired.push_back(id);
        else
          next = std::min(next, p.created + options_.handshake_timeout);
        continue;
      }
      if (now - p.last_recv >= options_.peer_timeout) {
        expired.push_back(id);
        continue;
      }
      next = std::min(next, p.last_recv + options_.peer_timeout);
      if (now - p.last_send >= options_.keepalive) {
        send_internal(p, type_keepalive, {});
        // Sent, or queued behind a slow-link drill (which does not count it sent yet): either
        // way the next one is a whole interval away, or the loop would spin queueing more.
        p.last_send = std::max(p.last_send, now);
      }
      next = std::min(next, p.last_send + options_.keepalive);
    }
    for (auto id : expired) {
      auto& p = peers_.at(id);
      const bool up = p.state == peer_state::up;
      drop_peer(p, status{up ? errc::timeout : errc::unauthenticated,
                          up ? "no frame from " + p.info.name + " (" + p.remote + ") for " +
                                   std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(options_.peer_timeout).count()) +
                                   " ms"
                             : "handshake with " + p.remote + " did not complete in time"});
    }
    return std::max(next, now + 1ms);  // never a deadline already past: the loop would spin
  }

  peer& add_peer(int fd, bool outbound) {
    const std::uint64_t id = next_peer_++;
    auto& p = peers_[id];
    p.info.id = peer_id{id};
    p.info.outbound = outbound;
    p.fd = fd;
    p.created = p.last_recv = p.last_send = clock_type::now();
    p.hs.emplace(outbound ? handshake::side::client : handshake::side::server,
                 handshake::settings{options_.token, options_.readonly_token, options_.name, {}});
    return p;
  }

  void attach_endpoint(peer& p, ucp_ep_h ep) {
    p.ep = ep;
    by_ep_[ep] = p.info.id.value();
  }

  // Removes the peer, force-closes its endpoint and reports the loss. The peer leaves the tables
  // before the endpoint closes, so an error callback raised by the close finds nothing.
  void drop_peer(peer& p, status why) {
    peer gone = std::move(p);
    const auto id = gone.info.id.value();
    peers_.erase(id);
    if (gone.fd >= 0)
      ::close(gone.fd);
    for (auto c : gone.candidates) {
      by_ep_.erase(c);
      close_endpoint(c, true);
    }
    if (gone.listener != nullptr)
      ucp_listener_destroy(gone.listener);
    if (gone.ep != nullptr) {
      by_ep_.erase(gone.ep);
      close_endpoint(gone.ep, true);
    }
    if (gone.state == peer_state::up) {
      peers_lost_.fetch_add(1);
      spdlog::info("peer down peer={} name=\"{}\" reason=\"{}\"", id, gone.info.name, why.message());
      if (handlers_.on_peer_down)
        defer([this, info = gone.info, why] { handlers_.on_peer_down(info, why); });
    } else if (gone.connect_done) {
      defer([done = std::move(gone.connect_done), why] { done(why); });
    }
  }

  // Force drops queued sends at once; a flush close delivers them first.
  void close_endpoint(ucp_ep_h ep, bool force) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* req = ucp_ep_close_nbx(ep, &param);
    if (req != nullptr && !UCS_PTR_IS_ERR(req))
      closing_.push_back(req);
  }

  void close_all() {
    for (auto& [node, t] : throttles_)
      for (auto& f : t.queue)
        if (f.done)
          defer([done = std::move(f.done)] { done(status{errc::aborted, "messenger shut down"}); });
    throttles_.clear();
    while (!peers_.empty())
      drop_peer(peers_.begin()->second, status{errc::aborted, "messenger shut down"});
    const auto deadline = clock_type::now() + 2s;
    while (!closing_.empty() && clock_type::now() < deadline) {
      ucp_worker_progress(worker_->get());
      std::erase_if(closing_, [](void* req) {
        if (ucp_request_check_status(req) == UCS_INPROGRESS)
          return false;
        ucp_request_free(req);
        return true;
      });
    }
    // Handlers of what was dropped during shutdown still run, in order.
    while (!deferred_.empty()) {
      auto f = std::move(deferred_.front());
      deferred_.pop_front();
      f();
    }
  }

  void send_internal(peer& p, std::uint16_t type, shared_bytes payload) {
    frame_header h;
    h.type = type;
    h.src_node = options_.node;
    send_frame(p, std::move(h), std::move(payload), {});
  }

  void send_frame(peer& p, frame_header h, shared_bytes payload, std::function<void(status)> done) {
    if (p.state == peer_state::up && is_throttled(p.info.node)) {
      // Held until its bytes would have crossed the link at its rate, behind those before it.
      auto& t = throttles_[p.info.node];
      const auto leave = pace(t, encoded_size(payload.size()));
      t.queue.push_back(held_frame{p.info.id, std::move(h), std::move(payload), std::move(done), leave});
      return;
    }
    send_now(p, std::move(h), std::move(payload), std::move(done));
  }

  void send_now(peer& p, frame_header h, shared_bytes payload, std::function<void(status)> done) {
    if (p.state == peer_state::up && is_cut(p.info.node)) {
      if (done)
        defer([done = std::move(done), node = p.info.node] {
          done(status{errc::unavailable, "node " + std::to_string(node) + " is cut off (partition drill)"});
        });
      return;
    }
    auto op = std::make_unique<send_op>();
    op->self = this;
    op->header = encode_header(h, payload.span());
    op->payload = std::move(payload);
    op->done = std::move(done);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_REPLY;
    param.cb.send = &impl::send_callback;
    param.user_data = op.get();
    const auto bytes = op->header.size() + op->payload.size();
    void* req = ucp_am_send_nbx(p.ep, frame_am_id, op->header.data(), op->header.size(), op->payload.data(),
                                op->payload.size(), &param);
    p.last_send = clock_type::now();
    if (req == nullptr) {
      finish_send(std::move(op), UCS_OK);
    } else if (UCS_PTR_IS_ERR(req)) {
      finish_send(std::move(op), UCS_PTR_STATUS(req));
    } else {
      (void)op.release();  // send_callback takes it back
    }
    frames_sent_.fetch_add(1);
    bytes_sent_.fetch_add(bytes);
  }

  void finish_send(std::unique_ptr<send_op> op, ucs_status_t s) {
    if (op->done)
      defer([done = std::move(op->done), st = ucx_status(s, "sending a frame")] { done(st); });
  }

  static void send_callback(void* request, ucs_status_t s, void* user_data) {
    std::unique_ptr<send_op> op{static_cast<send_op*>(user_data)};
    auto* self = op->self;
    ucp_request_free(request);
    self->finish_send(std::move(op), s);
  }

  static void error_callback(void* arg, ucp_ep_h ep, ucs_status_t s) {
    auto* self = static_cast<impl*>(arg);
    auto it = self->by_ep_.find(ep);
    if (it == self->by_ep_.end())
      return;
    auto& p = self->peers_.at(it->second);
    if (p.ep != ep) {  // an endpoint that never presented the ticket
      self->by_ep_.erase(it);
      std::erase(p.candidates, ep);
      self->close_endpoint(ep, true);
      return;
    }
    self->drop_peer(p, ucx_status(s, "connection to " + (p.info.name.empty() ? p.remote : p.info.name)));
  }

  static ucs_status_t am_callback(void* arg, const void* header, std::size_t header_length, void* data,
                                  std::size_t length, const ucp_am_recv_param_t* param) {
    return static_cast<impl*>(arg)->on_am(header, header_length, data, length, param);
  }

  ucs_status_t on_am(const void* header_bytes, std::size_t header_length, void* data, std::size_t length,
                     const ucp_am_recv_param_t* param) {
    frames_received_.fetch_add(1);
    bytes_received_.fetch_add(header_length + length);
    peer* p = nullptr;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0)
      if (auto it = by_ep_.find(param->reply_ep); it != by_ep_.end())
        p = &peers_.at(it->second);
    if (p == nullptr) {
      count_drop(drop_reason::unauthenticated);
      return UCS_OK;
    }
    frame_header h;
    std::string detail;
    const auto reason = decode_header({static_cast<const std::byte*>(header_bytes), header_length},
                                      options_.max_frame_size, h, &detail);
    if (reason != drop_reason::none) {
      reject(*p, reason, detail);
      return UCS_OK;
    }
    if (h.payload_length != length) {
      reject(*p, drop_reason::bad_length,
             "header says " + std::to_string(h.payload_length) + " payload bytes, " + std::to_string(length) + " arrived");
      return UCS_OK;
    }
    if (p->state == peer_state::awaiting_attached) {
      accept_attached(*p, param->reply_ep, h, {static_cast<const std::byte*>(data), length});
      return UCS_OK;
    }
    if (p->state != peer_state::up) {
      reject(*p, drop_reason::unauthenticated, "frame type " + std::to_string(h.type) + " before the handshake");
      return UCS_OK;
    }
    if (is_cut(h.src_node)) {
      count_drop(drop_reason::partitioned);
      return UCS_OK;
    }
    p->last_recv = clock_type::now();
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
      auto op = std::make_unique<recv_op>();
      op->self = this;
      op->peer = p->info.id.value();
      op->header = std::move(h);
      op->buffer.resize(length);
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      rp.cb.recv_am = &impl::recv_callback;
      rp.user_data = op.get();
      void* req = ucp_am_recv_data_nbx(worker_->get(), data, op->buffer.data(), length, &rp);
      if (req == nullptr) {
        auto* raw = op.release();
        defer([this, raw] { complete_recv(std::unique_ptr<recv_op>{raw}); });
      } else if (UCS_PTR_IS_ERR(req)) {
        spdlog::warn("receive failed peer={} reason=\"{}\"", p->info.id.value(), ucs_status_string(UCS_PTR_STATUS(req)));
      } else {
        (void)op.release();
      }
      return UCS_INPROGRESS;
    }
    std::vector<std::byte> payload(static_cast<const std::byte*>(data), static_cast<const std::byte*>(data) + length);
    accept(p->info.id.value(), std::move(h), std::move(payload));
    return UCS_OK;
  }

  static void recv_callback(void* request, ucs_status_t s, std::size_t, void* user_data) {
    std::unique_ptr<recv_op> op{static_cast<recv_op*>(user_data)};
    ucp_request_free(request);
    auto* self = op->self;
    if (s != UCS_OK) {
      spdlog::warn("receive failed peer={} reason=\"{}\"", op->peer, ucs_status_string(s));
      return;
    }
    self->defer([self, raw = op.release()] { self->complete_recv(std::unique_ptr<recv_op>{raw}); });
  }

  void complete_recv(std::unique_ptr<recv_op> op) {
    accept(op->peer, std::move(op->header), std::move(op->buffer));
  }

  // Counts every drop; logs at most one line per peer and second, so a flood cannot flood the log.
  void reject(peer& p, drop_reason reason, const std::string& detail) {
    count_drop(reason);
    const auto now = clock_type::now();
    if (now - p.last_drop_log < 1s) {
      ++p.drops_not_logged;
      return;
    }
    spdlog::warn("frame dropped peer={} remote={} reason={} detail=\"{}\" not_logged_since_last={}", p.info.id.value(),
                 p.remote, to_string(reason), detail, p.drops_not_logged);
    p.last_drop_log = now;
    p.drops_not_logged = 0;
  }

  // A frame passed its header checks: verify the payload, then handle or deliver it.
  void accept(std::uint64_t id, frame_header h, std::vector<std::byte> payload) {
    auto it = peers_.find(id);
    if (it == peers_.end())
      return;
    auto& p = it->second;
    if (const auto r = check_payload(h, payload); r != drop_reason::none) {
      reject(p, r, "frame type " + std::to_string(h.type) + " from node " + std::to_string(h.src_node));
      return;
    }
    if (h.type >= first_reserved_type) {
      handle_transport_frame(p, h, payload);
      return;
    }
    if (handlers_.on_frame) {
      defer([this, info = p.info, f = frame{std::move(h), shared_bytes{std::move(payload)}}]() mutable {
        handlers_.on_frame(info, std::move(f));
      });
    }
  }

  void handle_transport_frame(peer&, const frame_header& h, std::span<const std::byte>) {
    if (h.type != type_keepalive)
      count_drop(drop_reason::bad_header);
  }

  void handle_handshake(peer& p, const frame_header& h, std::span<const std::byte> payload) {
    auto step = p.hs->on_frame(h, payload);
    switch (step.what) {
      case handshake::step::action::fail:
        if (step.drop != drop_reason::none)
          count_drop(step.drop);
        return handshake_failed(p, step.why + " (from " + p.remote + ")");
      case handshake::step::action::refuse: {
        peers_refused_.fetch_add(1);
        spdlog::warn("peer refused remote={} name=\"{}\" reason=\"{}\"", p.remote, p.hs->peer_name(), step.why);
        if (tcp_send(p, step.reply.type, std::move(step.reply.payload)))
          drop_peer(p, status{errc::unauthenticated, step.why});
        return;
      }
      case handshake::step::action::send:
        if (p.hs->which() == handshake::side::server) {
          p.info.name = p.hs->peer_name();
          p.info.node = p.hs->peer_node();
          p.info.role = p.hs->role();
        }
        (void)tcp_send(p, step.reply.type, std::move(step.reply.payload));
        return;
      case handshake::step::action::listen: {
        p.info.name = p.hs->peer_name();
        p.info.node = p.hs->peer_node();
        p.info.role = p.hs->role();
        auto port = listen_once(p);
        if (!port)
          return drop_peer(p, port.error());
        p.state = peer_state::awaiting_attached;
        auto ready = p.hs->ready(static_cast<std::uint16_t>(*port));
        (void)tcp_send(p, ready.type, std::move(ready.payload));
        return;
      }
      case handshake::step::action::connect: {
        // The client proved it holds a token: this side connects UCX to the listener it opened
        // for this connection, at the address its TCP connection came from.
        sockaddr_storage addr{};
        socklen_t len = sizeof addr;
        if (::getpeername(p.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
          return drop_peer(p, status{errc::peer_failed, "the connection from " + p.remote + " is gone"});
        if (addr.ss_family == AF_INET6)
          reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = htons(step.port);
        else
          reinterpret_cast<sockaddr_in*>(&addr)->sin_port = htons(step.port);
        ucp_ep_params_t params{};
        params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                            UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
        params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
        params.sockaddr.addrlen = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
        // Control endpoints want to hear about a dead peer at once.
        params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        params.err_handler.cb = &impl::error_callback;
        params.err_handler.arg = this;
        ucp_ep_h ep = nullptr;
        if (auto s = ucp_ep_create(worker_->get(), &params, &ep); s != UCS_OK)
          return drop_peer(p, ucx_status(s, "connecting UCX to " + describe(addr)));
        attach_endpoint(p, ep);
        send_internal(p, type_attached, shared_bytes{p.hs->attached()});
        return peer_up(p);
      }
    }
  }

  // Client: a UCX listener for this connection alone, on the address its TCP connection leaves
  // from (so UCX picks the device that reaches the server). It lives until the server's endpoint
  // has presented the ticket.
  expected<std::uint32_t> listen_once(peer& p) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(p.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      return status{errc::io_error, "reading the local address of the connection to " + p.remote + ": " + errno_text(errno)};
    if (addr.ss_family == AF_INET6)
      reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = 0;
    else
      reinterpret_cast<sockaddr_in*>(&addr)->sin_port = 0;
    p.listener_arg = std::make_unique<std::pair<impl*, std::uint64_t>>(this, p.info.id.value());
    ucp_listener_params_t params{};
    params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    params.sockaddr.addrlen = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    params.conn_handler.cb = &impl::conn_callback;
    params.conn_handler.arg = p.listener_arg.get();
    if (auto s = ucp_listener_create(worker_->get(), &params, &p.listener); s != UCS_OK) {
      p.listener = nullptr;
      return ucx_status(s, "opening a UCX listener for " + p.remote);
    }
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    if (auto s = ucp_listener_query(p.listener, &attr); s != UCS_OK)
      return ucx_status(s, "querying a UCX listener's port");
    return attr.sockaddr.ss_family == AF_INET6
               ? ntohs(reinterpret_cast<const sockaddr_in6*>(&attr.sockaddr)->sin6_port)
               : ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
  }

  static bool same_host(const sockaddr_storage& a, const sockaddr_storage& b) {
    if (a.ss_family != b.ss_family)
      return false;
    if (a.ss_family == AF_INET)
      return reinterpret_cast<const sockaddr_in*>(&a)->sin_addr.s_addr ==
             reinterpret_cast<const sockaddr_in*>(&b)->sin_addr.s_addr;
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr, sizeof(in6_addr)) == 0;
  }

  static void conn_callback(ucp_conn_request_h request, void* arg) {
    const auto [self, id] = *static_cast<std::pair<impl*, std::uint64_t>*>(arg);
    auto it = self->peers_.find(id);
    if (it == self->peers_.end() || it->second.listener == nullptr)
      return;  // the listener is destroyed with its peer; nothing to accept
    auto& p = it->second;
    ucp_conn_request_attr_t attr{};
    attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    sockaddr_storage server{};
    socklen_t len = sizeof server;
    const bool known = ucp_conn_request_query(request, &attr) == UCS_OK &&
                       ::getpeername(p.fd, reinterpret_cast<sockaddr*>(&server), &len) == 0 &&
                       same_host(attr.client_address, server);
    if (!known || p.state != peer_state::awaiting_attached || p.candidates.size() >= max_candidate_endpoints) {
      self->count_drop(drop_reason::unauthenticated);
      (void)ucp_listener_reject(p.listener, request);
      return;
    }
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.conn_request = request;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &impl::error_callback;
    params.err_handler.arg = self;
    ucp_ep_h ep = nullptr;
    if (auto s = ucp_ep_create(self->worker_->get(), &params, &ep); s != UCS_OK) {
      spdlog::warn("UCX connection from {} refused reason=\"{}\"", p.remote, ucs_status_string(s));
      return;
    }
    p.candidates.push_back(ep);
    self->by_ep_[ep] = id;
  }

  // Client: a frame on an endpoint the one-shot listener accepted. The first attached with the
  // welcome's ticket makes that endpoint the peer's; anything else is dropped.
  void accept_attached(peer& p, ucp_ep_h from, const frame_header& h, std::span<const std::byte> payload) {
    const bool ok = p.hs->accepts_attached(h, payload) &&
                    std::find(p.candidates.begin(), p.candidates.end(), from) != p.candidates.end();
    if (!ok) {
      count_drop(drop_reason::unauthenticated);
      return;
    }
    std::erase(p.candidates, from);
    p.ep = from;
    for (auto c : p.candidates) {
      by_ep_.erase(c);
      close_endpoint(c, true);
    }
    p.candidates.clear();
    // The listener goes once UCX has returned from the callback that delivered this frame.
    defer([listener = std::exchange(p.listener, nullptr)] { ucp_listener_destroy(listener); });
    peer_up(p);
  }

  void peer_up(peer& p) {
    p.state = peer_state::up;
    p.last_recv = clock_type::now();
    spdlog::debug("peer up peer={} name=\"{}\" role={} remote={}", p.info.id.value(), p.info.name,
                  to_string(p.info.role), p.remote);
    if (p.connect_done)
      defer([done = std::move(p.connect_done), info = p.info] { done(info); });
    p.connect_done = nullptr;
    if (handlers_.on_peer_up)
      defer([this, info = p.info] { handlers_.on_peer_up(info); });
  }

  // Logs at most one line a second, so a flood of bad connections cannot flood the log.
  void handshake_failed(peer& p, const std::string& why) {
    const auto now = clock_type::now();
    if (now - last_handshake_log_ >= 1s) {
      spdlog::warn("handshake failed remote={} reason=\"{}\" not_logged_since_last={}", p.remote, why,
                   handshake_failures_not_logged_);
      last_handshake_log_ = now;
      handshake_failures_not_logged_ = 0;
    } else {
      ++handshake_failures_not_logged_;
    }
    drop_peer(p, status{errc::unauthenticated, why});
  }

  messenger_options options_;
  messenger_handlers handlers_;
  std::optional<ucx_context> context_;
  std::optional<ucx_worker> worker_;
  int listen_fd_ = -1;
  clock_type::time_point last_overflow_log_{};
  clock_type::time_point last_handshake_log_{};
  std::uint64_t handshake_failures_not_logged_ = 0;
  std::uint16_t port_ = 0;
  int wake_fd_ = -1;
  // The loop is about to wait or waits: a posted task must write wake_fd_.
  std::atomic<bool> asleep_{false};
  int epoll_fd_ = -1;
  std::thread thread_;
  std::thread::id loop_thread_id_;
  std::atomic<bool> stopping_{false};

  std::mutex mutex_;
  std::vector<std::function<void()>> posted_;

  // Loop-thread state.
  std::deque<std::function<void()>> deferred_;
  std::unordered_map<std::uint64_t, peer> peers_;
  std::unordered_map<ucp_ep_h, std::uint64_t> by_ep_;

  std::vector<void*> closing_;
  std::uint64_t next_peer_ = 1;

  std::atomic<std::uint64_t> frames_sent_{0}, frames_received_{0}, bytes_sent_{0}, bytes_received_{0};
  std::array<std::atomic<std::uint64_t>, drop_reason_count> dropped_{};
  std::atomic<std::uint64_t> peers_refused_{0}, peers_lost_{0};
};

expected<std::unique_ptr<messenger>> messenger::start(messenger_options options, messenger_handlers handlers) {
  auto p = std::make_unique<impl>(std::move(options), std::move(handlers));
  RK_RETURN_IF_ERROR(p->init());
  return std::unique_ptr<messenger>{new messenger{std::move(p)}};
}

messenger::messenger(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

messenger::~messenger() { shutdown(); }

std::uint16_t messenger::port() const noexcept { return impl_->port(); }

void messenger::connect(const std::string& host, std::uint16_t port, std::function<void(expected<peer_info>)> done) {
  impl_->post([this, host, port, done = std::move(done)]() mutable { impl_->do_connect(host, port, std::move(done)); });
}

expected<peer_info> messenger::connect_blocking(const std::string& host, std::uint16_t port,
                                                std::chrono::nanoseconds timeout) {
  RK_CHECK(!on_loop_thread(), "connect_blocking() would deadlock on the loop thread");
  auto promise = std::make_shared<std::promise<expected<peer_info>>>();
  auto future = promise->get_future();
  connect(host, port, [promise](expected<peer_info> r) { promise->set_value(std::move(r)); });
  if (future.wait_for(timeout) != std::future_status::ready)
    return status{errc::timeout, "no answer from " + host + ":" + std::to_string(port) + " within " +
                                     std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
                                     " ms"};
  return future.get();
}

void messenger::send(peer_id to, frame f, std::function<void(status)> done) {
  impl_->post([this, to, f = std::move(f), done = std::move(done)]() mutable {
    impl_->do_send(to, std::move(f), std::move(done));
  });
}

void messenger::close(peer_id peer) {
  impl_->post([this, peer] { impl_->do_close(peer, status{errc::aborted, "closed by this side"}); });
}

void messenger::cut_off(std::uint32_t node, std::chrono::nanoseconds duration) {
  const auto until = std::chrono::steady_clock::now() + duration;
  impl_->post([p = impl_.get(), node, until] { p->do_cut_off(node, until); });
}

void messenger::throttle(std::uint32_t node, double bytes_per_second, std::chrono::nanoseconds duration) {
  RK_CHECK(bytes_per_second > 0, "a slow link drill needs a positive rate");
  const auto until = std::chrono::steady_clock::now() + duration;
  impl_->post([p = impl_.get(), node, bytes_per_second, until] { p->do_throttle(node, bytes_per_second, until); });
}

void messenger::post(std::function<void()> task) { impl_->post(std::move(task)); }

void messenger::count_drop(drop_reason r) noexcept { impl_->count_drop(r); }

messenger_stats messenger::stats() const noexcept { return impl_->stats(); }

bool messenger::on_loop_thread() const noexcept { return impl_->on_loop_thread(); }

void messenger::shutdown() { impl_->stop(); }

}  // namespace rekindle::transport
