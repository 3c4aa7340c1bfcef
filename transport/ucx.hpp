#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.hpp"

namespace rekindle::transport {

/// Converts a UCX status into ours, naming what failed.
status ucx_status(ucs_status_t s, std::string_view what);

/// Settings of a UCP context.
struct ucx_options {
  /// Active messages (the control plane).
  bool active_messages = true;
  /// Tag matching (the ring collectives).
  bool tags = false;
  /// Worker wake-up through an event fd (blocking progress).
  bool wakeup = true;
  /// UCX_NET_DEVICES; empty keeps UCX's choice.
  std::string net_devices;
  /// UCX_TLS; empty keeps UCX's choice.
  std::string tls;
  /// UCX_RNDV_SCHEME; empty keeps UCX's choice.
  std::string rndv_scheme;
};

/// A UCP context. Move-only; the context is cleaned up when the last owner goes.
///
/// Thread-safety: the handle may be shared by the workers it creates; creation and destruction
/// belong to one thread.
class ucx_context {
 public:
  static expected<ucx_context> create(const ucx_options& options);
  [[nodiscard]] ucp_context_h get() const noexcept { return handle_.get(); }

 private:
  struct deleter {
    void operator()(ucp_context_h c) const noexcept { ucp_cleanup(c); }
  };
  std::unique_ptr<std::remove_pointer_t<ucp_context_h>, deleter> handle_;
};

/// A UCP worker in single-thread mode: every call on it comes from the thread that drives it.
///
/// Thread-safety: none; owned and driven by one loop or one calling thread. Destroy it before its
/// context.
class ucx_worker {
 public:
  static expected<ucx_worker> create(const ucx_context& context, bool wakeup);
  [[nodiscard]] ucp_worker_h get() const noexcept { return handle_.get(); }
  /// The worker's address, for peers that connect by address (same host: shared memory).
  [[nodiscard]] expected<std::vector<std::byte>> address() const;
  /// The fd that becomes readable when the armed worker has events. REQUIRES: created with wakeup.
  [[nodiscard]] expected<int> event_fd() const;

 private:
  struct deleter {
    void operator()(ucp_worker_h w) const noexcept { ucp_worker_destroy(w); }
  };
  std::unique_ptr<std::remove_pointer_t<ucp_worker_h>, deleter> handle_;
};

}  // namespace rekindle::transport
