#pragma once

#include <string_view>

#include "common/status.hpp"

namespace rekindle {

/// Tells the service manager (systemd's Type=notify) about this process: `state` is newline-
/// separated assignments such as "READY=1\nSTATUS=listening on 10.0.0.5:7100". Sent as one datagram
/// to $NOTIFY_SOCKET (a path, or an abstract name starting with '@'); without it, nothing is done
/// and the result is ok. An error names the socket.
status notify_service_manager(std::string_view state);

}  // namespace rekindle
