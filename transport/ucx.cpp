#include "transport/ucx.hpp"

#include <cstdlib>
#include <cstring>

namespace rekindle::transport {

status ucx_status(ucs_status_t s, std::string_view what) {
  if (s == UCS_OK)
    return {};
  errc code = errc::io_error;
  switch (s) {
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
      code = errc::peer_failed;
      break;
    case UCS_ERR_CANCELED:
      code = errc::aborted;
      break;
    case UCS_ERR_TIMED_OUT:
      code = errc::timeout;
      break;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      code = errc::resource_exhausted;
      break;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      code = errc::invalid_argument;
      break;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NO_DEVICE:
      code = errc::unsupported;
      break;
    case UCS_ERR_BUSY:
      code = errc::unavailable;
      break;
    default:
      break;
  }
  return status{code, std::string{what} + ": " + ucs_status_string(s)};
}

expected<ucx_context> ucx_context::create(const ucx_options& options) {
  // A daemon restarted on the same port must be able to listen again at once. This is a setting
  // of UCX's TCP connection manager, which reads only the environment; a value the user set wins.
  setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
  ucp_config_t* config = nullptr;
  if (auto s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK)
    return ucx_status(s, "reading the UCX configuration");
  std::unique_ptr<ucp_config_t, void (*)(ucp_config_t*)> config_guard{config, ucp_config_release};
  const auto modify = [&](const char* name, const std::string& value) -> status {
    if (value.empty())
      return {};
    return ucx_status(ucp_config_modify(config, name, value.c_str()),
                      std::string{"setting UCX_"} + name + "=" + value);
  };
  RK_RETURN_IF_ERROR(modify("NET_DEVICES", options.net_devices));
  RK_RETURN_IF_ERROR(modify("TLS", options.tls));
  RK_RETURN_IF_ERROR(modify("RNDV_SCHEME", options.rndv_scheme));

  ucp_params_t params;
  std::memset(&params, 0, sizeof params);
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = 0;
  if (options.active_messages)
    params.features |= UCP_FEATURE_AM;
  if (options.tags)
    params.features |= UCP_FEATURE_TAG;
  if (options.wakeup)
    params.features |= UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  ucp_context_h handle = nullptr;
  if (auto s = ucp_init(&params, config, &handle); s != UCS_OK)
    return ucx_status(s, "initialising UCX");
  ucx_context out;
  out.handle_.reset(handle);
  return out;
}

expected<ucx_worker> ucx_worker::create(const ucx_context& context, bool wakeup) {
  ucp_worker_params_t params;
  std::memset(&params, 0, sizeof params);
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  if (wakeup) {
    params.field_mask |= UCP_WORKER_PARAM_FIELD_EVENTS;
    params.events = UCP_WAKEUP_RX | UCP_WAKEUP_TX;
  }
  ucp_worker_h handle = nullptr;
  if (auto s = ucp_worker_create(context.get(), &params, &handle); s != UCS_OK)
    return ucx_status(s, "creating a UCX worker");
  ucx_worker out;
  out.handle_.reset(handle);
  return out;
}

expected<std::vector<std::byte>> ucx_worker::address() const {
  ucp_address_t* addr = nullptr;
  std::size_t len = 0;
  if (auto s = ucp_worker_get_address(handle_.get(), &addr, &len); s != UCS_OK)
    return ucx_status(s, "reading the UCX worker address");
  const auto* bytes = reinterpret_cast<const std::byte*>(addr);
  std::vector<std::byte> out(bytes, bytes + len);
  ucp_worker_release_address(handle_.get(), addr);
  return out;
}

expected<int> ucx_worker::event_fd() const {
  int fd = -1;
  if (auto s = ucp_worker_get_efd(handle_.get(), &fd); s != UCS_OK)
    return ucx_status(s, "reading the UCX worker event fd");
  return fd;
}

}  // namespace rekindle::transport
