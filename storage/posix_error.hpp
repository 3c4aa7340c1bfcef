#pragma once

#include <string>

#include "common/status.hpp"

namespace rekindle::storage::detail {

/// Converts an errno value into a status (private to storage/): ENOSPC, EFBIG, EDQUOT, ENOMEM →
/// resource_exhausted; EACCES, EPERM, EROFS → permission_denied; ENOENT → not_found; EEXIST →
/// already_exists; EINTR, EAGAIN → unavailable; others → io_error. The message is
/// "`what`: strerror(err)".
[[nodiscard]] status from_errno(int err, const std::string& what);

}  // namespace rekindle::storage::detail
